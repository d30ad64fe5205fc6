"""What each command does, behind the command line: one flow per command, one ``emit``.

``cli.py`` declares the options and calls one function here; each returns the exit code:
0 ready, 1 problems found, 3 the doctor itself failed. Bad input of any kind (an option
value, a path, a facts file, a policy file) is a ``UsageError`` raised before any work
starts where it can be known then, printed by the CLI as one line, exit code 2.

Every flow ends in ``emit``: all outputs of a run come from one Report after one
redaction pass, so the console, --json, --markdown, --junit, the GitHub annotations and
the --bundle cannot disagree or leak.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional, Protocol, TypeVar

from rich.console import Console

from ddp_doctor import __version__, runner
from ddp_doctor.bundle.archive import BundleError
from ddp_doctor.bundle.write import write_bundle
from ddp_doctor.categories import Category
from ddp_doctor.codes import (
    all_codes,
    category_named,
    render_code_text,
    suggest,
    suggest_categories,
)
from ddp_doctor.diagnose import InputError, diagnose
from ddp_doctor.facts.gather import GatherOptions, gather
from ddp_doctor.facts.interpreter import InterpreterError, validate_interpreter
from ddp_doctor.facts.plan import apply_plan, make_plan
from ddp_doctor.facts.seam import RealEnv
from ddp_doctor.facts.snapshot import (
    Facts,
    FactsFileError,
    load_facts,
    save_facts,
    write_text_atomic,
)
from ddp_doctor.facts.torch_probe import TORCH_PROBE_TIMEOUT_S
from ddp_doctor.model import Family, Report
from ddp_doctor.policy.apply import apply_policy
from ddp_doctor.policy.load import Policy, PolicyError, find_policy
from ddp_doctor.redact.secrets import Redactor
from ddp_doctor.registry import Catalogue, load_catalogue
from ddp_doctor.report.catalogue import codes_json, render_category, render_checks, render_codes
from ddp_doctor.report.console import render_console
from ddp_doctor.report.github import emit_github
from ddp_doctor.report.json import render_json
from ddp_doctor.report.junit import render_junit
from ddp_doctor.report.markdown import render_markdown
from ddp_doctor.report.smoke import render_smoke_console
from ddp_doctor.smoke import plan as smoke_plan
from ddp_doctor.smoke import run as smoke_run
from ddp_doctor.smoke.launch import (
    CHOICES,
    LIMITS,
    MODEL_STRIDES,
    OptionsError,
    SmokeOptions,
    check_options,
    node_layout,
)
from ddp_doctor.smoke.progress import LineProgress, RichProgress
from ddp_doctor.usage import (
    EXIT_INTERNAL,
    EXIT_PROBLEMS,
    EXIT_READY,
    EXIT_USAGE,
    Limit,
    OutputPath,
    UsageError,
    check_outputs,
    one_of,
)
from ddp_doctor.wording import human_bytes

__all__ = ["EXIT_INTERNAL", "EXIT_PROBLEMS", "EXIT_READY", "EXIT_USAGE", "Common",
           "MachineRequest", "SmokeRequest", "UsageError", "emit", "run_check", "run_checks",
           "run_codes", "run_diagnose", "run_doctor", "run_explain", "run_smoke"]

T = TypeVar("T")

# The launch plan of check and doctor: the job the user is about to start.
GPUS = Limit("--gpus", 1)
GLOBAL_BATCH = Limit("--global-batch", 1)
PLAN_WORKERS = Limit("--workers", 0)
PROBE_TIMEOUT = Limit("--probe-timeout", 1, whole=False, unit=" s")


@dataclass(frozen=True)
class Common:
    """The options every report-producing command takes (check, doctor, smoke, diagnose).

    Each has one meaning everywhere: how much the console shows (quiet, verbose), what
    fails the run (strict), which files are written (json, markdown, junit, bundle with
    force), which policy judges it (config) and how much identity is removed (anonymize).
    """

    quiet: bool = False
    verbose: bool = False
    strict: bool = False
    json: Optional[str] = None
    markdown: Optional[str] = None
    junit: Optional[str] = None
    bundle: Optional[str] = None
    force: bool = False
    config: Optional[Path] = None
    anonymize: bool = False

    @property
    def reports(self) -> list[OutputPath]:
        return [OutputPath("--json", self.json), OutputPath("--markdown", self.markdown),
                OutputPath("--junit", self.junit)]

    @property
    def to_stdout(self) -> bool:
        """A report goes to stdout: the console report and live progress stay off it."""
        return "-" in (self.json, self.markdown, self.junit)


@dataclass(frozen=True)
class MachineRequest:
    """What check and doctor examine: this machine (or saved facts) and the planned job.

    The numbers are kept as typed so that a bad one is reported with the text given.
    """

    python: Optional[str] = None
    facts: Optional[Path] = None
    save_facts: Optional[Path] = None
    probe_timeout: Optional[str] = None
    gpus: Optional[str] = None
    global_batch: Optional[str] = None
    workers: Optional[str] = None


@dataclass(frozen=True)
class SmokeRequest:
    """The smoke job as typed on the command line; ``None`` means "choose for this machine"."""

    device: str = "auto"
    nproc: Optional[str] = None
    steps: Optional[str] = None
    batch_per_process: Optional[str] = None
    imgsz: Optional[str] = None
    model: str = "n"
    workers: Optional[str] = None
    launcher: str = "torchrun"
    mode: str = "ddp"
    sync_bn: bool = False
    amp: bool = True
    scaling: bool = False
    timeout: Optional[str] = None
    stall_timeout: Optional[str] = None
    nnodes: Optional[str] = None
    node_rank: Optional[str] = None
    master_addr: Optional[str] = None
    master_port: Optional[str] = None
    python: Optional[str] = None


class ConsoleView(Protocol):
    """A terminal renderer: the full report, or the smoke job's own view."""

    def __call__(self, report: Report, console: Console, *, verbose: bool = False,
                 quiet: bool = False, strict: bool = False) -> None: ...


# --- the flows ----------------------------------------------------------------------------

def run_check(common: Common, machine: MachineRequest) -> int:
    """Gather facts (or load saved ones) and run the checks: the CI pre-flight."""
    return _examine(common, machine, smoke=False)


def run_doctor(common: Common, machine: MachineRequest, *, smoke: bool = True) -> int:
    """The checks, then the smoke job unless ``smoke`` is off or saved facts are replayed."""
    return _examine(common, machine, smoke=smoke and machine.facts is None)


def run_smoke(common: Common, request: SmokeRequest) -> int:
    """Train the small DDP job here and judge it (and the policy's smoke requirements)."""
    _check_common(common)
    policy = _smoke_policy(common.config)
    options = _smoke_options(request, keep_run_dir=common.bundle is not None)
    if policy is not None and policy.wants_scaling:
        options = replace(options, scaling=True)
    try:
        check_options(options)
        node_layout(options, dict(os.environ))
        if request.python:
            options = replace(options, python=_interpreter(request.python))
        if options.sync_bn and options.device == "auto":
            options = _sync_bn_device(options)
        result = smoke_run.run_smoke(options, _progress(common))
    except (smoke_run.SmokeUsageError, OptionsError) as exc:
        raise UsageError(str(exc)) from None
    try:
        report = Report(tool_version=__version__, created_at=_now(),
                        results=(result.check_result(),),
                        environment={"python_executable": options.python}, smoke=result.data)
        if policy is not None:
            report = apply_policy(report, policy, None)
        emit(report, common, smoke_dir=result.kept_run_dir, view=render_smoke_console)
    finally:
        _remove(result.kept_run_dir)
    return report.exit_code(common.strict)


def run_diagnose(common: Common, source: str) -> int:
    """Read a failure log (a file, stdin, a .gz, a support bundle) and name the causes."""
    if common.bundle is not None:
        raise UsageError("diagnose: --bundle is written by the commands that examine a "
                         "machine (check, doctor, smoke); attach the log itself to the ticket")
    if common.config is not None:
        raise UsageError("diagnose: --config judges a machine against a policy (check, "
                         "doctor, smoke); a log diagnosis uses none")
    _check_common(common)
    if source == "-" and sys.stdin.isatty():
        raise UsageError("diagnose: give a log file, or pipe one in "
                         "(e.g. `ddp-doctor diagnose train.log`)")
    try:
        diagnosis = diagnose(source)
    except InputError as exc:
        raise UsageError(str(exc)) from None
    emit(diagnosis.report, common, facts=diagnosis.facts)
    return diagnosis.report.exit_code(common.strict)


def emit(report: Report, outputs: Common, *, facts: Optional[Facts] = None,
         smoke_dir: Optional[str] = None, view: ConsoleView = render_console) -> None:
    """Every output of one run, from one Report, after one redaction pass.

    Secrets are removed from the Report itself (and --anonymize applied) before any
    renderer sees it. The bundle is written first: it is the largest and likeliest to fail
    (a full disk), and when it fails no report has been written that describes a run
    whose outputs are incomplete. ``smoke_dir`` is the smoke run's directory as it is on
    disk (the Report's copy of the path may be anonymized).
    """
    redactor = Redactor.for_run(facts, anonymize=outputs.anonymize)
    smoke_dir = smoke_dir or (report.smoke or {}).get("run_dir")
    report = redactor.report(report)
    strict = outputs.strict
    if outputs.bundle is not None:
        try:
            write_bundle(Path(outputs.bundle), report, facts, redactor, force=outputs.force,
                         strict=strict, smoke_dir=smoke_dir)
        except BundleError as exc:
            raise UsageError(str(exc)) from None
        _confirm(outputs, "support bundle", outputs.bundle)
    for target, render, option, what in (
            (outputs.json, render_json, "--json", "JSON report"),
            (outputs.markdown, render_markdown, "--markdown", "Markdown report"),
            (outputs.junit, render_junit, "--junit", "JUnit report")):
        if target:
            _write(target, render(report, strict), option)
            if target != "-":
                _confirm(outputs, what, target)
    if os.environ.get("GITHUB_ACTIONS") == "true":
        # A report on stdout stays parseable: the annotations go to stderr, which the
        # runner also reads for workflow commands (see ddp_doctor.report.github, docs/ci.md).
        emit_github(report, strict, out=sys.stderr if outputs.to_stdout else None)
    if not outputs.to_stdout:
        view(report, Console(highlight=False), verbose=outputs.verbose, quiet=outputs.quiet,
             strict=strict)


# --- check and doctor ---------------------------------------------------------------------

def _examine(common: Common, machine: MachineRequest, smoke: bool) -> int:
    save_path = str(machine.save_facts) if machine.save_facts is not None else None
    _check_common(common, OutputPath("--save-facts", save_path))
    if machine.facts is not None and machine.python:
        raise UsageError("--facts replays saved facts; it cannot be combined with --python")
    if machine.facts is not None and machine.save_facts is not None:
        raise UsageError("--facts replays saved facts; there is nothing new to --save-facts")
    plan = make_plan(gpus=GPUS.whole_number(machine.gpus),
                     batch=GLOBAL_BATCH.whole_number(machine.global_batch),
                     workers=PLAN_WORKERS.whole_number(machine.workers))
    probe_timeout = PROBE_TIMEOUT.number(machine.probe_timeout) or TORCH_PROBE_TIMEOUT_S
    policy = _policy(common.config)
    catalogue = load_catalogue()
    # A bad --python is a one-line error before anything is shown or gathered.
    python = _interpreter(machine.python) if machine.python else sys.executable
    with _phase(common, f"gathering facts (driver, CUDA, torch, host; the torch probe has "
                        f"{probe_timeout:.0f} s)", live=machine.facts is None):
        facts, source = _facts(machine, python, probe_timeout,
                               keep_smi_text=common.bundle is not None)
    apply_plan(facts, plan)
    if machine.save_facts is not None:
        try:
            save_facts(facts, machine.save_facts,
                       Redactor.for_run(facts, anonymize=common.anonymize))
        except OSError as exc:
            raise UsageError(f"--save-facts {machine.save_facts}: cannot write: "
                             f"{exc.strerror or exc}") from None
        _confirm(common, "facts snapshot", str(machine.save_facts))
    report = runner.build_report(catalogue, facts, facts_source=source)
    kept: Optional[str] = None
    try:
        if smoke:
            report, kept = _with_smoke(report, facts, plan, common,
                                       scaling=policy is not None and policy.wants_scaling)
        if policy is not None:
            report = apply_policy(report, policy, facts)
        emit(report, common, facts=facts, smoke_dir=kept)
    finally:
        _remove(kept)
    return report.exit_code(common.strict)


@contextmanager
def _phase(common: Common, what: str, live: bool = True) -> Iterator[None]:
    """A slow phase shown while it runs, on stderr: a spinner on a terminal, a line before
    and after in a pipe or CI log (so a stuck probe is visible), nothing with --quiet."""
    if common.quiet or not live:
        yield
        return
    console = Console(stderr=True, highlight=False)
    if console.is_terminal:
        with console.status(what):
            yield
        return
    started = time.monotonic()
    sys.stderr.write(f"ddp-doctor: {what}\n")
    sys.stderr.flush()
    yield
    sys.stderr.write(f"ddp-doctor: done in {time.monotonic() - started:.1f} s\n")
    sys.stderr.flush()


def _facts(machine: MachineRequest, python: str, probe_timeout: float, keep_smi_text: bool
           ) -> tuple[Facts, str]:
    """This machine's facts (in ``--python``'s interpreter), or the saved ones replayed."""
    if machine.facts is not None:
        try:
            return load_facts(machine.facts), str(machine.facts)
        except FactsFileError as exc:
            raise UsageError(str(exc)) from None
    facts = gather(RealEnv(), GatherOptions(python=python, torch_timeout_s=probe_timeout,
                                            nvidia_smi_text=keep_smi_text))
    return facts, "live"


def _with_smoke(report: Report, facts: Facts, plan: Mapping[str, Any], common: Common,
                scaling: bool) -> tuple[Report, Optional[str]]:
    """The checks' report plus the smoke job (or why it was skipped), and the run directory
    kept for --bundle. ``scaling`` (a policy's min-scaling-efficiency) adds the 1-rank run."""
    python = (facts.get("python") or {}).get("executable") or sys.executable
    nvml_gpus = len((facts.get("nvml") or {}).get("gpus") or [])
    planned = smoke_plan.plan_smoke(report, facts.get("torch"), plan,
                                    SmokeOptions(python=python, scaling=scaling),
                                    nvml_gpus=nvml_gpus)
    if isinstance(planned, str):
        result = smoke_run.skipped(planned)
    else:
        planned = replace(planned, keep_run_dir=common.bundle is not None)
        try:
            result = smoke_run.run_smoke(planned, _progress(common))
        except (smoke_run.SmokeUsageError, OptionsError) as exc:
            raise UsageError(str(exc)) from None
        # A CPU fallback (SMK017) names the checks' findings that explain it.
        result.findings = smoke_plan.with_check_causes(result.findings, report)
    report = replace(report, results=(*report.results, result.check_result()),
                     smoke=result.data)
    return report, result.kept_run_dir


# --- smoke --------------------------------------------------------------------------------

def _smoke_options(request: SmokeRequest, keep_run_dir: bool) -> SmokeOptions:
    """The typed options as SmokeOptions; each number's form is judged here, with its
    limits (``check_options`` then judges the values together)."""
    for name in CHOICES:
        one_of(f"--{name}", getattr(request, name), CHOICES[name])
    defaults = SmokeOptions()

    def whole(name: str, text: Optional[str]) -> Optional[int]:
        return LIMITS[name].whole_number(text)

    stall = LIMITS["stall_timeout"].number(request.stall_timeout)
    return SmokeOptions(
        device=request.device, nproc=whole("nproc", request.nproc),
        steps=_or(whole("steps", request.steps), defaults.steps),
        batch=_or(whole("batch", request.batch_per_process), defaults.batch),
        imgsz=_or(_imgsz(request.imgsz), defaults.imgsz),
        model=request.model, workers=whole("workers", request.workers),
        launcher=request.launcher, mode=request.mode, sync_bn=request.sync_bn,
        amp=request.amp, scaling=request.scaling,
        timeout=_or(LIMITS["timeout"].number(request.timeout), defaults.timeout),
        stall_timeout=stall, nnodes=whole("nnodes", request.nnodes),
        node_rank=whole("node_rank", request.node_rank), master_addr=request.master_addr,
        master_port=whole("master_port", request.master_port), keep_run_dir=keep_run_dir)


def _imgsz(text: Optional[str]) -> Optional[int]:
    """--imgsz's form only: its range comes with the nearest valid sizes (check_options)."""
    if text is not None and not text.strip().lstrip("+-").isdigit():
        raise UsageError(f"--imgsz {text!r}: not a whole number; use a multiple of "
                         f"{max(MODEL_STRIDES)}, {LIMITS['imgsz'].allowed}")
    return int(text) if text is not None else None


def _or(value: Optional[T], default: T) -> T:
    return default if value is None else value


def _sync_bn_device(options: SmokeOptions) -> SmokeOptions:
    """--sync-bn with --device auto: CUDA when torch sees GPUs, else a usage error."""
    resolved = smoke_run.resolve_device(options)
    if isinstance(resolved, tuple):
        check_options(options, resolved[0])
        return replace(options, device=resolved[0])
    return options  # torch is unusable: the smoke run reports it as a finding


def _smoke_policy(config: Optional[Path]) -> Optional[Policy]:
    """The policy's smoke requirements only: `smoke` gathers no facts to judge the others."""
    policy = _policy(config)
    if policy is None:
        return None
    return replace(policy, min_gpus=None, min_driver_version=None, torch_versions=None)


def _progress(common: Common) -> Optional[smoke_run.ProgressSink]:
    """Where the smoke job's progress goes, always stderr (stdout may carry a report): live
    per-rank bars on a terminal, plain lines in a pipe or CI log, nothing with --quiet."""
    if common.quiet:
        return None
    console = Console(stderr=True, highlight=False)
    return RichProgress(console) if console.is_terminal else LineProgress(sys.stderr)


def _remove(kept: Optional[str]) -> None:
    """A passed smoke run's directory was kept only for --bundle: remove it once written."""
    if kept:
        shutil.rmtree(kept, ignore_errors=True)


# --- what the doctor knows: checks, codes, explain ----------------------------------------

def run_checks() -> int:
    """List every check and the codes it reports; 3 when a check plugin failed to load."""
    catalogue = load_catalogue()
    render_checks(catalogue, Console(highlight=False))
    return EXIT_INTERNAL if catalogue.failures else EXIT_READY


def run_codes(family: Optional[str], category: Optional[str], as_json: bool) -> int:
    """List every code of every family, or those of one family and/or category, as a table
    or (``as_json``) a JSON array on stdout. Both filters are judged before anything is
    listed; 3 when a check plugin failed to load (its codes are missing from the list)."""
    wanted_family = _family(family)
    wanted_category = _category(category)
    catalogue = load_catalogue()
    codes = [code for code in all_codes(catalogue).values()
             if wanted_family in (None, code.family)
             and wanted_category in (None, code.category)]
    if as_json:
        sys.stdout.write(json.dumps(codes_json(codes), indent=2, ensure_ascii=False) + "\n")
        sys.stdout.flush()
    else:
        render_codes(codes, Console(highlight=False),
                     empty=_nothing_matches(wanted_family, wanted_category))
    for failure in catalogue.failures:  # stderr: a JSON listing on stdout stays parseable
        print(f"ddp-doctor: plugin {failure.plugin} failed to load: {failure.error}",
              file=sys.stderr)
    return EXIT_INTERNAL if catalogue.failures else EXIT_READY


def run_explain(topic: str) -> int:
    """Explain a code (``DRV001``, any case) or a failure category (``nccl_p2p``, any case,
    dashes or underscores); anything else is a UsageError with the closest of both."""
    catalogue = load_catalogue()
    codes = all_codes(catalogue)
    code = codes.get(topic.strip().upper())
    if code is not None:
        sys.stdout.write(render_code_text(code) + "\n")
        return EXIT_READY
    category = category_named(topic)
    if category is not None:
        render_category(category, codes.values(), Console(highlight=False))
        return EXIT_READY
    raise UsageError(_unknown_topic(topic, catalogue))


_CODE_SHAPED = re.compile(r"\s*[A-Za-z]+\d+\s*")


def _unknown_topic(topic: str, catalogue: Catalogue) -> str:
    """One line for an unknown ``explain`` topic: the closest codes and categories, the
    kind the text looks like first (letters then digits: a code), and where to look."""
    codes = suggest(topic, catalogue)
    categories = [c.value for c in suggest_categories(topic)]
    code_shaped = _CODE_SHAPED.fullmatch(topic) is not None
    close = (codes + categories if code_shaped else categories + codes)[:5]
    what = "code" if code_shaped else "code or category"
    hint = (f"did you mean {', '.join(close)}?" if close
            else "no code or category is close to it;")
    return f"unknown {what} {topic!r}; {hint} `ddp-doctor codes` lists every code"


def _family(text: Optional[str]) -> Optional[Family]:
    """The family ``--family`` names (any case), or a UsageError with the allowed ones."""
    if text is None:
        return None
    names = [family.value for family in Family]
    key = text.strip().lower()
    if key in names:
        return Family(key)
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else ""
    raise UsageError(f"--family {text!r}: choose one of {', '.join(names)}{hint}")


def _category(text: Optional[str]) -> Optional[Category]:
    """The category ``--category`` names (any case, dashes or underscores), or a UsageError
    with the closest ones and every id."""
    if text is None:
        return None
    category = category_named(text)
    if category is not None:
        return category
    close = [c.value for c in suggest_categories(text)]
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise UsageError(f"--category {text!r}: not a failure category{hint} (categories: "
                     f"{', '.join(c.value for c in Category)})")


def _nothing_matches(family: Optional[Family], category: Optional[Category]) -> str:
    """What an empty listing says: which filters together matched no code."""
    kind = f"{family.value} code" if family is not None else "code"
    where = f" has category {category.value}" if category is not None else " is known"
    return f"no {kind}{where}"


# --- shared -------------------------------------------------------------------------------

def _check_common(common: Common, *more: OutputPath) -> None:
    """The common options, judged the same way for every command, before any work."""
    if common.quiet and common.verbose:
        raise UsageError("--quiet and --verbose contradict each other")
    outputs: Sequence[OutputPath] = (*common.reports, *more)
    check_outputs(outputs, common.bundle, common.force)


def _policy(config: Optional[Path]) -> Optional[Policy]:
    """The CI policy (--config, or the nearest ddp-doctor.toml / pyproject.toml), or None."""
    try:
        return find_policy(config, Path.cwd())
    except PolicyError as exc:
        raise UsageError(str(exc)) from None


def _interpreter(python: str) -> str:
    try:
        return validate_interpreter(RealEnv(), python)
    except InterpreterError as exc:
        raise UsageError(str(exc)) from None


def _confirm(common: Common, what: str, target: str) -> None:
    """Say on stderr where a file went (stdout may carry a report), unless --quiet."""
    if common.quiet:
        return
    path = Path(target)
    try:
        size = f", {human_bytes(path.stat().st_size)}"
    except OSError:
        size = ""
    sys.stderr.write(f"ddp-doctor: wrote the {what} to {path.resolve()}{size}\n")
    sys.stderr.flush()


def _write(target: str, text: str, option: str) -> None:
    if target == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    try:
        write_text_atomic(Path(target), text)
    except OSError as exc:
        raise UsageError(f"{option} {target}: cannot write: {exc.strerror or exc}") from None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
