"""The ``ddp-doctor`` command: parse, call, render, exit. No diagnosis logic lives here.

Exit codes: 0 ready, 1 problems found, 2 bad invocation or unreadable input, 3 the
doctor itself failed. Expected failures (a bad path, a foreign facts file) print one
line on stderr and exit 2; only a bug in the doctor prints a traceback, and then only
with ``--verbose``.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.console import Console
from rich.table import Table

from ddp_doctor import __version__
from ddp_doctor.codes import all_codes, render_code_text
from ddp_doctor.facts.plan import apply_plan, make_plan
from ddp_doctor.facts.snapshot import (
    Facts,
    FactsFileError,
    load_facts,
    save_facts,
    write_text_atomic,
)
from ddp_doctor.facts.torch_probe import TORCH_PROBE_TIMEOUT_S
from ddp_doctor.model import Report
from ddp_doctor.registry import Catalogue, load_catalogue

if TYPE_CHECKING:
    from ddp_doctor.smoke.launch import SmokeOptions

EXIT_READY, EXIT_PROBLEMS, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3

app = typer.Typer(
    name="ddp-doctor",
    help=(
        "Find why multi-GPU PyTorch training will not start, before the real job does.\n\n"
        "Run with no command to diagnose this machine (same as `ddp-doctor doctor`). "
        "Exit codes: 0 ready, 1 problems found, 2 bad invocation or unreadable input, "
        "3 the doctor itself failed."
    ),
    no_args_is_help=False,
    add_completion=False,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


class UsageError(Exception):
    """Bad input from the user: reported in one line, exit code 2."""


@dataclass
class RunOptions:
    json_out: Optional[str] = None
    markdown_out: Optional[str] = None
    strict: bool = False
    quiet: bool = False
    verbose: bool = False
    python: Optional[str] = None
    facts_file: Optional[Path] = None
    save_facts_file: Optional[Path] = None
    probe_timeout: float = TORCH_PROBE_TIMEOUT_S
    gpus: Optional[str] = None  # the launch plan as typed; _validate() checks the numbers
    batch: Optional[str] = None
    workers: Optional[str] = None
    smoke: bool = False  # run the smoke job after the checks (doctor without --no-smoke)
    junit_out: Optional[str] = None
    bundle_out: Optional[str] = None
    force: bool = False
    anonymize: bool = False
    config_file: Optional[Path] = None
    smoke_dir: Optional[str] = None  # a passed smoke run's directory kept for --bundle


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"ddp-doctor {__version__}")
        raise typer.Exit(EXIT_READY)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True,
        help="Print the version and exit.",
    ),
) -> None:
    """Diagnose GPU training environments."""


# Options shared by `doctor` and `check`.
JSON_OPT = typer.Option(None, "--json", metavar="PATH|-",
                        help="Write the JSON report to PATH, or to stdout with '-'.")
MD_OPT = typer.Option(None, "--markdown", metavar="PATH|-",
                      help="Write a Markdown report (for a support ticket) to PATH or stdout.")
STRICT_OPT = typer.Option(False, "--strict", help="Treat warnings as problems (exit code 1).")
QUIET_OPT = typer.Option(False, "--quiet", "-q", help="Show only findings and the verdict.")
VERBOSE_OPT = typer.Option(False, "--verbose", "-v",
                           help="Show every check, evidence sources, timings and tracebacks.")
PYTHON_OPT = typer.Option(None, "--python", metavar="PATH",
                          help="Diagnose the torch of another interpreter (e.g. a venv's python).")
FACTS_OPT = typer.Option(None, "--facts", metavar="FILE",
                         help="Run the checks on a saved facts snapshot (or a --bundle archive); "
                              "touches nothing here.")
SAVE_FACTS_OPT = typer.Option(None, "--save-facts", metavar="FILE",
                              help="Also save the gathered facts as JSON, for --facts later.")
PROBE_TIMEOUT_OPT = typer.Option(
    TORCH_PROBE_TIMEOUT_S, "--probe-timeout", metavar="SECONDS", min=1.0,
    help="Deadline for the whole torch probe (import, CUDA init, the per-GPU tests, peer "
         "access); each GPU also has its own deadline inside it.")
GPUS_OPT = typer.Option(None, "--gpus", metavar="N",
                        help="Plan: train on N GPUs (checks they are usable, prints the launch "
                             "command).")
BATCH_OPT = typer.Option(None, "--batch", metavar="B",
                         help="Plan: total batch size B (must divide by --gpus for DDP).")
JUNIT_OPT = typer.Option(None, "--junit", metavar="PATH|-",
                         help="Also write a JUnit XML report for CI to PATH (or stdout with "
                              "'-'): one test case per check, and per smoke criterion when the "
                              "smoke job runs.")
BUNDLE_OPT = typer.Option(None, "--bundle", metavar="PATH",
                          help="Also write a support bundle for a ticket (PATH ends in .zip, "
                               ".tar.gz or .tgz): reports, facts, smoke logs, nvidia-smi output, "
                               "packages, environment, MANIFEST; secrets removed.")
FORCE_OPT = typer.Option(False, "--force", help="Let --bundle overwrite an existing file.")
ANONYMIZE_OPT = typer.Option(
    False, "--anonymize",
    help="Also replace host and user names, home paths, IP and MAC addresses, GPU UUIDs and "
         "serials with stable placeholders in every output (secrets are always removed).")
CONFIG_OPT = typer.Option(
    None, "--config", metavar="PATH",
    help="Policy file for CI (ddp-doctor.toml, or a pyproject.toml with [tool.ddp-doctor]); "
         "default: the nearest one found upward from the working directory.")
WORKERS_OPT = typer.Option(None, "--workers", metavar="W",
                           help="Plan: DataLoader workers per GPU process (RAM, CPU and "
                                "open-files checks).")


@app.command()
def doctor(
    json_out: Optional[str] = JSON_OPT,
    markdown_out: Optional[str] = MD_OPT,
    strict: bool = STRICT_OPT,
    quiet: bool = QUIET_OPT,
    verbose: bool = VERBOSE_OPT,
    python: Optional[str] = PYTHON_OPT,
    facts_file: Optional[Path] = FACTS_OPT,
    save_facts_file: Optional[Path] = SAVE_FACTS_OPT,
    probe_timeout: float = PROBE_TIMEOUT_OPT,
    gpus: Optional[str] = GPUS_OPT,
    batch: Optional[str] = BATCH_OPT,
    workers: Optional[str] = WORKERS_OPT,
    no_smoke: bool = typer.Option(False, "--no-smoke",
                                  help="Only run the checks, not the smoke-training job."),
    junit_out: Optional[str] = JUNIT_OPT,
    bundle_out: Optional[str] = BUNDLE_OPT,
    force: bool = FORCE_OPT,
    anonymize: bool = ANONYMIZE_OPT,
    config_file: Optional[Path] = CONFIG_OPT,
) -> None:
    """Diagnose this machine before training (the default command).

    Runs the checks, then the DDP smoke-training job (unless a finding makes it pointless,
    --no-smoke is given, or --facts replays a snapshot).
    """
    _run(RunOptions(json_out, markdown_out, strict, quiet, verbose, python, facts_file,
                    save_facts_file, probe_timeout, gpus, batch, workers,
                    smoke=not no_smoke and facts_file is None, junit_out=junit_out,
                    bundle_out=bundle_out, force=force, anonymize=anonymize,
                    config_file=config_file))


@app.command()
def check(
    json_out: Optional[str] = JSON_OPT,
    markdown_out: Optional[str] = MD_OPT,
    strict: bool = STRICT_OPT,
    quiet: bool = QUIET_OPT,
    verbose: bool = VERBOSE_OPT,
    python: Optional[str] = PYTHON_OPT,
    facts_file: Optional[Path] = FACTS_OPT,
    save_facts_file: Optional[Path] = SAVE_FACTS_OPT,
    probe_timeout: float = PROBE_TIMEOUT_OPT,
    gpus: Optional[str] = GPUS_OPT,
    batch: Optional[str] = BATCH_OPT,
    workers: Optional[str] = WORKERS_OPT,
    junit_out: Optional[str] = JUNIT_OPT,
    bundle_out: Optional[str] = BUNDLE_OPT,
    force: bool = FORCE_OPT,
    anonymize: bool = ANONYMIZE_OPT,
    config_file: Optional[Path] = CONFIG_OPT,
) -> None:
    """Gather facts and run the checks only (the pre-flight step for CI)."""
    _run(RunOptions(json_out, markdown_out, strict, quiet, verbose, python, facts_file,
                    save_facts_file, probe_timeout, gpus, batch, workers, junit_out=junit_out,
                    bundle_out=bundle_out, force=force, anonymize=anonymize,
                    config_file=config_file))


@app.command()
def diagnose(
    source: str = typer.Argument(
        "-", metavar="[PATH|-]",
        help="A log file, a .gz of one, or a support bundle (.zip / .tar.gz); '-' or nothing "
             "reads stdin."),
    json_out: Optional[str] = JSON_OPT,
    markdown_out: Optional[str] = MD_OPT,
    strict: bool = STRICT_OPT,
    quiet: bool = QUIET_OPT,
    verbose: bool = VERBOSE_OPT,
    junit_out: Optional[str] = JUNIT_OPT,
    anonymize: bool = ANONYMIZE_OPT,
) -> None:
    """Read a failure log (or a ticket's pasted output) and name the causes and fixes.

    Understands tracebacks of torchrun / DDP ranks, NCCL WARN/INFO lines, YOLO training
    output, collect_env, `yolo checks`, nvidia-smi and nvidia-smi -q text. Examples:
    `ddp-doctor diagnose train.log`, `kubectl logs job/train | ddp-doctor diagnose -`.
    """
    from ddp_doctor.diagnose import InputError
    from ddp_doctor.diagnose import diagnose as run_diagnosis

    options = RunOptions(json_out, markdown_out, strict, quiet, verbose, junit_out=junit_out,
                         anonymize=anonymize)
    try:
        _validate(options)
        if source == "-" and sys.stdin.isatty():
            raise UsageError("diagnose: give a log file, or pipe one in "
                             "(e.g. `ddp-doctor diagnose train.log`)")
        try:
            diagnosis = run_diagnosis(source)
        except InputError as exc:
            raise UsageError(str(exc)) from None
        report = diagnosis.report
        _render(report, options, diagnosis.facts)
    except UsageError as exc:
        _fail_usage(str(exc))
        return
    raise typer.Exit(report.exit_code(strict))


@app.command()
def smoke(
    device: str = typer.Option("auto", "--device", metavar="auto|cuda|cpu",
                               help="Train on the GPUs (NCCL) or the CPU (gloo); auto: GPUs "
                                    "when torch can use them."),
    nproc: Optional[int] = typer.Option(None, "--nproc", metavar="N",
                                        help="Processes on this node (default: one per GPU, "
                                             "2 on CPU)."),
    steps: int = typer.Option(30, "--steps", metavar="N", help="Training steps."),
    batch: int = typer.Option(8, "--batch", metavar="B",
                              help="Images per process and step (2 or more: BatchNorm)."),
    imgsz: int = typer.Option(128, "--imgsz", metavar="S",
                              help="Image size in pixels (a multiple of 32, 64 or more)."),
    model: str = typer.Option("n", "--model", metavar="n|s|m", help="Detector size."),
    workers: Optional[int] = typer.Option(None, "--workers", metavar="W",
                                          help="DataLoader workers per process (default 1 "
                                               "on CPU, 2 on GPU)."),
    launcher: str = typer.Option("torchrun", "--launcher", metavar="torchrun|spawn",
                                 help="python -m torch.distributed.run, or "
                                      "torch.multiprocessing.spawn."),
    mode: str = typer.Option("ddp", "--mode", metavar="ddp|dp",
                             help="DistributedDataParallel, or nn.DataParallel in one process."),
    sync_bn: bool = typer.Option(False, "--sync-bn",
                                 help="Convert BatchNorm to SyncBatchNorm (CUDA and --mode "
                                      "ddp only)."),
    amp: bool = typer.Option(True, "--amp/--no-amp", help="Mixed precision on GPUs."),
    scaling: bool = typer.Option(False, "--scaling",
                                 help="Also run on 1 rank: speedup and scaling efficiency."),
    timeout: float = typer.Option(180.0, "--timeout", metavar="S",
                                  help="Wall-clock deadline of a run (20 or more); everything "
                                       "is stopped after it."),
    stall_timeout: Optional[float] = typer.Option(
        None, "--stall-timeout", metavar="S",
        help="A rank silent this long is hung (default: min(45, timeout/3); 10 or more and "
             "less than --timeout). The process-group timeout is set between the two."),
    nnodes: Optional[int] = typer.Option(
        None, "--nnodes", metavar="N",
        help="Nodes in the job (default 1). Slurm's node count, node rank and first host "
             "are used only inside an srun step (SLURM_STEP_ID or SLURM_PROCID set), or when "
             "--nnodes > 1 is given in an allocation; a plain run in an salloc shell stays "
             "on this node. Outside Slurm, --nnodes > 1 needs --master-addr and "
             "--master-port (or MASTER_ADDR and MASTER_PORT)."),
    node_rank: Optional[int] = typer.Option(None, "--node-rank", metavar="R",
                                            help="This node's rank, 0 to nnodes-1."),
    master_addr: Optional[str] = typer.Option(None, "--master-addr", metavar="A",
                                              help="Address of node rank 0 (multi-node)."),
    master_port: Optional[int] = typer.Option(None, "--master-port", metavar="P",
                                              help="Rendezvous port, 1 to 65535 (default: a "
                                                   "free one)."),
    json_out: Optional[str] = JSON_OPT,
    markdown_out: Optional[str] = MD_OPT,
    python: Optional[str] = PYTHON_OPT,
    verbose: bool = VERBOSE_OPT,
    junit_out: Optional[str] = JUNIT_OPT,
    bundle_out: Optional[str] = BUNDLE_OPT,
    force: bool = FORCE_OPT,
    anonymize: bool = ANONYMIZE_OPT,
    config_file: Optional[Path] = CONFIG_OPT,
) -> None:
    """Prove that DDP training works here: train a small YOLO detector on every GPU.

    With a policy file, its smoke requirements (all-reduce bandwidth, scaling efficiency)
    are judged here too; the machine requirements are judged by `check` and `doctor`.
    """
    from ddp_doctor.smoke.launch import OptionsError, SmokeOptions, check_options, node_layout
    from ddp_doctor.smoke.run import SmokeUsageError, run_smoke

    render_options = RunOptions(json_out, markdown_out, verbose=verbose, junit_out=junit_out,
                                bundle_out=bundle_out, force=force, anonymize=anonymize,
                                config_file=config_file)
    try:
        _validate(render_options)
        policy = _smoke_policy(render_options)
        scaling = scaling or bool(policy is not None and policy.wants_scaling)
        for option, value, allowed in (("--device", device, ("auto", "cuda", "cpu")),
                                       ("--model", model, ("n", "s", "m")),
                                       ("--launcher", launcher, ("torchrun", "spawn")),
                                       ("--mode", mode, ("ddp", "dp"))):
            if value not in allowed:
                raise UsageError(f"{option} {value!r}: choose one of {', '.join(allowed)}")
        target = sys.executable
        options = SmokeOptions(
            device=device, nproc=nproc, steps=steps, batch=batch, imgsz=imgsz, model=model,
            workers=workers, launcher=launcher, mode=mode, sync_bn=sync_bn, amp=amp,
            scaling=scaling, timeout=timeout, stall_timeout=stall_timeout, nnodes=nnodes,
            node_rank=node_rank, master_addr=master_addr, master_port=master_port,
            python=target, keep_run_dir=bundle_out is not None)
        try:
            check_options(options)
            node_layout(options, dict(os.environ))
            if python:
                from ddp_doctor.facts.interpreter import InterpreterError, validate_interpreter
                from ddp_doctor.facts.seam import RealEnv

                try:
                    target = validate_interpreter(RealEnv(), python)
                except InterpreterError as exc:
                    raise UsageError(str(exc)) from None
                options = replace(options, python=target)
            if sync_bn and device == "auto":
                options = _sync_bn_device(options)
            result = run_smoke(options, _progress(json_out, markdown_out))
        except (SmokeUsageError, OptionsError) as exc:
            raise UsageError(str(exc)) from None
        report = _smoke_report(result, target)
        if policy is not None:
            from ddp_doctor.policy.load import apply_policy

            report = apply_policy(report, policy, None)
        render_options.smoke_dir = result.kept_run_dir
        _render_smoke(report, render_options)
    except UsageError as exc:
        _fail_usage(str(exc))
        return
    finally:
        _remove_kept_smoke_dir(render_options)
    raise typer.Exit(report.exit_code())


def _smoke_policy(options: RunOptions) -> object:
    """The policy's smoke requirements only: `smoke` gathers no facts to judge the others."""
    policy = _load_policy(options)
    if policy is None:
        return None
    return replace(policy, min_gpus=None, min_driver_version=None,  # type: ignore[type-var]
                   torch_versions=None)


def _sync_bn_device(options: SmokeOptions) -> SmokeOptions:
    """--sync-bn with --device auto: CUDA when torch sees GPUs, else a usage error."""
    from ddp_doctor.smoke.launch import check_options
    from ddp_doctor.smoke.run import resolve_device

    resolved = resolve_device(options)
    if isinstance(resolved, tuple):
        check_options(options, resolved[0])
        return replace(options, device=resolved[0])
    return options  # torch is unusable: the smoke run reports it as a finding


def _smoke_report(result: object, python: str) -> Report:
    from datetime import datetime, timezone

    data = result.data  # type: ignore[attr-defined]
    return Report(tool_version=__version__,
                  created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  results=(result.check_result(),),  # type: ignore[attr-defined]
                  environment={"python_executable": python}, smoke=data)


def _render_smoke(report: Report, options: RunOptions) -> None:
    from ddp_doctor.report.smoke import render_smoke_console

    _render(report, options, None, console_renderer=render_smoke_console)


@app.command("checks")
def list_checks() -> None:
    """List every check and the codes it can report."""
    catalogue = load_catalogue()
    table = Table(title="ddp-doctor checks", show_lines=False)
    for column in ("Area", "Check", "Title", "Needs facts", "Codes"):
        table.add_column(column)
    for spec in catalogue.specs:
        table.add_row(spec.area, spec.id, spec.title, ", ".join(spec.requires),
                      ", ".join(f"{c.id} ({c.category.value})" for c in spec.codes))
    console = Console()
    console.print(table)
    for failure in catalogue.failures:
        console.print(f"[magenta]plugin {failure.plugin} failed to load[/magenta]")
    raise typer.Exit(EXIT_INTERNAL if catalogue.failures else EXIT_READY)


@app.command()
def explain(code: str = typer.Argument(..., metavar="CODE", help="A finding code, e.g. DRV001.")
            ) -> None:
    """Explain a finding code: what it means, why it matters, how to fix it."""
    codes = all_codes(load_catalogue())
    found = codes.get(code.strip().upper())
    if found is None:
        _fail_usage(f"unknown code {code!r}; `ddp-doctor checks` lists them all "
                    f"({', '.join(sorted(codes))})")
    typer.echo(render_code_text(found))


def _fail_usage(message: str) -> None:
    typer.echo(f"ddp-doctor: error: {message}", err=True)
    raise typer.Exit(EXIT_USAGE)


def _check_output_path(value: Optional[str], option: str) -> None:
    """Refuse an unwritable output path before any work is done."""
    if value is None or value == "-":
        return
    path = Path(value)
    if path.is_dir():
        raise UsageError(f"{option} {value}: is a directory")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"{option} {value}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UsageError(f"{option} {value}: not writable")


def _check_bundle_path(value: str, force: bool) -> None:
    """A bundle path must name an archive kind, a real directory, and no file unless --force."""
    from ddp_doctor.bundle.archive import archive_kind

    if archive_kind(Path(value)) is None:
        raise UsageError(f"--bundle {value}: name a .zip or .tar.gz file")
    _check_output_path(value, "--bundle")
    if Path(value).exists() and not force:
        raise UsageError(f"--bundle {value}: already exists (add --force to overwrite it)")


def _validate(options: RunOptions) -> None:
    _check_output_path(options.json_out, "--json")
    _check_output_path(options.markdown_out, "--markdown")
    _check_output_path(options.junit_out, "--junit")
    _check_output_path(str(options.save_facts_file) if options.save_facts_file else None,
                       "--save-facts")
    stdout_users = [name for name, value in (("--json", options.json_out),
                                             ("--markdown", options.markdown_out),
                                             ("--junit", options.junit_out)) if value == "-"]
    if len(stdout_users) > 1:
        raise UsageError(f"{' and '.join(stdout_users)} cannot all write to stdout ('-')")
    if options.bundle_out is not None:
        _check_bundle_path(options.bundle_out, options.force)
    if options.facts_file and options.python:
        raise UsageError("--facts replays saved facts; it cannot be combined with --python")
    if options.facts_file and options.save_facts_file:
        raise UsageError("--facts replays saved facts; there is nothing new to --save-facts")
    if options.quiet and options.verbose:
        raise UsageError("--quiet and --verbose contradict each other")
    _plan_numbers(options)


def _load_policy(options: RunOptions) -> object:
    """The CI policy (--config, or the nearest ddp-doctor.toml / pyproject.toml), or None."""
    from ddp_doctor.policy.load import PolicyError, find_policy

    try:
        return find_policy(options.config_file, Path.cwd())
    except PolicyError as exc:
        raise UsageError(str(exc)) from None


def _whole_number(option: str, value: Optional[str], least: int) -> Optional[int]:
    """A plan option as an int, or one clear line about why it is not usable."""
    if value is None:
        return None
    text = value.strip()
    if not text.lstrip("-").isdigit():
        raise UsageError(f"{option} {value!r}: not a whole number")
    if int(text) < least:
        raise UsageError(f"{option} {text}: must be {least} or more")
    return int(text)


def _plan_numbers(options: RunOptions) -> dict[str, Optional[int]]:
    return {
        "gpus": _whole_number("--gpus", options.gpus, 1),
        "batch": _whole_number("--batch", options.batch, 1),
        "workers": _whole_number("--workers", options.workers, 0),
    }


def _gather_or_load(options: RunOptions) -> tuple[Facts, str]:
    if options.facts_file is not None:
        try:
            return load_facts(options.facts_file), str(options.facts_file)
        except FactsFileError as exc:
            raise UsageError(str(exc)) from None
    from ddp_doctor.facts.gather import GatherOptions, gather
    from ddp_doctor.facts.interpreter import InterpreterError, validate_interpreter
    from ddp_doctor.facts.seam import RealEnv

    env = RealEnv()
    python = sys.executable
    if options.python:
        try:
            python = validate_interpreter(env, options.python)
        except InterpreterError as exc:
            raise UsageError(str(exc)) from None
    facts = gather(env, GatherOptions(python=python, torch_timeout_s=options.probe_timeout,
                                      nvidia_smi_text=options.bundle_out is not None))
    return facts, "live"


def _write(target: str, text: str, option: str) -> None:
    if target == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    try:
        write_text_atomic(Path(target), text)
    except OSError as exc:
        raise UsageError(f"{option} {target}: cannot write: {exc.strerror or exc}") from None


def _render(report: Report, options: RunOptions, facts: Optional[Facts] = None,
            console_renderer: object = None) -> None:
    """Every output of one run, from one Report, after one redaction pass.

    Secrets are removed from the Report itself (and --anonymize applied) before any
    renderer sees it, so the console, --json, --markdown, --junit, the GitHub annotations
    and the --bundle cannot disagree or leak.
    """
    from ddp_doctor.redact.secrets import Redactor
    from ddp_doctor.report.console import render_console
    from ddp_doctor.report.json import render_json
    from ddp_doctor.report.markdown import render_markdown

    redactor = Redactor.for_run(facts, anonymize=options.anonymize)
    # The smoke files' real place: --anonymize may rewrite the path in the Report.
    smoke_dir = options.smoke_dir or (report.smoke or {}).get("run_dir")
    report = redactor.report(report)
    if options.json_out:
        _write(options.json_out, render_json(report, options.strict), "--json")
    if options.markdown_out:
        _write(options.markdown_out, render_markdown(report, options.strict), "--markdown")
    if options.junit_out:
        from ddp_doctor.report.junit import render_junit

        _write(options.junit_out, render_junit(report, options.strict), "--junit")
    if os.environ.get("GITHUB_ACTIONS") == "true":
        from ddp_doctor.report.github import emit_github

        # A report on stdout stays parseable: the annotations go to stderr, which the
        # runner also reads for workflow commands (see ddp_doctor.report.github, docs/ci.md).
        to_stdout = "-" in (options.json_out, options.markdown_out, options.junit_out)
        emit_github(report, options.strict, out=sys.stderr if to_stdout else None)
    if options.bundle_out:
        from ddp_doctor.bundle.write import BundleError, write_bundle

        try:
            write_bundle(Path(options.bundle_out), report, facts, redactor, force=options.force,
                         strict=options.strict, smoke_dir=smoke_dir)
        except BundleError as exc:
            raise UsageError(str(exc)) from None
    if "-" not in (options.json_out, options.markdown_out, options.junit_out):
        if console_renderer is not None:
            console_renderer(report, Console(highlight=False), verbose=options.verbose)
        else:
            render_console(report, Console(highlight=False), verbose=options.verbose,
                           quiet=options.quiet, strict=options.strict)


def _run(options: RunOptions) -> None:
    from ddp_doctor.runner import build_report

    try:
        _validate(options)
        policy = _load_policy(options)
        catalogue: Catalogue = load_catalogue()
        facts, source = _gather_or_load(options)
        apply_plan(facts, make_plan(**_plan_numbers(options)))
        if options.save_facts_file is not None:
            try:
                from ddp_doctor.redact.secrets import Redactor

                save_facts(facts, options.save_facts_file,
                           Redactor.for_run(facts, anonymize=options.anonymize))
            except OSError as exc:
                raise UsageError(f"--save-facts {options.save_facts_file}: cannot write: "
                                 f"{exc.strerror or exc}") from None
        report = build_report(catalogue, facts, facts_source=source)
        if options.smoke:
            report = _with_smoke(report, facts, options,
                                 scaling=getattr(policy, "wants_scaling", False))
        if policy is not None:
            from ddp_doctor.policy.load import apply_policy

            report = apply_policy(report, policy, facts)
        _render(report, options, facts)
    except UsageError as exc:
        _fail_usage(str(exc))
        return
    finally:
        _remove_kept_smoke_dir(options)
    raise typer.Exit(report.exit_code(options.strict))


def _remove_kept_smoke_dir(options: RunOptions) -> None:
    """A passed smoke run's directory was kept only for --bundle: remove it once written."""
    if options.smoke_dir:
        import shutil

        shutil.rmtree(options.smoke_dir, ignore_errors=True)
        options.smoke_dir = None


def _progress(options_json: Optional[str], options_md: Optional[str]):
    """Live per-rank bars on the terminal, unless a report goes to stdout."""
    if "-" in (options_json, options_md):
        return None
    from ddp_doctor.report.smoke import RichProgress

    console = Console(highlight=False)
    return RichProgress(console) if console.is_terminal else None


def _with_smoke(report: Report, facts: Facts, options: RunOptions,
                scaling: bool = False) -> Report:
    """The checks' report plus the smoke job (or the reason it was skipped); with
    ``scaling`` (a policy's min-scaling-efficiency) also on 1 rank, for the efficiency."""
    from ddp_doctor.smoke.launch import OptionsError, SmokeOptions
    from ddp_doctor.smoke.plan import plan_smoke
    from ddp_doctor.smoke.run import SmokeUsageError, run_smoke, skipped

    python = (facts.get("python") or {}).get("executable") or sys.executable
    nvml_gpus = len((facts.get("nvml") or {}).get("gpus") or [])
    planned = plan_smoke(report, facts.get("torch"), _plan_numbers(options),
                         SmokeOptions(python=python, scaling=scaling), nvml_gpus=nvml_gpus)
    if isinstance(planned, str):
        result = skipped(planned)
    else:
        planned = replace(planned, keep_run_dir=options.bundle_out is not None)
        try:
            result = run_smoke(planned, _progress(options.json_out, options.markdown_out))
        except (SmokeUsageError, OptionsError) as exc:
            raise UsageError(str(exc)) from None
        options.smoke_dir = result.kept_run_dir
    return replace(report, results=(*report.results, result.check_result()), smoke=result.data)


_ROOT_FLAGS = {"-h", "--help", "--version"}


def normalize_argv(argv: list[str]) -> list[str]:
    """Make ``doctor`` the default command: ``ddp-doctor --json -`` means ``doctor --json -``."""
    if not argv or (argv[0].startswith("-") and argv[0] not in _ROOT_FLAGS):
        return ["doctor", *argv]
    return argv


def main(argv: Optional[list[str]] = None) -> None:
    args = normalize_argv(list(sys.argv[1:] if argv is None else argv))
    try:
        app(args=args, prog_name="ddp-doctor", standalone_mode=True)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        typer.echo("ddp-doctor: interrupted", err=True)
        raise SystemExit(130) from None
    except Exception as exc:  # a bug in the doctor itself
        if os.environ.get("DDP_DOCTOR_DEBUG") or "--verbose" in args or "-v" in args:
            import traceback

            traceback.print_exc()
        typer.echo(f"ddp-doctor: internal error: {type(exc).__name__}: {exc} "
                   f"(set DDP_DOCTOR_DEBUG=1 for the traceback)", err=True)
        raise SystemExit(EXIT_INTERNAL) from None
