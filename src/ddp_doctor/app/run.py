"""``run``: supervise the user's own command; when it fails, say why.

The command runs unchanged with its output shown live (its stdout on stdout and its stderr
on stderr; both on stderr when a report goes to stdout) and kept in a log. A success (exit
0, or ``--until`` matched) is a short report. A failure (non-zero exit, a signal, a stall,
a timeout) is diagnosed: the log by the ``diagnose`` engine, this machine by the checks as
``check`` runs them, in one Report with the run's own RUN finding first, the log's
findings next, and the checks that found errors or warnings after.
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Optional

from rich.console import Console

from ddp_doctor import __version__, runner
from ddp_doctor.app.examine import gather_facts
from ddp_doctor.app.outputs import emit, phase
from ddp_doctor.app.requests import Common, MachineRequest, check_common, load_policy
from ddp_doctor.checklist import load_catalogue
from ddp_doctor.facts.snapshot import Facts
from ddp_doctor.facts.torch_probe import TORCH_PROBE_TIMEOUT_S
from ddp_doctor.forensics.flight_analyser import torch_analysis
from ddp_doctor.job import (
    JobOptions,
    JobOutcome,
    diagnose_log,
    established,
    job_result,
    supervise,
)
from ddp_doctor.job.interpreter import find_interpreter
from ddp_doctor.job.judge import as_context, gpu_use, problem_results
from ddp_doctor.job.status_line import StatusLine, wanted
from ddp_doctor.job.supervise import command_text
from ddp_doctor.model import CheckResult, Report
from ddp_doctor.policy.apply import apply_policy
from ddp_doctor.usage import Limit, OutputPath, UsageError

TIMEOUT = Limit("--timeout", 1, whole=False, unit=" s")
STALL_TIMEOUT = Limit("--stall-timeout", 1, whole=False, unit=" s")


@dataclass(frozen=True)
class RunRequest:
    """``run`` as typed: the command after ``--`` and the deadlines, numbers as text."""

    command: tuple[str, ...]
    timeout: Optional[str] = None
    stall_timeout: Optional[str] = None
    until: Optional[str] = None
    log: Optional[str] = None
    nccl_debug: bool = False
    status: bool = True
    facts: Optional[Path] = None
    flight_recorder: bool = False


def job_options(request: RunRequest, flight_dir: Optional[str] = None) -> JobOptions:
    """The request judged: a command, numbers in range, a regex that compiles."""
    if not request.command:
        raise UsageError("run: give the command to supervise after `--`, e.g. "
                         "`ddp-doctor run -- python -m torch.distributed.run "
                         "--nproc-per-node 2 train.py`")
    timeout = TIMEOUT.number(request.timeout)
    stall = STALL_TIMEOUT.number(request.stall_timeout)
    if timeout is not None and stall is not None and stall >= timeout:
        raise UsageError(f"--stall-timeout {stall:g} must be less than --timeout {timeout:g}")
    until: Optional[re.Pattern[str]] = None
    if request.until is not None:
        try:
            until = re.compile(request.until)
        except re.error as exc:
            raise UsageError(f"--until {request.until!r}: not a regular expression: "
                             f"{exc}") from None
    return JobOptions(command=tuple(request.command), timeout_s=timeout, stall_s=stall,
                      until=until, nccl_debug=request.nccl_debug, flight_dir=flight_dir)


def run_job(common: Common, request: RunRequest) -> int:
    """Run the command to its end; 0 when it succeeded (or --until matched), else the
    command's own exit code (``exit_code``)."""
    options = job_options(request)
    if request.flight_recorder:  # the ranks' Flight Recorder dumps go here (forensics/)
        options = replace(options, flight_dir=tempfile.mkdtemp(prefix="ddp-doctor-fr-"))
    if request.log == "-":
        raise UsageError("--log -: the output is already shown live; give a file to keep "
                         "it in")
    check_common(common, OutputPath("--log", request.log, guarded=True))
    policy = load_policy(common.config)
    temp_dir = None
    if request.log is not None:
        log_path = request.log
    else:
        temp_dir = tempfile.mkdtemp(prefix="ddp-doctor-run-")
        log_path = str(Path(temp_dir) / "output.log")
    # The command's stdout on stdout and its stderr on stderr, as without the doctor; both
    # on stderr when a report takes stdout, which must stay parseable.
    sink: IO[bytes] = sys.stderr.buffer if common.to_stdout else sys.stdout.buffer
    try:
        outcome = supervise(options, log_path, sink,
                            status=status_line(common, request, options, sink),
                            err_sink=sys.stderr.buffer)
    except OSError as exc:
        _remove(temp_dir)
        _remove(options.flight_dir)
        raise UsageError(f"run: cannot start {options.command[0]!r}: "
                         f"{exc.strerror or exc}") from None
    except SystemExit:  # interrupted: the run is stopped; its output stays for the user
        sys.stderr.write(f"ddp-doctor: interrupted; the command and everything it started "
                         f"were stopped; its output is in {log_path}\n")
        raise
    if outcome.succeeded:
        report = replace(_report((job_result(outcome, options, None),),
                                 f"run: {command_text(options.command)}"),
                         outcome=established(outcome, options))
        emit(report, common, run_log=log_path)
        _remove(temp_dir)
        _remove(options.flight_dir)
        return report.exit_code(common.strict)
    if not common.quiet:
        sys.stderr.write(f"ddp-doctor: the command's output is kept in {log_path}\n")
        sys.stderr.flush()
    report, facts = _diagnosed(outcome, options, common, request.facts)
    if policy is not None and facts is not None:
        report = apply_policy(report, policy, facts)
    report = replace(report, exit_status=exit_code(outcome))
    kept = keep_forensics(outcome, options.flight_dir)
    if kept is not None and not common.quiet:
        what = "stacks and Flight Recorder dumps" if outcome.flight else "stacks"
        sys.stderr.write(f"ddp-doctor: the hung ranks' {what} are kept in {kept}\n")
    emit(report, common, facts=facts, run_log=log_path, run_files=kept)
    return exit_code(outcome)


def keep_forensics(outcome: JobOutcome, flight_dir: Optional[str]) -> Optional[str]:
    """The folder of a hung run's evidence for the user and the bundle: each rank's stack
    (``stack-rank<R>.txt``) and Flight Recorder dump (``fr-rank<R>.json``); None if none."""
    from ddp_doctor.forensics.flight import keep_records
    from ddp_doctor.forensics.stacks import keep_stacks

    if not outcome.stacks and not outcome.flight:
        return None
    folder = Path(flight_dir or tempfile.mkdtemp(prefix="ddp-doctor-hang-"))
    keep_stacks(outcome.stacks, folder)
    keep_records(outcome.flight, folder)
    return str(folder)


STALL_EXIT = 125
"""``run``'s exit code when --stall-timeout stopped the command (a hang)."""
TIMEOUT_EXIT = 124
"""``run``'s exit code when --timeout stopped the command: GNU ``timeout``'s own code
(https://www.gnu.org/software/coreutils/manual/html_node/timeout-invocation.html)."""


def exit_code(outcome: JobOutcome) -> int:
    """A failed run's exit code: the command's own, so a script or scheduler around
    ``ddp-doctor run`` sees what it would have seen without it. A command killed by a
    signal gives 128 + the signal's number, as a shell reports it; a stall and a timeout,
    which the doctor decided, their own codes."""
    if outcome.stopped_by == "stall":
        return STALL_EXIT
    if outcome.stopped_by == "timeout":
        return TIMEOUT_EXIT
    code = outcome.returncode
    if code is None or code == 0:  # never for a failure; kept non-zero all the same
        return 1
    return 128 - code if code < 0 else code


def status_line(common: Common, request: RunRequest, options: JobOptions, sink: IO[bytes]
                ) -> Optional[StatusLine]:
    """The live status on stderr when a person watches a terminal (see job.status_line)."""
    console = Console(stderr=True, highlight=False)
    if common.quiet or not wanted(console, disabled=not request.status):
        return None
    # The command's stderr is always on stderr, under the status: they share a terminal.
    shares = True
    return StatusLine(console, shares, options.stall_s, options.timeout_s)


def _diagnosed(outcome: JobOutcome, options: JobOptions, common: Common,
               saved: Optional[Path]) -> tuple[Report, Optional[Facts]]:
    """The failed run's report: its RUN finding, the log's findings, the machine's problems.

    The machine is judged through the interpreter the command ran (``find_interpreter``),
    not ddp-doctor's own; its GPU findings are context when nothing shows the job used
    the GPUs (``gpu_use``).
    """
    log = diagnose_log(outcome.log_path)
    judged = find_interpreter(options.command) if saved is None else None
    machine = MachineRequest(facts=saved)
    python = judged.path if judged is not None else sys.executable
    # Torch's own analyser reads the ranks' pickled dumps while the facts are gathered.
    with ThreadPoolExecutor(max_workers=1) as pool:
        analysis = (pool.submit(torch_analysis, Path(options.flight_dir), python)
                    if options.flight_dir is not None and outcome.flight else None)
        with phase(common, f"gathering facts (driver, CUDA, torch of {python}, host)",
                   live=saved is None):
            facts, source = gather_facts(machine, python, TORCH_PROBE_TIMEOUT_S,
                                         keep_smi_text=common.bundle is not None)
        outcome.fr_analysis = analysis.result() if analysis is not None else None
    results: list[CheckResult] = [job_result(
        outcome, options, log, judged.describe() if judged is not None else None)]
    if log is not None:
        results.append(replace(log, check_id="run.log", title="The command's output"))
    checks = runner.build_report(load_catalogue(), facts, facts_source=source)
    used = gpu_use(outcome, options, log)
    machine_results = list(checks.results)
    if used is None:
        machine_results = as_context(machine_results, "nothing shows the job used the GPUs: "
                                     "no CUDA driver loaded in its processes, no GPU asked "
                                     "for on its command line, none in its output")
    results += problem_results(machine_results)
    where = f"; torch of {judged.describe()}" if judged is not None else ""
    report = replace(checks, results=tuple(results),
                     facts_source=f"run: {outcome.log_path}; facts: {source}{where}",
                     outcome=established(outcome, options))
    return report, facts


def _report(results: tuple[CheckResult, ...], source: str) -> Report:
    return Report(tool_version=__version__,
                  created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  results=results, facts_source=source)


def _remove(temp_dir: Optional[str]) -> None:
    if temp_dir is not None:
        shutil.rmtree(temp_dir, ignore_errors=True)
