"""GitHub Actions: findings as annotations, and the verdict as a job summary.

A CI pre-flight step is read in two places on GitHub: the annotations on the run page and
the step's Markdown summary. Both are written here from the run's one (already redacted)
``Report``, so they cannot disagree with the JSON, JUnit or console output of that run.

Formats, from GitHub's documentation
(https://docs.github.com/en/actions/using-workflows/workflow-commands-for-github-actions):

- ``::error title=TITLE::MESSAGE`` and ``::warning ...`` are workflow commands; the
  message and the property values are escaped as the runner's ``ActionCommand`` unescapes
  them (``%`` -> ``%25``, CR -> ``%0D``, LF -> ``%0A``; in properties also ``:`` ->
  ``%3A`` and ``,`` -> ``%2C``), so a newline or a ``::`` in a finding cannot end the
  command early or start a forged one.
- GitHub shows at most 10 error and 10 warning annotations per step (50 per job); the
  findings come errors first, so the root causes are the ones shown, and the summary lists
  every finding.
- ``$GITHUB_STEP_SUMMARY`` names a file the step appends Markdown to (1 MiB at most per
  step). It is appended to, never overwritten: other tools in the same step write there too.

Where the commands go: stdout, as the documentation says. When stdout carries a report
(``--json -``, ``--markdown -``, ``--junit -``) the caller passes ``out=sys.stderr`` so the
report stays parseable: the runner feeds a ``run:`` step's stderr lines to the same command
processor as its stdout lines (``src/Runner.Worker/Handlers/ScriptHandler.cs`` in
https://github.com/actions/runner wires one ``OutputManager`` to each stream), so the
annotations still appear. See docs/ci.md.

Info findings and findings a policy file ignores get no annotation: they do not change the
verdict, and annotations are few per step; the summary table lists them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TextIO

from ddp_doctor.model import Finding, Report, Severity, Status

# Long evidence values (a quoted log line, a path list) would make an annotation a wall
# of text; the full value is in the JSON report and the summary's artifacts.
_MAX_PART = 200


def escape_data(text: str) -> str:
    """A workflow command's message, escaped as GitHub's runner unescapes it."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value: the message escapes plus ``:`` and ``,``."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_PART else text[: _MAX_PART - 1] + "…"


def annotation_level(report: Report, finding: Finding, strict: bool = False) -> str | None:
    """``error``, ``warning``, or None (no annotation) for one finding of ``report``.

    A finding that fails the run is an error: warnings too under ``--strict`` or the
    policy's ``fail-on-warnings``. A finding the policy ignores gets no annotation (the
    summary lists it with the reason).
    """
    if report.is_problem(finding, strict):
        return "error"
    if finding.ignored is None and finding.effective_severity is Severity.WARNING:
        return "warning"
    return None


def annotation_message(finding: Finding) -> str:
    """Title, the first piece of evidence and the first fix: what a reviewer needs first."""
    lines = [_short(finding.title)]
    if finding.evidence:
        first = finding.evidence[0]
        lines.append(_short(f"Evidence: {first.label}: {first.value}"))
    step = finding.remediation[0] if finding.remediation else None
    if step is not None:
        lines.append(_short(f"Fix: {step.command}" if step.command else f"Fix: {step.text}"))
    lines.append(f"Details: ddp-doctor explain {finding.code.id}")
    return "\n".join(lines)


def workflow_command(level: str, title: str, message: str) -> str:
    """One ``::level title=...::message`` line, escaped."""
    return f"::{level} title={escape_property(title)}::{escape_data(message)}"


def annotation_lines(report: Report, strict: bool = False) -> list[str]:
    """One workflow command per error or warning finding, and one per crashed check."""
    lines = []
    for finding in report.findings:
        level = annotation_level(report, finding, strict)
        if level is not None:
            title = f"{finding.code.id} {finding.category.value}"
            lines.append(workflow_command(level, title, annotation_message(finding)))
    for result in report.results:
        if result.status is Status.ERROR:
            error = (result.error or "").strip().splitlines()
            last = _short(error[-1]) if error else "no error text"
            lines.append(workflow_command(
                "error", f"ddp-doctor check {result.check_id} crashed",
                f"The check {result.check_id} raised {last}\n"
                "This is a bug in ddp-doctor (exit code 3); the JSON report has the traceback."))
    return lines


def _cell(text: object) -> str:
    """A Markdown table cell: no pipes or line breaks, and not too long."""
    return _short(str(text)).replace("|", "\\|") or " "


def summary_markdown(report: Report, strict: bool = False) -> str:
    """The step summary: verdict, check counts, every finding, the smoke measurements."""
    code = report.exit_code(strict)
    mark = {0: "✅", 1: "❌", 3: "⚠️"}[code]
    source = "" if report.facts_source == "live" else f" · facts: `{report.facts_source}`"
    if report.policy_file is not None:
        source += f" · policy: `{report.policy_file}`"
    lines = [
        f"## {mark} ddp-doctor: {report.verdict(strict)}",
        "",
        f"Exit code {code} · ddp-doctor {report.tool_version} · {report.created_at}{source}"
        + (" · `--strict`: warnings fail the run" if strict else ""),
        "",
        "| " + " | ".join(s.value for s in Status) + " |",
        "|" + "---|" * len(Status),
        "| " + " | ".join(str(report.count(s)) for s in Status) + " |",
        "",
    ]
    findings = report.findings
    lines += [f"### Findings ({len(findings)})", ""]
    if findings:
        lines += ["| Severity | Code | Category | Title |", "|---|---|---|---|"]
        for finding in findings:
            severity = finding.effective_severity.value
            if finding.ignored is not None:
                severity += f" (ignored by policy: {finding.ignored})"
            elif finding.effective_severity is Severity.WARNING and report.is_problem(
                    finding, strict):
                severity += " (fails the run)"
            lines.append(f"| {_cell(severity)} | `{finding.code.id}` | {finding.category.value} | "
                         f"{_cell(finding.title)} |")
        lines += ["", "`ddp-doctor explain CODE` says what a code means and how to fix it.", ""]
    else:
        lines += ["No problems found.", ""]
    crashed = [r.check_id for r in report.results if r.status is Status.ERROR]
    if crashed:
        lines += [f"Checks that crashed (a ddp-doctor bug): {', '.join(crashed)}", ""]
    if report.smoke is not None:
        from ddp_doctor.report.smoke import smoke_markdown

        lines += ["#" + line if line.startswith("## ") else line
                  for line in smoke_markdown(report.smoke)]
    return "\n".join(lines) + "\n"


def append_summary(path: str, text: str) -> bool:
    """Append to the step summary; a failure is one warning line on stderr, never fatal.

    The summary is a courtesy: the exit code, the annotations and the report files carry
    the verdict, so an unwritable summary must not fail the step.
    """
    try:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        print(f"ddp-doctor: warning: cannot append the job summary to {path}: "
              f"{exc.strerror or exc}", file=sys.stderr)
        return False
    return True


def emit_github(report: Report, strict: bool = False, environ: Mapping[str, str] | None = None,
                out: TextIO | None = None) -> None:
    """Print the annotations to ``out`` (stdout by default) and append the step summary.

    ``report`` is the run's redacted Report (``app.emit`` calls this after redaction).
    ``environ`` defaults to the process environment; the summary is written only when
    ``GITHUB_STEP_SUMMARY`` names a file.
    """
    environ = os.environ if environ is None else environ
    stream = sys.stdout if out is None else out
    lines = annotation_lines(report, strict)
    if lines:
        stream.write("\n".join(lines) + "\n")
        stream.flush()
    summary_path = environ.get("GITHUB_STEP_SUMMARY")
    if summary_path:
        append_summary(summary_path, summary_markdown(report, strict))
