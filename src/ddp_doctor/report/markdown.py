"""Markdown report, ready to paste into a GitHub issue or support ticket."""

from __future__ import annotations

from ddp_doctor.model import Finding, Report, Status
from ddp_doctor.report.glyphs import STATUS_GLYPH, area_title


def _cell(text: object) -> str:
    """Table cells: no pipes or newlines, so the table stays a table."""
    return str(text).replace("|", "\\|").replace("\n", " ").strip() or " "


def _finding(finding: Finding) -> list[str]:
    sev = finding.effective_severity.value
    lines = [f"### `{finding.code.id}` {finding.title}", ""]
    lines.append(f"*{sev}* · category `{finding.category.value}`"
                 + (f" · affects {', '.join(finding.affects)}" if finding.affects else "")
                 + (f" · **ignored by policy:** {finding.ignored}"
                    if finding.ignored is not None else ""))
    lines.append("")
    if finding.evidence:
        lines += ["| Evidence | Value | Source |", "|---|---|---|"]
        lines += [f"| {_cell(e.label)} | {_cell(e.value)} | {_cell(e.source)} |"
                  for e in finding.evidence]
        lines.append("")
    if finding.remediation:
        lines.append("**How to fix**")
        lines.append("")
        for number, step in enumerate(finding.remediation, 1):
            text = f"{number}. {step.text}"
            if step.url:
                text += f" ([link]({step.url}))"
            lines.append(text)
            if step.command:
                lines += ["", "   ```sh", f"   {step.command}", "   ```", ""]
        if lines[-1]:
            lines.append("")
    docs = finding.docs_url or finding.code.docs_url
    lines.append(f"Run `ddp-doctor explain {finding.code.id}` for details"
                 + (f"; see also {docs}." if docs else "."))
    lines.append("")
    return lines


def _source(facts_source: str) -> str:
    if facts_source.startswith("log: "):
        return f" · diagnosis of the log `{facts_source[5:]}`"
    return f" · replayed from `{facts_source}`" if facts_source != "live" else ""


def render_markdown(report: Report, strict: bool = False) -> str:
    env = report.environment
    code = report.exit_code(strict)
    lines = [
        "## ddp-doctor report",
        "",
        f"**Verdict: {report.verdict(strict)}** (exit code {code}) · ddp-doctor "
        f"{report.tool_version} · {report.created_at}"
        + _source(report.facts_source),
        "",
        "| Environment | |",
        "|---|---|",
    ]
    rows = [
        ("OS", env.get("os")), ("Kernel", env.get("kernel")),
        ("WSL", f"WSL{env['wsl']}" if env.get("wsl") else None),
        ("Container", env.get("container")), ("Python", env.get("python")),
        ("torch", env.get("torch") or "not importable"),
        ("torch CUDA build", env.get("torch_cuda") or ("none" if env.get("torch") else None)),
        ("Driver", env.get("driver") or "none"), ("Driver supports CUDA", env.get("driver_cuda")),
        ("GPUs", ", ".join(env.get("gpus") or []) or "none"),
        ("torch.cuda.is_available()", env.get("cuda_available")),
    ]
    if "torch" in env:  # a `ddp-doctor smoke` report gathers no machine facts
        lines += [f"| {name} | {_cell(value)} |" for name, value in rows if value is not None]
    else:
        lines = lines[:-3]
    lines.append("")
    if report.smoke is not None:
        from ddp_doctor.report.smoke import smoke_markdown

        lines += smoke_markdown(report.smoke)
    if report.nodes is not None:
        from ddp_doctor.report.nodes import nodes_markdown

        lines += nodes_markdown(report.nodes)
    findings = report.findings
    lines += [f"## Findings ({len(findings)})", ""]
    if not findings:
        lines += ["No problems found.", ""]
    for finding in findings:
        lines += _finding(finding)
    lines += ["<details><summary>All checks</summary>", "", "| | Check | Area | Result |",
              "|---|---|---|---|"]
    for r in report.results:
        lines.append(f"| {STATUS_GLYPH[r.status]} {r.status.value} | {_cell(r.title)} | "
                     f"{area_title(r.area)} | {_cell(r.summary)} |")
    lines += ["", "</details>", ""]
    for r in report.results:
        if r.command:
            lines += [f"{_cell(r.title)}:", "", "```sh", r.command, "```", ""]
    errored = [r for r in report.results if r.status is Status.ERROR]
    for r in errored:
        lines += [f"<details><summary>Check error: {r.check_id}</summary>", "", "```",
                  (r.error or "").rstrip(), "```", "", "</details>", ""]
    return "\n".join(lines)
