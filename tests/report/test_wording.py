"""Messages a person would write: every finding of every recorded machine and log, rendered.

Each fixture machine's report, each corpus log's diagnosis and the smoke job's reports are
rendered to the terminal (80 columns) and to Markdown; no finding may read like a template
that was filled in blindly: "(s)" plurals ("0 GPU(s)"), "at most 0", a Python None or nan
shown to the user, an empty command to copy, the same evidence line twice, an internal
name as a label, or a category label other than the one the code registry gives.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from ddp_doctor.checklist import load_catalogue
from ddp_doctor.diagnose import diagnose
from ddp_doctor.facts.snapshot import load_facts
from ddp_doctor.model import Finding, Report
from ddp_doctor.report.console import render_console
from ddp_doctor.report.markdown import render_markdown
from ddp_doctor.runner import build_report
from ddp_doctor.smoke.run import SmokeResult
from tests.conftest import FACTS_DIR
from tests.support import smoke_reports
from tests.support.corpus import corpus_reports

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"
MACHINES = sorted(FACTS_DIR.glob("*.json"))

BAD_WORDING = {
    "a '(s)' plural": re.compile(r"\w\(s\)"),
    "'at most 0'": re.compile(r"\bat most 0\b"),
    "a Python None": re.compile(r"(?<![\w.'\"`])None(?![\w'\"`])"),
    "a nan": re.compile(r"(?<![\w.])nan(?![\w])", re.IGNORECASE),
    "an internal section name": re.compile(r"(?<![\w.])(?:yolov5_banner|yolo_checks|"
                                           r"nvidia_smi_q|nvidia_smi|collect_env)(?![\w.])"),
}


def _quotes_a_log(label: str) -> bool:
    """Evidence that quotes a log line verbatim ("line 4", "consequence, line 2"): the
    user's own text, kept as printed, "(s)" and all."""
    return re.search(r"(?:^|, )line \d+$", label) is not None


# Findings whose evidence and steps quote solved public threads (their titles, log lines,
# root causes and fixes) as their authors wrote them, "(s)" and all; their titles and
# labels are ddp-doctor's own words and are still read.
QUOTES_THREADS = {"DIAG008", "DIAG009"}


def _texts(finding: Finding) -> Iterator[tuple[str, str]]:
    yield "title", finding.title
    # ...and the fallback's low-confidence leads (DIAG101...) quote the log's error lines.
    quoting = finding.code.id in QUOTES_THREADS or finding.code.id.startswith("DIAG1")
    for e in finding.evidence:
        if quoting or _quotes_a_log(e.label):
            yield f"evidence {e.label!r}", f"{e.label} ({e.source})"
        else:
            yield f"evidence {e.label!r}", f"{e.label}: {e.value} ({e.source})"
    for step in finding.remediation:
        if not quoting:
            yield "step", step.text
        if step.command is not None:
            yield "command", step.command


def _problems(report: Report) -> list[str]:
    problems = []
    for finding in report.findings:
        where = f"{finding.code.id} {finding.title!r}"
        for part, text in _texts(finding):
            for what, pattern in BAD_WORDING.items():
                if pattern.search(text):
                    problems.append(f"{where}: {part} has {what}: {text!r}")
        for step in finding.remediation:
            if step.command is not None and not step.command.strip():
                problems.append(f"{where}: an empty command in step {step.text!r}")
        seen = [(e.label, e.value) for e in finding.evidence]
        if len(seen) != len(set(seen)):
            problems.append(f"{where}: an evidence line repeats: {seen}")
    return problems


def _rendered(report: Report) -> str:
    out = io.StringIO()
    render_console(report, Console(file=out, width=80, color_system=None, highlight=False),
                   verbose=True)
    return out.getvalue() + render_markdown(report)


def _category_labels(report: Report, console: str) -> list[str]:
    """Each finding is shown with its code and the registry's category for that code."""
    return [f"{f.code.id} shown without [{f.category.value}]" for f in report.findings
            if f"{f.code.id} [{f.category.value}]" not in console]


@pytest.mark.parametrize("path", MACHINES, ids=[p.stem for p in MACHINES])
def test_every_finding_of_every_recorded_machine_reads_right(path):
    report = build_report(load_catalogue(), load_facts(path), facts_source=str(path))
    text = _rendered(report)
    assert _problems(report) + _category_labels(report, text) == []


@pytest.mark.slow  # diagnoses the whole corpus (shared with the corpus tests: corpus_reports)
def test_every_finding_of_every_corpus_log_reads_right():
    problems = []
    for path, report in corpus_reports():
        problems += [f"{path.name}: {p}" for p in _problems(report)]
        problems += [f"{path.name}: {p}" for p in
                     _category_labels(report, _rendered(report))]
    assert problems == []


@pytest.mark.parametrize("make", ["passing_run", "failing_run", "short_run", "stalled_run"])
def test_every_finding_of_the_smoke_reports_reads_right(make):
    result: SmokeResult = getattr(smoke_reports, make)()
    report = build_report(load_catalogue(), load_facts(FACTS_DIR / "sandbox_cpu_container.json"))
    report = replace(report, results=(*report.results, result.check_result()),
                     smoke=result.data)
    assert _problems(report) + _category_labels(report, _rendered(report)) == []


def test_the_patterns_catch_what_they_are_for():
    """The checks above would pass on anything if the patterns matched nothing."""
    samples = {"a '(s)' plural": "needs 0 GPU(s)", "'at most 0'": "at most 0 workers",
               "a Python None": "torch.version.cuda: None", "a nan": "loss nan",
               "an internal section name": "read from yolov5_banner at line 1"}
    for what, sample in samples.items():
        assert BAD_WORDING[what].search(sample), what
    for fine in ("1 GPU", "2 GPUs", "--workers 0", "NoneType", "'None'", "nanoseconds",
                 "torch.cuda.nan_to_num", "collect_env.py"):
        assert not any(p.search(fine) for p in BAD_WORDING.values()), fine


def test_a_gpu_nvml_could_not_name_is_shown_by_where_it_is():
    """A real paste (NVIDIA/open-gpu-kernel-modules#387): "Unable to determine the device
    handle for GPU 0000:0B:00.0: Unknown Error" gives a GPU without a model name; the
    environment row names it by its bus id instead of breaking the Markdown report."""
    report = diagnose(str(LOGS / "open-gpu-kernel-modules-387.log")).report
    assert report.environment["gpus"] == ["GPU at 0000:0B:00.0 (model not shown)"]
    assert "| GPUs | GPU at 0000:0B:00.0 (model not shown) |" in render_markdown(report)
