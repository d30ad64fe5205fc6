"""``check`` and ``doctor``: gather this machine's facts (or replay saved ones), run the
checks, add the smoke job for ``doctor``, apply the policy, emit.

The gather starts as soon as the command line is known to be good, and the rest of the
doctor (the check catalogue, the runner, the renderers) is imported while it runs: the
torch probe is a child process importing torch, so the parent's own imports cost no wall
time beside it. So this module imports at its top only what starting the gather needs;
the smoke job's modules load only when ``doctor`` runs it.
"""

from __future__ import annotations

import os
import re
import socket
import sys
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar

from ddp_doctor.app.requests import (
    GLOBAL_BATCH,
    GPUS,
    PLAN_WORKERS,
    PROBE_TIMEOUT,
    Common,
    MachineRequest,
    check_common,
    interpreter,
    load_policy,
)
from ddp_doctor.facts.gather import PROBE_START_WAIT_S, GatherOptions, gather
from ddp_doctor.facts.plan import apply_plan, make_plan
from ddp_doctor.facts.probe_deadline import TORCH_PROBE_TIMEOUT_S
from ddp_doctor.facts.seam import RealEnv
from ddp_doctor.facts.snapshot import (
    Facts,
    FactsFileError,
    save_facts,
)
from ddp_doctor.usage import (
    OutputPath,
    UsageError,
    one_of,
)

if TYPE_CHECKING:
    from ddp_doctor.model import Finding, Report

T = TypeVar("T")


def run_check(common: Common, machine: MachineRequest) -> int:
    """Gather facts (or load saved ones) and run the checks: the CI pre-flight."""
    return _examine(common, machine, smoke=False)


def run_doctor(common: Common, machine: MachineRequest, *, smoke: bool = True,
               device: str = "auto") -> int:
    """The checks, then the smoke job unless ``smoke`` is off or saved facts are replayed;
    ``device`` is the smoke job's --device (auto: the GPUs when torch can use them)."""
    from ddp_doctor.smoke.launch import CHOICES

    one_of("--device", device, CHOICES["device"])
    return _examine(common, machine, smoke=smoke and machine.facts is None, device=device)


def node_path(path: Path, environ: Optional[Mapping[str, str]] = None,
              host: Optional[str] = None) -> Path:
    """--save-facts with Slurm's filename patterns expanded, so that one ``srun`` over
    many nodes writes one snapshot per node: ``%n`` the node's index in the job
    (SLURM_NODEID, 0 outside Slurm), ``%N`` the short host name, ``%%`` a percent sign."""
    text = str(path)
    if "%" not in text:
        return path
    env = os.environ if environ is None else environ
    name = (host or socket.gethostname()).split(".")[0]
    values = {"n": env.get("SLURM_NODEID", "0"), "N": name, "%": "%"}
    return Path(re.sub(r"%([nN%])", lambda m: values[m.group(1)], text))


def _examine(common: Common, machine: MachineRequest, smoke: bool, device: str = "auto"
             ) -> int:
    if machine.save_facts is not None:
        machine = replace(machine, save_facts=node_path(machine.save_facts))
    save_path = str(machine.save_facts) if machine.save_facts is not None else None
    check_common(common, OutputPath("--save-facts", save_path))
    if machine.facts is not None and machine.python:
        raise UsageError("--facts replays saved facts; it cannot be combined with --python")
    plan = make_plan(gpus=GPUS.whole_number(machine.gpus),
                     batch=GLOBAL_BATCH.whole_number(machine.global_batch),
                     workers=PLAN_WORKERS.whole_number(machine.workers))
    probe_timeout = PROBE_TIMEOUT.number(machine.probe_timeout) or TORCH_PROBE_TIMEOUT_S
    policy = load_policy(common.config)
    # A bad --python is a one-line error before anything is shown or gathered.
    python = interpreter(machine.python) if machine.python else sys.executable
    # Every input is good: start the gather now, and load the rest while it runs, once the
    # torch probe's child is starting (these imports would hold the GIL its thread needs).
    starting = threading.Event()
    gathering = _in_background(lambda: gather_facts(machine, python, probe_timeout,
                                                    keep_smi_text=common.bundle is not None,
                                                    starting=starting))
    gathering.add_done_callback(lambda _: starting.set())  # a gather that failed first
    starting.wait(PROBE_START_WAIT_S)
    from ddp_doctor import runner
    from ddp_doctor.app.outputs import confirm, emit, phase, remove_kept
    from ddp_doctor.checklist import load_catalogue
    from ddp_doctor.policy.apply import apply_policy
    from ddp_doctor.redact.redactor import Redactor

    with phase(common, f"gathering facts (driver, CUDA, torch, host; the torch probe has "
                        f"{probe_timeout:.0f} s)", live=machine.facts is None):
        catalogue = load_catalogue()
        facts, source = gathering.result()
    apply_plan(facts, plan)
    if machine.save_facts is not None:
        try:
            save_facts(facts, machine.save_facts,
                       Redactor.for_run(facts, anonymize=common.anonymize))
        except OSError as exc:
            raise UsageError(f"--save-facts {machine.save_facts}: cannot write: "
                             f"{exc.strerror or exc}") from None
        confirm(common, "facts snapshot", str(machine.save_facts))
    report = runner.build_report(catalogue, facts, facts_source=source)
    note = _ultralytics_note((facts.get("python") or {}).get("packages"), python)
    if note is not None and not common.quiet:  # stderr: stdout may carry the report
        sys.stderr.write(f"ddp-doctor: {note}\n")
    kept: Optional[str] = None
    try:
        if smoke:
            report, kept = _with_smoke(report, facts, plan, common,
                                       scaling=policy is not None and policy.wants_scaling,
                                       device=device)
        if policy is not None:
            report = apply_policy(report, policy, facts)
        emit(report, common, facts=facts, smoke_dir=kept)
    finally:
        remove_kept(kept)
    return report.exit_code(common.strict)


def _in_background(work: Callable[[], T]) -> Future[T]:
    """Run WORK in a daemon thread; its result, or what it raised, comes from the future.

    A thread, not a process: the gather's slow parts are child processes already, and the
    thread only waits for them. Daemon, like the gather's own probe threads, so a probe
    stuck past every deadline cannot hold up the doctor's exit.
    """
    future: Future[T] = Future()

    def target() -> None:
        try:
            future.set_result(work())
        except BaseException as exc:  # UsageError (a bad --facts) and anything else
            future.set_exception(exc)

    threading.Thread(target=target, name="gather-facts", daemon=True).start()
    return future


def _ultralytics_note(packages: object, python: str) -> Optional[str]:
    """The trainer's note (``doctor_note``) when the probe listed Ultralytics: its module
    loads the smoke job's, which ``check`` on any other machine has no use for."""
    if not isinstance(packages, dict) or not packages.get("ultralytics"):
        return None
    from ddp_doctor.smoke.ultralytics.trainer import doctor_note

    return doctor_note(packages, python)


def gather_facts(machine: MachineRequest, python: str, probe_timeout: float, keep_smi_text: bool,
                 starting: Optional[threading.Event] = None) -> tuple[Facts, str]:
    """This machine's facts (in ``--python``'s interpreter), or the saved ones replayed;
    ``starting`` is set as the torch probe's child starts, at once when there is none."""
    if machine.facts is not None:
        if starting is not None:
            starting.set()
        from ddp_doctor.inputs import read_facts

        try:
            return read_facts(machine.facts), str(machine.facts)
        except FactsFileError as exc:
            raise UsageError(str(exc)) from None
    facts = gather(RealEnv(), GatherOptions(python=python, torch_timeout_s=probe_timeout,
                                            nvidia_smi_text=keep_smi_text,
                                            log_code_of=_log_code_of,
                                            probe_starting=starting))
    return facts, "live"


def _log_code_of(line: str) -> Optional[str]:
    """``logrules.code_of_line``, imported only when the kernel log holds an event: the
    rules take longer to load than the rest of the gather, and a clean log needs none."""
    from ddp_doctor.logrules import code_of_line

    return code_of_line(line)


def _with_smoke(report: Report, facts: Facts, plan: Mapping[str, Any], common: Common,
                scaling: bool, device: str = "auto") -> tuple[Report, Optional[str]]:
    """The checks' report plus the smoke job (or why it was skipped), and the run directory
    kept for --bundle. ``scaling`` (a policy's min-scaling-efficiency) adds the 1-rank run;
    ``device`` other than auto is the user's choice and overrides the plan's."""
    from ddp_doctor.app.outputs import progress_sink
    from ddp_doctor.smoke import plan as smoke_plan
    from ddp_doctor.smoke import run as smoke_run
    from ddp_doctor.smoke.launch import OptionsError, SmokeOptions

    python = (facts.get("python") or {}).get("executable") or sys.executable
    nvml_gpus = len((facts.get("nvml") or {}).get("gpus") or [])
    planned = smoke_plan.plan_smoke(report, facts.get("torch"), plan,
                                    SmokeOptions(python=python, scaling=scaling),
                                    nvml_gpus=nvml_gpus)
    if isinstance(planned, str):
        result = smoke_run.skipped(planned)
    else:
        planned = replace(planned, keep_run_dir=common.bundle is not None)
        if device != "auto":  # one rank per GPU on cuda; the CPU's own default on cpu
            planned = replace(planned, device=device,
                              nproc=planned.nproc if device == "cuda" or plan.get("gpus")
                              else None)
        try:
            result = smoke_run.run_smoke(planned, progress_sink(common), facts=facts)
        except (smoke_run.SmokeUsageError, OptionsError) as exc:
            raise UsageError(str(exc)) from None
        # A CPU fallback (SMK017) names the checks' findings that explain it.
        result.findings = _as_doctor(smoke_plan.with_check_causes(result.findings, report))
    report = replace(report, results=(*report.results, result.check_result()),
                     smoke=result.data, nodes=result.nodes)
    return report, result.kept_run_dir


def _as_doctor(findings: list[Finding]) -> list[Finding]:
    """SMK017's steps as ``doctor`` takes them: its --device is doctor's own too, so the
    command that repeats this run with the device said is ``ddp-doctor doctor --device``."""
    out = []
    for finding in findings:
        if finding.code.id == "SMK017":
            finding = replace(finding, remediation=tuple(
                replace(step, command=step.command.replace("ddp-doctor smoke --device",
                                                           "ddp-doctor doctor --device"))
                if step.command else step for step in finding.remediation))
        out.append(finding)
    return out
