"""Judging an Ultralytics smoke run from what it left: events, results.csv, weights, ranks.

Pure functions over recorded files, so each criterion is tested without Ultralytics.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass, field
from typing import Any

from ddp_doctor.model import Evidence, Finding, Step
from ddp_doctor.smoke import codes as C

# Ultralytics' DDP parent logs the torch.distributed.run command it starts.
_DDP_NPROC = re.compile(r"DDP:.*--nproc_per_node[ =](\d+)")
_TORCH_MODULES = ("torch", "torchvision")


@dataclass
class UltraRun:
    """What one run of the driver left behind, read by the trainer."""

    python: str
    device: str  # cpu | cuda
    world: int  # processes Ultralytics should start (1 on the CPU)
    epochs: int
    events: list[dict[str, Any]] = field(default_factory=list)
    results_csv: str | None = None
    weights: bool = False
    ranks_started: int = 0
    returncode: int | None = None
    stopped_by: str | None = None  # None | "deadline"
    output: str = ""  # the driver's stdout and stderr (Ultralytics' log)
    wall_s: float = 0.0


def parse_results(text: str) -> list[dict[str, float]]:
    """results.csv rows as floats by column name (Ultralytics pads names with spaces)."""
    rows = []
    for row in csv.DictReader(io.StringIO(text)):
        parsed = {}
        for key, value in row.items():
            if key is None or value is None:
                continue
            try:
                parsed[key.strip()] = float(value)
            except ValueError:
                parsed[key.strip()] = math.nan
        rows.append(parsed)
    return rows


def _event(run: UltraRun, kind: str) -> dict[str, Any] | None:
    return next((e for e in run.events if e.get("kind") == kind), None)


def install_finding(run: UltraRun, error: str) -> Finding:
    """Ultralytics cannot be imported: the cause, and the exact command for this interpreter."""
    missing = re.search(r"No module named '([^'.]+)", error)
    torch_side = missing is not None and missing.group(1) in _TORCH_MODULES
    evidence = (Evidence("import ultralytics", error, run.python),)
    install = f"{run.python} -m pip install ultralytics"
    if torch_side:
        return Finding(C.ULTRA_TORCH_MISSING, f"Ultralytics cannot import "
                       f"{missing.group(1) if missing else 'torch'} in {run.python}", evidence,
                       (Step("Install torch and torchvision for this interpreter.",
                             url="https://pytorch.org/get-started/locally/"),
                        Step("Then install Ultralytics.", command=install)))
    if missing is not None and missing.group(1) == "ultralytics":
        return Finding(C.ULTRA_MISSING, f"Ultralytics is not installed in {run.python}",
                       evidence, (Step("Install it in the interpreter you train with.",
                                       command=install),))
    return Finding(C.ULTRA_MISSING, f"Ultralytics fails to import in {run.python}", evidence,
                   (Step("Upgrade it to a version that supports this interpreter's torch.",
                         command=f"{run.python} -m pip install -U ultralytics"),))


def _last_error_line(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in reversed(lines):
        if re.match(r"[\w.]*(Error|Exception)\b", line):
            return line[:300]
    return lines[-1][:300] if lines else "(no output)"


def judge(run: UltraRun) -> tuple[list[Finding], dict[str, Any]]:
    """The findings of one run and its measurements (for the smoke JSON's ``ultralytics``)."""
    data = _measure(run)
    imported = _event(run, "error")
    if imported is not None and imported.get("phase") == "import":
        return [install_finding(run, str(imported.get("error")))], data
    findings: list[Finding] = []
    if run.stopped_by is not None:
        findings.append(Finding(
            C.DEADLINE, "Ultralytics training did not finish within the deadline",
            (Evidence("epochs finished", f"{data['epochs_done']} of {run.epochs}",
                      "results.csv"),),
            (Step("Give it longer.", command="ddp-doctor smoke --trainer ultralytics "
                  "--timeout 600"),)))
        return findings, data
    failed = _event(run, "error")
    if failed is not None and failed.get("phase") == "ddp_requirements":
        missing = [str(m) for m in failed.get("missing") or []]
        quoted = " ".join(f"'{m}'" for m in missing)
        return [Finding(C.ULTRA_DDP_NEEDS, f"Ultralytics' multi-GPU training needs "
                        f"{', '.join(missing)}, not installed in {run.python}",
                        (Evidence("missing", ", ".join(missing),
                                  "ultralytics.utils.dist.generate_ddp_file"),),
                        (Step("Install it in the interpreter you train with.",
                              command=f"{run.python} -m pip install {quoted}"),))], data
    if run.returncode != 0 or failed is not None:
        why = str(failed.get("error")) if failed else _last_error_line(run.output)
        findings.append(Finding(C.ULTRA_FAILED, f"Ultralytics training failed: {why}",
                                (Evidence("exit code", str(run.returncode), "driver"),
                                 Evidence("error", _last_error_line(run.output),
                                          "Ultralytics output"))))
        return findings, data
    rows = parse_results(run.results_csv or "")
    if len(rows) < run.epochs:
        findings.append(Finding(C.ULTRA_EPOCHS_MISSING, f"Ultralytics finished {len(rows)} "
                                f"of {run.epochs} epochs",
                                (Evidence("results.csv rows", str(len(rows)), "run/"),)))
    bad = sorted({k for row in rows for k, v in row.items()
                  if k.startswith("train/") and k.endswith("_loss") and not math.isfinite(v)})
    if bad:
        findings.append(Finding(C.ULTRA_LOSS_NOT_FINITE, "Ultralytics' training loss is not "
                                "finite", (Evidence("columns", ", ".join(bad), "results.csv"),)))
    box = [row.get("train/box_loss", math.nan) for row in rows]
    if len(box) >= 2 and not bad and not box[-1] < box[0]:
        findings.append(Finding(C.ULTRA_LOSS_FLAT, f"Ultralytics' box loss did not fall: "
                                f"{box[0]:.4g} → {box[-1]:.4g}",
                                (Evidence("train/box_loss per epoch",
                                          ", ".join(f"{v:.4g}" for v in box), "results.csv"),)))
    if not run.weights:
        findings.append(Finding(C.ULTRA_NO_WEIGHTS, "Ultralytics wrote no weights/last.pt",
                                (Evidence("weights/last.pt", "missing", "run/"),)))
    # Versions that do not carry callbacks into their DDP ranks leave no marker at all; their
    # DDP command still says how many ranks were launched, and DDP epochs cannot complete
    # unless every rank joins the gradient all-reduce.
    unmarked_but_complete = (run.ranks_started == 0 and data["ddp_nproc"] == run.world
                             and len(rows) >= run.epochs)
    if run.device == "cuda" and run.ranks_started < run.world and not unmarked_but_complete:
        findings.append(Finding(
            C.ULTRA_RANKS_MISSING, f"{run.ranks_started} of {run.world} Ultralytics DDP ranks "
            "started training", (Evidence("DDP processes launched",
                                          str(data["ddp_nproc"] or "not logged"),
                                          "Ultralytics' DDP command"),)))
    return findings, data


def _measure(run: UltraRun) -> dict[str, Any]:
    rows = parse_results(run.results_csv or "")
    start = _event(run, "start")
    epochs = [e for e in run.events if e.get("kind") == "epoch"]
    first = None
    if start is not None and epochs:
        first = round(float(epochs[0]["t"]) - float(start["t"]), 3)
    times = [row["time"] for row in rows if "time" in row and math.isfinite(row["time"])]
    if len(times) >= 2:  # the time column is seconds since training began, per epoch
        epoch_s: float | None = round((times[-1] - times[0]) / (len(times) - 1), 3)
    elif len(epochs) >= 2:
        epoch_s = round((float(epochs[-1]["t"]) - float(epochs[0]["t"])) / (len(epochs) - 1), 3)
    else:
        epoch_s = None
    nproc = _DDP_NPROC.search(run.output)
    imported, model = _event(run, "import"), _event(run, "model")
    return {
        "version": imported.get("version") if imported else None,
        "model_yaml": model.get("yaml") if model else None,
        "epochs": run.epochs, "epochs_done": len(rows),
        "box_loss": [round(v, 5) if math.isfinite(v) else None
                     for v in (r.get("train/box_loss", math.nan) for r in rows)],
        "time_to_first_epoch_s": first, "epoch_s": epoch_s,
        "ranks_started": run.ranks_started, "ddp_nproc": int(nproc.group(1)) if nproc else None,
        "weights_written": run.weights,
    }
