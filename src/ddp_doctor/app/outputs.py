"""Where a run's results go: ``emit`` writes every output of one Report after one
redaction pass; files are confirmed, slow phases and the smoke job's progress are shown on
stderr.

The console and JSON renderers load with this module; the bundle writer, the Markdown,
JUnit and GitHub renderers only for a run that asks for them (``check``'s CPU beside its
torch probe is shared with it on a busy machine).
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Protocol

from rich.console import Console

from ddp_doctor.app.requests import Common
from ddp_doctor.facts.snapshot import (
    Facts,
    write_text_atomic,
)
from ddp_doctor.model import Report
from ddp_doctor.redact.redactor import Redactor
from ddp_doctor.report.console import render_console
from ddp_doctor.report.json import render_json
from ddp_doctor.usage import (
    UsageError,
)
from ddp_doctor.wording import human_bytes

if TYPE_CHECKING:  # the smoke job's modules load only when a smoke job runs (not for check)
    from ddp_doctor.smoke.run import ProgressSink


class ConsoleView(Protocol):
    """A terminal renderer: the full report, or the smoke job's own view."""

    def __call__(self, report: Report, console: Console, *, verbose: bool = False,
                 quiet: bool = False, strict: bool = False) -> None: ...


def emit(report: Report, outputs: Common, *, facts: Optional[Facts] = None,
         smoke_dir: Optional[str] = None, run_log: Optional[str] = None,
         run_files: Optional[str] = None,
         view: ConsoleView = render_console, identities: object = None) -> None:
    """Every output of one run, from one Report, after one redaction pass.

    Secrets are removed from the Report itself (and --anonymize applied) before any
    renderer sees it. The bundle is written first: it is the largest and likeliest to fail
    (a full disk), and when it fails no report has been written that describes a run
    whose outputs are incomplete. ``smoke_dir`` is the smoke run's directory as it is on
    disk (the Report's copy of the path may be anonymized); ``run_log`` the output of the
    command ``run`` supervised, which goes into the bundle, redacted, with the hung ranks'
    stacks and Flight Recorder dumps in ``run_files``. ``identities`` holds
    more facts to learn host and user names from (``compare`` reports on several machines).
    """
    redactor = Redactor.for_run(facts, anonymize=outputs.anonymize)
    redactor.learn(identities)  # more hosts than the run's own (compare's nodes)
    smoke_dir = smoke_dir or (report.smoke or {}).get("run_dir")
    report = redactor.report(report)
    strict = outputs.strict
    if outputs.bundle is not None:
        from ddp_doctor.bundle.archive import BundleError
        from ddp_doctor.bundle.write import write_bundle

        try:
            write_bundle(Path(outputs.bundle), report, facts, redactor, force=outputs.force,
                         strict=strict, smoke_dir=smoke_dir, run_log=run_log,
                         run_files=run_files)
        except BundleError as exc:
            raise UsageError(str(exc)) from None
        confirm(outputs, "support bundle", outputs.bundle)
    for target, render, option, what in (
            (outputs.json, render_json, "--json", "JSON report"),
            (outputs.markdown, _render_markdown, "--markdown", "Markdown report"),
            (outputs.junit, _render_junit, "--junit", "JUnit report")):
        if target:
            write_output(target, render(report, strict), option)
            if target != "-":
                confirm(outputs, what, target)
    if os.environ.get("GITHUB_ACTIONS") == "true":
        from ddp_doctor.report.github import emit_github

        # A report on stdout stays parseable: the annotations go to stderr, which the
        # runner also reads for workflow commands (see ddp_doctor.report.github, docs/ci.md).
        emit_github(report, strict, out=sys.stderr if outputs.to_stdout else None)
    if not outputs.to_stdout:
        view(report, Console(highlight=False), verbose=outputs.verbose, quiet=outputs.quiet,
             strict=strict)


def _render_markdown(report: Report, strict: bool) -> str:
    from ddp_doctor.report.markdown import render_markdown

    return render_markdown(report, strict)


def _render_junit(report: Report, strict: bool) -> str:
    """The JUnit report, its smoke criteria judged by the smoke job's own codes."""
    from ddp_doctor.report.junit import render_junit
    from ddp_doctor.smoke.junit_codes import SMOKE_CODES

    return render_junit(report, strict, SMOKE_CODES)


@contextmanager
def phase(common: Common, what: str, live: bool = True) -> Iterator[None]:
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


def progress_sink(common: Common) -> Optional[ProgressSink]:
    """Where the smoke job's progress goes, always stderr (stdout may carry a report): live
    per-rank bars on a terminal, plain lines in a pipe or CI log, nothing with --quiet."""
    from ddp_doctor.smoke.progress import LineProgress, RichProgress

    if common.quiet:
        return None
    console = Console(stderr=True, highlight=False)
    return RichProgress(console) if console.is_terminal else LineProgress(sys.stderr)


def remove_kept(kept: Optional[str]) -> None:
    """A passed smoke run's directory was kept only for --bundle: remove it once written."""
    if kept:
        shutil.rmtree(kept, ignore_errors=True)


def confirm(common: Common, what: str, target: str) -> None:
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


def write_output(target: str, text: str, option: str) -> None:
    if target == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    try:
        write_text_atomic(Path(target), text)
    except OSError as exc:
        raise UsageError(f"{option} {target}: cannot write: {exc.strerror or exc}") from None


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
