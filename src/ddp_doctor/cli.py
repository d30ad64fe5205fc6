"""The ``ddp-doctor`` command line: the typer declarations, nothing else.

Each command turns its options into one call of ``ddp_doctor.app`` and exits with the code
it returns: 0 ready, 1 problems found, 2 bad invocation or unreadable input, 3 the doctor
itself failed. Every bad input, whether typer's parser or the doctor refuses it, is one
line on stderr (``ddp-doctor: error: ...``) and exit code 2, never a usage box or a
traceback; only a bug in the doctor prints a traceback, and then only with ``--verbose``.

Numbers are declared as text and parsed by the doctor (``ddp_doctor.usage``), so a bad
one is reported with the value typed and what is allowed, whatever typer's version says.

Start-up stays light: ``--help``, ``--version`` and a parse error load only this module,
the parser's (``parse_errors``, ``usage``) and the two that supply defaults shown in the
help (``facts.probe_deadline``, ``smoke.launch``). Each command imports its flow from
``ddp_doctor.app`` when it runs, so the code registry, the checks, the log rules and the
renderers load only for a command that uses them (``tests/cli/test_startup.py`` counts).
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

import typer

from ddp_doctor import __version__
from ddp_doctor.facts.probe_deadline import TORCH_PROBE_TIMEOUT_S
from ddp_doctor.parse_errors import DoctorCommand, DoctorGroup
from ddp_doctor.smoke.launch import SmokeOptions
from ddp_doctor.usage import EXIT_INTERNAL, EXIT_READY

if TYPE_CHECKING:
    from ddp_doctor.app.requests import Common

app = typer.Typer(
    name="ddp-doctor", cls=DoctorGroup,
    help=(
        "Find why multi-GPU PyTorch training will not start, before the real job does.\n\n"
        "Run with no command to diagnose this machine (same as `ddp-doctor doctor`). "
        "Exit codes: 0 no problems (the verdict says what was proven), 1 problems found, "
        "2 bad invocation or unreadable input, 3 the doctor itself failed; `run` passes on "
        "its command's own."
    ),
    no_args_is_help=False, add_completion=False, rich_markup_mode=None,
    pretty_exceptions_enable=False, context_settings={"help_option_names": ["-h", "--help"]},
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"ddp-doctor {__version__}")
        raise typer.Exit(EXIT_READY)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version_callback,
                                       is_eager=True, help="Print the version and exit.")
          ) -> None:
    """Diagnose GPU training environments."""


# The options of every report-producing command (check, doctor, smoke, diagnose), declared
# once: each field of app.Common, with its type and its typer.Option.
COMMON: dict[str, tuple[Any, Any]] = {
    "quiet": (bool, typer.Option(False, "--quiet", "-q",
                                 help="Show only findings and the verdict.")),
    "verbose": (bool, typer.Option(False, "--verbose", "-v",
                                   help="Show every check, evidence sources, timings and "
                                        "tracebacks.")),
    "strict": (bool, typer.Option(False, "--strict",
                                  help="Treat warnings as problems (exit code 1).")),
    "json": (Optional[str], typer.Option(None, "--json", metavar="PATH|-",
                                         help="Write the JSON report to PATH, or to stdout "
                                              "with '-'.")),
    "markdown": (Optional[str], typer.Option(None, "--markdown", metavar="PATH|-",
                                             help="Write a Markdown report (for a support "
                                                  "ticket) to PATH or stdout.")),
    "junit": (Optional[str], typer.Option(
        None, "--junit", metavar="PATH|-",
        help="Also write a JUnit XML report for CI to PATH (or stdout with '-'): one test "
             "case per check, and per smoke criterion when the smoke job runs.")),
    "bundle": (Optional[str], typer.Option(
        None, "--bundle", metavar="PATH",
        help="Also write a support bundle for a ticket (PATH ends in .zip, .tar.gz or .tgz): "
             "reports, facts, smoke logs, nvidia-smi output, packages, environment, "
             "MANIFEST; secrets removed.")),
    "force": (bool, typer.Option(False, "--force",
                                 help="Let --bundle (and run's --log) overwrite an existing "
                                      "file.")),
    "config": (Optional[Path], typer.Option(
        None, "--config", metavar="PATH",
        help="Policy file for CI (ddp-doctor.toml, or a pyproject.toml with "
             "[tool.ddp-doctor]); default: the nearest one found upward from the working "
             "directory.")),
    "anonymize": (bool, typer.Option(
        False, "--anonymize",
        help="Also replace host and user names, home paths, IP and MAC addresses, GPU UUIDs "
             "and serials with stable placeholders in every output (secrets are always "
             "removed).")),
}


def with_common(command: Callable[..., int], omit: tuple[str, ...] = ()
                ) -> Callable[..., None]:
    """Give COMMAND the common options: typer sees them as its parameters, COMMAND gets
    them as one ``common: Common`` argument, and its return value is the exit code.

    ``omit`` names options the command has no use for: they are not declared, so its
    ``--help`` does not offer them and typing one is an unknown option.
    """
    signature = inspect.signature(command)
    own = [p for p in signature.parameters.values() if p.name != "common"]
    offered = {name: spec for name, spec in COMMON.items() if name not in omit}
    shared = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option,
                                annotation=kind) for name, (kind, option) in offered.items()]

    @functools.wraps(command)
    def run(**values: Any) -> None:
        from ddp_doctor.app.requests import Common

        common = Common(**{name: values.pop(name) for name in offered})
        raise typer.Exit(command(common=common, **values))

    # inspect.signature() (and so typer) reads __signature__ from the function's __dict__.
    run.__dict__["__signature__"] = signature.replace(parameters=[*own, *shared],
                                                      return_annotation=None)
    run.__annotations__ = {**{k: v for k, v in command.__annotations__.items()
                              if k not in ("common", "return")},
                           **{name: kind for name, (kind, _) in offered.items()}}
    return run


def without(*omit: str) -> Callable[[Callable[..., int]], Callable[..., None]]:
    """``with_common`` for a command that takes all but ``omit`` of the common options."""
    return lambda command: with_common(command, omit)


# Options of check and doctor: the machine (or saved facts) and the planned job.
PYTHON = typer.Option(None, "--python", metavar="PATH",
                      help="Diagnose the torch of another interpreter (e.g. a venv's python).")
FACTS = typer.Option(None, "--facts", metavar="FILE",
                     help="Run the checks on a saved facts snapshot (or a --bundle archive); "
                          "touches nothing here.")
SAVE_FACTS = typer.Option(None, "--save-facts", metavar="FILE",
                          help="Also save the gathered facts as JSON, for --facts or compare "
                               "later (with --facts: the replayed ones, e.g. a bundle's); %n in "
                               "FILE is the Slurm node index, %N the host name.")
PROBE_TIMEOUT = typer.Option(
    None, "--probe-timeout", metavar="SECONDS",
    help=f"Deadline for the whole torch probe (default {TORCH_PROBE_TIMEOUT_S:g}, 1 or more: "
         "import, CUDA init, the per-GPU tests, peer access); each GPU also has its own "
         "deadline inside it.")
GPUS = typer.Option(None, "--gpus", metavar="N",
                    help="Plan: train on N GPUs (checks they are usable, prints the launch "
                         "command).")
GLOBAL_BATCH = typer.Option(None, "--global-batch", metavar="B",
                            help="Plan: the job's total batch B over all GPUs (must divide "
                                 "by --gpus for DDP).")
PLAN_WORKERS = typer.Option(None, "--workers", metavar="W",
                            help="Plan: DataLoader workers per GPU process (RAM, CPU and "
                                 "open-files checks).")


@app.command(cls=DoctorCommand, short_help="Check this machine, then prove DDP training "
                                           "on it (the default).")
@with_common
def doctor(common: Common, python: Optional[str] = PYTHON, facts: Optional[Path] = FACTS,
           save_facts: Optional[Path] = SAVE_FACTS, probe_timeout: Optional[str] = PROBE_TIMEOUT,
           gpus: Optional[str] = GPUS, global_batch: Optional[str] = GLOBAL_BATCH,
           workers: Optional[str] = PLAN_WORKERS,
           no_smoke: bool = typer.Option(False, "--no-smoke",
                                         help="Only run the checks, not the smoke-training "
                                              "job."),
           device: str = typer.Option("auto", "--device", metavar="auto|cuda|cpu",
                                      help="Where the smoke job trains: the GPUs (NCCL) or "
                                           "the CPU (gloo); auto: GPUs when torch can use "
                                           "them, else the CPU, with SMK017.")) -> int:
    """Diagnose this machine before training (the default command).

    Runs the checks, then the DDP smoke-training job (unless a finding makes it pointless,
    --no-smoke is given, or --facts replays a snapshot).
    """
    from ddp_doctor.app.examine import run_doctor
    from ddp_doctor.app.requests import MachineRequest

    machine = MachineRequest(python, facts, save_facts, probe_timeout, gpus, global_batch,
                             workers)
    return run_doctor(common, machine, smoke=not no_smoke, device=device)


@app.command(cls=DoctorCommand, short_help="Run the checks only: the CI pre-flight step.")
@with_common
def check(common: Common, python: Optional[str] = PYTHON, facts: Optional[Path] = FACTS,
          save_facts: Optional[Path] = SAVE_FACTS, probe_timeout: Optional[str] = PROBE_TIMEOUT,
          gpus: Optional[str] = GPUS, global_batch: Optional[str] = GLOBAL_BATCH,
          workers: Optional[str] = PLAN_WORKERS) -> int:
    """Gather facts and run the checks only (the pre-flight step for CI)."""
    from ddp_doctor.app.examine import run_check
    from ddp_doctor.app.requests import MachineRequest

    return run_check(common, MachineRequest(python, facts, save_facts, probe_timeout, gpus,
                                            global_batch, workers))


@app.command(cls=DoctorCommand, short_help="Name the cause and fix of a failure log.")
@without("bundle", "force", "config")  # a log in, reports out: no bundle, no policy
def diagnose(common: Common, source: str = typer.Argument(
        "-", metavar="[PATH|-]",
        help="A log file, a .gz of one, or a support bundle (.zip / .tar.gz); '-' or nothing "
             "reads stdin.")) -> int:
    """Read a failure log (or a ticket's pasted output) and name the causes and fixes.

    Understands tracebacks of torchrun / DDP ranks, NCCL WARN/INFO lines, YOLO training
    output, collect_env, `yolo checks`, nvidia-smi and nvidia-smi -q text. Examples:
    `ddp-doctor diagnose train.log`, `kubectl logs job/train | ddp-doctor diagnose -`.
    """
    from ddp_doctor.app.diagnose import run_diagnose

    return run_diagnose(common, source)


COMPARE_INPUTS = typer.Argument(
    None, metavar="BASELINE OTHER...",
    help="Facts snapshots (--save-facts), support bundles (--bundle) or JSON reports (--json) "
         "of the machines to compare; the first is the baseline.")


@app.command(cls=DoctorCommand, short_help="Name what differs between machines that "
                                           "breaks DDP.")
@without("config")  # the nodes are judged against each other, not against a policy
def compare(common: Common, inputs: Optional[list[Path]] = COMPARE_INPUTS) -> int:
    """Compare machines and name what differs in a way that breaks or slows DDP.

    NCCL, torch build, CUDA major and GPU count differences are errors; NCCL_* settings,
    driver branch, GPU model, Python, packages and container limits are warnings. With more
    than two inputs each is judged against the majority. Exit codes: 0 they agree, 1 they
    differ where it matters, 2 an input is unreadable. Example: `ddp-doctor compare
    good-node.json bad-node.json`, or `ddp-doctor compare facts-*.json` for a cluster.
    """
    from ddp_doctor.app.compare import CompareRequest
    from ddp_doctor.app.compare import compare as compare_flow

    return compare_flow(common, CompareRequest(tuple(inputs or ())))


SMOKE = SmokeOptions()


@app.command(cls=DoctorCommand, short_help="Prove DDP training works: train a small "
                                           "model on every GPU.")
@with_common
def smoke(
    common: Common,
    device: str = typer.Option("auto", "--device", metavar="auto|cuda|cpu",
                               help="Train on the GPUs (NCCL) or the CPU (gloo); auto: GPUs "
                                    "when torch can use them."),
    nproc: Optional[str] = typer.Option(None, "--nproc", metavar="N",
                                        help="Processes on this node (default: one per GPU, "
                                             "2 on CPU)."),
    steps: Optional[str] = typer.Option(None, "--steps", metavar="N",
                                        help=f"Training steps (default {SMOKE.steps})."),
    batch_per_process: Optional[str] = typer.Option(
        None, "--batch-per-process", metavar="B",
        help=f"Images each process trains on per step (default {SMOKE.batch}; 2 or more: "
             "BatchNorm)."),
    imgsz: Optional[str] = typer.Option(None, "--imgsz", metavar="S",
                                        help=f"Image size in pixels (default {SMOKE.imgsz}; a "
                                             "multiple of 32, 64 or more)."),
    model: str = typer.Option("n", "--model", metavar="n|s|m", help="Detector size."),
    workers: Optional[str] = typer.Option(None, "--workers", metavar="W",
                                          help="DataLoader workers per process (default 1 "
                                               "on CPU, 2 on GPU)."),
    launcher: str = typer.Option("torchrun", "--launcher", metavar="torchrun|spawn",
                                 help="python -m torch.distributed.run, or "
                                      "torch.multiprocessing.spawn."),
    mode: str = typer.Option("ddp", "--mode", metavar="ddp|dp",
                             help="DistributedDataParallel, or nn.DataParallel in one process."),
    backend: str = typer.Option("auto", "--backend", metavar="auto|nccl|gloo",
                                help="Process-group backend; auto: NCCL on GPUs, gloo on the "
                                     "CPU. gloo on GPUs lets ranks share a GPU (--nproc above "
                                     "the GPU count) to prove the multi-rank CUDA paths on one "
                                     "GPU; NCCL across GPUs is then not proven."),
    sync_bn: bool = typer.Option(False, "--sync-bn",
                                 help="Convert BatchNorm to SyncBatchNorm (CUDA and --mode "
                                      "ddp only)."),
    amp: bool = typer.Option(True, "--amp/--no-amp", help="Mixed precision on GPUs."),
    scaling: bool = typer.Option(False, "--scaling",
                                 help="Also run on 1 rank: speedup and scaling efficiency."),
    timeout: Optional[str] = typer.Option(
        None, "--timeout", metavar="S",
        help=f"Wall-clock deadline of a run (default {SMOKE.timeout:g}; 20 or more); "
             "everything is stopped after it."),
    stall_timeout: Optional[str] = typer.Option(
        None, "--stall-timeout", metavar="S",
        help="A rank silent this long is hung (default: min(45, timeout/3); 10 or more and "
             "less than --timeout). The process-group timeout is set between the two."),
    nnodes: Optional[str] = typer.Option(
        None, "--nnodes", metavar="N",
        help="Nodes in the job (default 1). Slurm's node count, node rank and first host "
             "are used only inside an srun step (SLURM_STEP_ID or SLURM_PROCID set), or when "
             "--nnodes > 1 is given in an allocation; a plain run in an salloc shell stays "
             "on this node. Outside Slurm, --nnodes > 1 needs --master-addr and "
             "--master-port (or MASTER_ADDR and MASTER_PORT)."),
    node_rank: Optional[str] = typer.Option(None, "--node-rank", metavar="R",
                                            help="This node's rank, 0 to nnodes-1."),
    master_addr: Optional[str] = typer.Option(None, "--master-addr", metavar="A",
                                              help="Address of node rank 0 (multi-node)."),
    master_port: Optional[str] = typer.Option(None, "--master-port", metavar="P",
                                              help="Rendezvous port, 1 to 65535 (default: a "
                                                   "free one)."),
    python: Optional[str] = PYTHON,
    trainer: str = typer.Option("builtin", "--trainer", metavar="builtin|ultralytics",
                                help="builtin: the doctor's own YOLO; ultralytics: the "
                                     "Ultralytics package installed in --python, through its "
                                     "own DDP path (6 short epochs on synthetic data)."),
) -> int:
    """Prove that DDP training works here: train a small YOLO detector on every GPU.

    With a policy file, its smoke requirements (all-reduce bandwidth, scaling efficiency)
    are judged here too; the machine requirements are judged by `check` and `doctor`.
    """
    from ddp_doctor.app.requests import SmokeRequest
    from ddp_doctor.app.smoke import run_smoke

    return run_smoke(common, SmokeRequest(
        device=device, nproc=nproc, steps=steps, batch_per_process=batch_per_process,
        imgsz=imgsz, model=model, workers=workers, launcher=launcher, mode=mode,
        backend=backend, sync_bn=sync_bn, amp=amp, scaling=scaling, timeout=timeout,
        stall_timeout=stall_timeout, nnodes=nnodes, node_rank=node_rank,
        master_addr=master_addr, master_port=master_port, python=python, trainer=trainer))


RUN_COMMAND = typer.Argument(None, metavar="-- COMMAND [ARGS...]",
                             help="Your own command, run unchanged (everything after `--`).")
RUN_FACTS = typer.Option(None, "--facts", metavar="FILE",
                         help="On failure, judge a saved facts snapshot instead of gathering "
                              "this machine's facts.")


@app.command(cls=DoctorCommand, context_settings={"allow_interspersed_args": False},
             short_help="Run your training command; diagnose it if it fails.")
@with_common
def run(
    common: Common,
    command: Optional[list[str]] = RUN_COMMAND,
    timeout: Optional[str] = typer.Option(
        None, "--timeout", metavar="S",
        help="Wall-clock deadline (1 or more); the command and everything it started are "
             "stopped after it (RUN003)."),
    stall_timeout: Optional[str] = typer.Option(
        None, "--stall-timeout", metavar="S",
        help="The longest silence of the output (1 or more, less than --timeout); a "
             "command silent this long is hung and stopped (RUN002)."),
    until: Optional[str] = typer.Option(
        None, "--until", metavar="REGEX",
        help="The first output line matching REGEX ends the run as a success (e.g. "
             "'Epoch 1/'): prove a job starts without waiting for it to finish."),
    log: Optional[str] = typer.Option(
        None, "--log", metavar="PATH",
        help="Keep the output in PATH (default: a temporary file, kept and named only "
             "when the run fails); an existing file needs --force."),
    nccl_debug: bool = typer.Option(
        False, "--nccl-debug",
        help="Set NCCL_DEBUG=INFO and TORCH_DISTRIBUTED_DEBUG=DETAIL for the run."),
    flight_recorder: bool = typer.Option(
        False, "--flight-recorder",
        help="Turn on torch's Flight Recorder in the job (TORCH_FR_BUFFER_SIZE, NCCL's "
             "dump on timeout, a start-up hook on PYTHONPATH that dumps gloo's on request); "
             "on a stall each rank's dump is read: the collective each rank reached."),
    status: bool = typer.Option(
        True, "--status/--no-status",
        help="On a terminal, a status line under the output: run time, silence, last "
             "line (never in the log; off in pipes and with --quiet)."),
    facts: Optional[Path] = RUN_FACTS,
) -> int:
    """Run your own training command, watch it, and diagnose it if it fails.

    Its output is shown live and kept in a log. On a failure (non-zero exit, a signal, a
    stall, a timeout) the log is diagnosed as `diagnose` does and this machine is checked
    as `check` does, through the Python the command runs. Exit codes: 0 it succeeded (or
    --until matched); on a failure the command's own (128+N for signal N), 124 at
    --timeout, 125 at --stall-timeout.
    Example: `ddp-doctor run --stall-timeout 300 -- python -m torch.distributed.run
    --nproc_per_node 2 train.py`.
    """
    from ddp_doctor.app.run import RunRequest, run_job

    return run_job(common, RunRequest(
        command=tuple(command or ()), timeout=timeout, stall_timeout=stall_timeout,
        until=until, log=log, nccl_debug=nccl_debug, status=status, facts=facts,
        flight_recorder=flight_recorder))


@app.command("checks", cls=DoctorCommand,
             short_help="List every check and the codes it reports.")
def list_checks() -> None:
    """List every check and the codes it can report (`ddp-doctor codes` lists every code)."""
    from ddp_doctor.app.catalogue import run_checks

    raise typer.Exit(run_checks())


@app.command("codes", cls=DoctorCommand, short_help="List every code of every family.")
def list_codes(
    family: Optional[str] = typer.Option(
        None, "--family", metavar="FAMILY",
        help="Only the codes of one family: check, plan, smoke, log, diagnose, policy, run "
             "or nodes."),
    category: Optional[str] = typer.Option(
        None, "--category", metavar="CATEGORY",
        help="Only the codes of one failure category, e.g. nccl_p2p "
             "(`ddp-doctor explain CATEGORY` describes it)."),
    as_json: bool = typer.Option(False, "--json",
                                 help="Print the listing as a JSON array on stdout."),
) -> None:
    """List every finding code of every family: the checks, the launch plan, the smoke job,
    the log rules, diagnose and the CI policy, with severity, category and summary."""
    from ddp_doctor.app.catalogue import run_codes

    raise typer.Exit(run_codes(family, category, as_json))


@app.command(cls=DoctorCommand, short_help="Explain a finding code or a failure category.")
def explain(topic: str = typer.Argument(
        ..., metavar="CODE|CATEGORY",
        help="A finding code (DRV001) or a failure category (nccl_p2p).")) -> None:
    """Explain a finding code (what it means, why it matters, how to fix it), or a failure
    category (what went wrong, and every code that reports it)."""
    from ddp_doctor.app.catalogue import run_explain

    raise typer.Exit(run_explain(topic))


_ROOT_FLAGS = {"-h", "--help", "--version"}


def normalize_argv(argv: list[str]) -> list[str]:
    """Make ``doctor`` the default command: ``ddp-doctor --json -`` means ``doctor --json -``."""
    if not argv or (argv[0].startswith("-") and argv[0] not in _ROOT_FLAGS):
        return ["doctor", *argv]
    return argv


def main(argv: Optional[list[str]] = None) -> None:
    args = normalize_argv(list(sys.argv[1:] if argv is None else argv))
    try:
        app(args=args, prog_name="ddp-doctor")
    except SystemExit:
        raise
    except KeyboardInterrupt:
        typer.echo("ddp-doctor: interrupted", err=True)
        raise SystemExit(130) from None
    except Exception as exc:  # a bug in the doctor itself
        if os.environ.get("DDP_DOCTOR_DEBUG") or "--verbose" in args or "-v" in args:
            traceback.print_exc()
        typer.echo(f"ddp-doctor: internal error: {type(exc).__name__}: {exc} "
                   f"(set DDP_DOCTOR_DEBUG=1 for the traceback)", err=True)
        raise SystemExit(EXIT_INTERNAL) from None
