"""summary.md for bench/gpu_validate.sh: what the validation run on a GPU machine showed.

The shell script runs each step under ``timeout`` and appends one line per step to
``steps.tsv`` (name, exit code or "skipped", seconds, note); this module reads that, the
machine description the script saved, the reports and facts the steps wrote and the GPU
suite's JUnit XML, and writes ``summary.md``. Its exit code is the run's: 0 only when every
step that ran passed (a dry run's skipped steps do not fail it).

Every reader is a plain function of already-loaded data, so the CPU tests check them on
recorded reports and the GPU suite reuses them (the probe's timing parts, the smoke
figures). Standard library only: it runs in the fresh validation venv before anything else
is trusted there.

Usage: ``python bench/gpu_validate_summary.py OUT_DIR``.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Optional

SKIPPED = "skipped"


def read_steps(text: str) -> list[dict[str, Any]]:
    """The steps.tsv lines: ``name<TAB>rc<TAB>seconds<TAB>note``; rc is an int or "skipped"."""
    steps = []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, rc, seconds, *note = line.split("\t")
        steps.append({"name": name, "rc": rc if rc == SKIPPED else int(rc),
                      "seconds": float(seconds), "note": note[0] if note else ""})
    return steps


def step_passed(step: dict[str, Any]) -> bool:
    return step["rc"] == SKIPPED or step["rc"] == 0


def probe_timings(facts: dict[str, Any]) -> dict[str, Any]:
    """Where ``check``'s torch probe spent its time, from a ``--save-facts`` snapshot.

    ``duration_s`` is the whole probe as the parent measured it; the parts are the probe's
    own (``startup_s`` the interpreter's start, ``import_torch_s``, ``cuda_init_s``,
    ``gpu_tests_s``, ...); ``per_gpu`` the functional and cuDNN test of each GPU. Empty when
    the snapshot has no torch fact.
    """
    record = (facts.get("facts") or {}).get("torch") or {}
    torch = record.get("value") or {}
    probe = torch.get("probe") or {}
    if not probe:
        return {}
    out: dict[str, Any] = {"duration_s": probe.get("duration_s"),
                           **(probe.get("timings") or {})}
    cuda = torch.get("cuda") or {}
    per_gpu: dict[int, dict[str, Any]] = {}
    for key, label in (("functional", "functional_s"), ("cudnn_test", "cudnn_s")):
        for result in cuda.get(key) or []:
            entry = per_gpu.setdefault(int(result["index"]), {"index": int(result["index"])})
            entry[label] = result.get("duration_s")
    out["per_gpu"] = [per_gpu[i] for i in sorted(per_gpu)]
    return out


def smoke_figures(report: dict[str, Any]) -> dict[str, Any]:
    """The smoke job's key figures from a JSON report (``smoke``, ``doctor``): None where
    the run measured nothing (or there was no smoke job)."""
    smoke = report.get("smoke") or {}
    measured = smoke.get("measurements") or {}
    peaks = [r.get("peak_gpu_mem_bytes") for r in measured.get("per_rank") or []]
    peaks = [p for p in peaks if isinstance(p, (int, float))]
    scaling = smoke.get("scaling") or {}
    return {
        "ok": smoke.get("ok"),
        "device": smoke.get("device"),
        "backend": smoke.get("backend"),
        "ranks": smoke.get("ranks"),
        "wall_s": smoke.get("wall_s"),
        "median_step_s": measured.get("median_step_s"),
        "images_per_s": measured.get("images_per_s_total"),
        "peak_gpu_mem_bytes": max(peaks) if peaks else None,
        "allreduce_busbw_gbps": measured.get("allreduce_busbw_gbps"),
        "allreduce_algbw_gbps": measured.get("allreduce_algbw_gbps"),
        "allreduce_note": measured.get("allreduce_note"),
        "scaling_efficiency": scaling.get("efficiency"),
        "scaling_not_measured": scaling.get("not_measured"),
    }


def junit_counts(xml_text: str) -> dict[str, int]:
    """passed/failed/errors/skipped/total of a pytest ``--junitxml`` file."""
    root = ET.fromstring(xml_text)
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {"total": 0, "failed": 0, "errors": 0, "skipped": 0}
    for suite in suites:
        counts["total"] += int(suite.get("tests", 0))
        counts["failed"] += int(suite.get("failures", 0))
        counts["errors"] += int(suite.get("errors", 0))
        counts["skipped"] += int(suite.get("skipped", 0))
    counts["passed"] = counts["total"] - counts["failed"] - counts["errors"] - counts["skipped"]
    return counts


def junit_failures(xml_text: str) -> list[str]:
    """``file::test`` of each test case that failed or errored, in the order run."""
    failed = []
    for case in ET.fromstring(xml_text).iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            module = (case.get("classname") or "").replace(".", "/")
            failed.append(f"{module}.py::{case.get('name')}" if module else str(case.get("name")))
    return failed


def _load_json(path: Path) -> Optional[dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _num(value: Any, unit: str = "", digits: int = 2) -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "-"
    return f"{value:.{digits}f}{unit}"


def _gib(value: Any) -> str:
    return _num(value / 2**30, " GiB") if isinstance(value, (int, float)) else "-"


def render_summary(steps: list[dict[str, Any]], machine: dict[str, Any],
                   suite: Optional[dict[str, int]], timings: dict[str, Any],
                   smoke: dict[str, Any], dry_run: bool,
                   suite_failures: Optional[list[str]] = None) -> str:
    """summary.md's text from what the run produced."""
    ok = all(step_passed(s) for s in steps)
    lines = ["# GPU validation of ddp-doctor", ""]
    if dry_run:
        lines += ["**Dry run**: the set-up ran for real; every GPU step was skipped.", ""]
    lines += [f"Result: **{'passed' if ok else 'FAILED'}**", "", "## Machine", ""]
    for key in ("host", "gpus", "driver", "python", "torch", "torch_cuda", "torch_file",
                "ddp_doctor", "ddp_doctor_file"):
        lines.append(f"- {key}: {machine.get(key, '-') or '-'}")
    lines += ["", "## Steps", "", "| step | exit code | seconds | note |", "|---|---|---|---|"]
    for s in steps:
        lines.append(f"| {s['name']} | {s['rc']} | {s['seconds']:.1f} | {s['note']} |")
    skipped = [s for s in steps if s["rc"] == SKIPPED]
    if skipped:
        lines += ["", "Skipped:"]
        lines += [f"- {s['name']} ({s['note'] or 'dry run'})" for s in skipped]
    lines += ["", "## GPU suite (pytest tests/gpu -m gpu)", ""]
    if suite is None:
        lines.append("not run")
    else:
        lines.append(", ".join(f"{suite[k]} {k}" for k in
                               ("passed", "failed", "errors", "skipped", "total")))
        lines += [f"- failed: {name}" for name in suite_failures or []]
    lines += ["", "## check: the torch probe's time", ""]
    if not timings:
        lines.append("no facts")
    else:
        parts = [k for k in timings if k.endswith("_s")]
        lines.append(", ".join(f"{k[:-2]} {_num(timings[k], ' s')}" for k in parts))
        for gpu in timings.get("per_gpu") or []:
            lines.append(f"- GPU {gpu['index']}: functional {_num(gpu.get('functional_s'), ' s')}"
                         f", cuDNN {_num(gpu.get('cudnn_s'), ' s')}")
    lines += ["", "## smoke --device cuda --scaling", ""]
    if not smoke or smoke.get("ok") is None:
        lines.append("no smoke report")
    else:
        lines += [
            f"- ok: {smoke['ok']}, device {smoke['device']}, backend {smoke['backend']}, "
            f"{smoke['ranks']} rank(s), wall {_num(smoke['wall_s'], ' s')}",
            f"- median step: {_num(smoke['median_step_s'], ' s', 4)}; images/s: "
            f"{_num(smoke['images_per_s'], '', 1)}; peak GPU memory: "
            f"{_gib(smoke['peak_gpu_mem_bytes'])}",
            f"- all-reduce busbw: {_num(smoke['allreduce_busbw_gbps'], ' GB/s')} (algbw "
            f"{_num(smoke['allreduce_algbw_gbps'], ' GB/s')}"
            + (f"; {smoke['allreduce_note']}" if smoke.get("allreduce_note") else "") + ")",
            "- scaling efficiency: " + (f"not measured: {smoke['scaling_not_measured']}"
                                        if smoke.get("scaling_not_measured")
                                        else _num(smoke["scaling_efficiency"])),
        ]
    return "\n".join(lines) + "\n"


def summarize(out: Path) -> int:
    """Write OUT/summary.md; 0 when every step passed."""
    steps = read_steps((out / "steps.tsv").read_text(encoding="utf-8")
                       if (out / "steps.tsv").exists() else "")
    machine = _load_json(out / "machine.json") or {}
    suite, failures = None, None
    if (out / "suite.xml").exists():
        xml = (out / "suite.xml").read_text(encoding="utf-8")
        try:
            suite, failures = junit_counts(xml), junit_failures(xml)
        except ET.ParseError:
            suite = None
    facts = _load_json(out / "facts.json") or {}
    smoke = _load_json(out / "smoke.json") or {}
    dry_run = (out / "DRY_RUN").exists()
    text = render_summary(steps, machine, suite, probe_timings(facts), smoke_figures(smoke),
                          dry_run, failures)
    (out / "summary.md").write_text(text, encoding="utf-8")
    return 0 if steps and all(step_passed(s) for s in steps) else 1


if __name__ == "__main__":
    sys.exit(summarize(Path(sys.argv[1])))
