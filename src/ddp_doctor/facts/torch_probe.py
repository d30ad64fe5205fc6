"""Parent side of the interpreter probe: run it with a deadline, read what it said.

The probe script (``python_probe_script.py``) runs in the interpreter being diagnosed,
the doctor's own by default or another one with ``--python``. Importing torch and
initialising CUDA can hang on a wedged driver or crash the interpreter outright, so the
script announces each stage before it starts it and sends results as it goes: after a
hang or a segfault the parent still knows everything up to that point and exactly
where it stopped. Two facts come out of one run: ``python`` (the interpreter and its
packages) and ``torch`` (the build, its libraries, CUDA devices and every exception).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from ddp_doctor.facts import python_probe_script as probe_script
from ddp_doctor.facts.probe_deadline import BUDGETED_GPUS as BUDGETED_GPUS
from ddp_doctor.facts.probe_deadline import TORCH_PROBE_BASE_S as TORCH_PROBE_BASE_S
from ddp_doctor.facts.probe_deadline import TORCH_PROBE_TIMEOUT_S as TORCH_PROBE_TIMEOUT_S
from ddp_doctor.facts.seam import CommandResult, Env
from ddp_doctor.facts.snapshot import FactRecord

MARK = "@@ddp-doctor@@ "
# The deadline (TORCH_PROBE_TIMEOUT_S and its parts) lives in probe_deadline.py, which
# imports nothing, so that --help can show it without loading this module.

GPU_STAGES = ("cuda.functional:", "cuda.cudnn_test:")
SCRIPT_PATH = Path(__file__).with_name("python_probe_script.py")


def probe_script_source() -> str:
    return SCRIPT_PATH.read_text(encoding="utf-8")


def parse_probe_output(stdout: str) -> tuple[dict[str, Any], list[str]]:
    """Merge the probe's result lines into one dict and list the stages it announced."""
    values: dict[str, Any] = {}
    stages: list[str] = []
    for line in stdout.splitlines():
        if not line.startswith(MARK):
            continue
        try:
            item = json.loads(line[len(MARK):])
        except json.JSONDecodeError:
            continue  # a line cut short by a crash
        if "stage" in item:
            stages.append(str(item["stage"]))
        elif "key" in item:
            values[str(item["key"])] = item.get("value")
    return values, stages


def probe_timings(sent: Any, duration_s: float) -> dict[str, float | None]:
    """The parts of the probe's time, as the script timed them, plus ``startup_s``: the
    interpreter's start before the script's clock began (the parent's measured duration
    less the script's own total). A part the script never reached is None."""
    parts = dict(sent) if isinstance(sent, dict) else {}
    timings: dict[str, float | None] = {}
    for key in probe_script.PART_KEYS:
        value = parts.get(key)
        timings[key] = float(value) if isinstance(value, (int, float)) else None
    total = timings["total_s"]
    timings["startup_s"] = (round(max(0.0, duration_s - total), 4) if total is not None
                            else None)
    return timings


def _blame_gpu_stage(cuda: dict[str, Any] | None, last: str | None,
                     result: CommandResult) -> dict[str, Any] | None:
    """When the whole child died or hung inside one GPU's test, record it against that GPU.

    The child's own per-GPU deadline covers a hung kernel; this covers what it cannot:
    a segfault, or the parent's deadline striking first.
    """
    if not cuda or not last or not last.startswith(GPU_STAGES):
        return cuda
    name, _, index_text = last.partition(":")
    key = name.split(".", 1)[1]
    try:
        index = int(index_text)
    except ValueError:
        return cuda
    results = list(cuda.get(key) or [])
    if any(r.get("index") == index for r in results):
        return cuda
    results.append({"index": index, "ok": False, "timed_out": result.timed_out,
                    "error": f"the probe stopped here: {result.describe_failure()}",
                    "duration_s": 0.0})
    return {**cuda, key: results}


def interpret_probe(result: CommandResult, python: str) -> list[FactRecord]:
    """Turn one probe run into the ``python`` and ``torch`` fact records."""
    values, stages = parse_probe_output(result.stdout)
    completed = bool(stages) and stages[-1] == "done"
    if "python" not in values:
        error = f"could not run the probe in {python}: {result.describe_failure()}"
        return [
            FactRecord("python", ok=False, error=error, duration_s=result.duration_s),
            FactRecord("torch", ok=False, error=error, duration_s=result.duration_s),
        ]
    python_fact = {
        **values["python"],
        "packages": values.get("packages") or {},
        "torch_locations": values.get("torch_locations") or [],
    }
    # Imported here, after the probe ran: the redaction patterns take longer to load than
    # the rest of this module, and the gather starts the probe before anything else.
    from ddp_doctor.redact.secrets import redact_text

    # Redact before cutting: a key block whose BEGIN line is cut off would escape.
    stderr_tail = "\n".join(redact_text(result.stderr).strip().splitlines()[-20:])
    torch_fact: dict[str, Any] = {
        "probe": {
            "completed": completed,
            "last_stage": stages[-1] if stages else None,
            "timed_out": result.timed_out,
            "returncode": result.returncode,
            "failure": None if completed and result.ok else result.describe_failure(),
            "stderr_tail": stderr_tail or None,
            "duration_s": round(result.duration_s, 3),
            "timings": probe_timings(values.get("timings"), result.duration_s),
        },
        "import_error": values.get("import_error"),
        "importable": "import_error" in values and values["import_error"] is None,
        "build": values.get("build"),
        "libraries": values.get("libraries"),
        "distributed": values.get("distributed"),
        "cuda": values.get("cuda"),
        "numpy": values.get("numpy"),
        "torchvision": values.get("torchvision"),
        "exceptions": values.get("exceptions") or [],
    }
    if not completed:
        torch_fact["cuda"] = _blame_gpu_stage(values.get("cuda"),
                                              stages[-1] if stages else None, result)
    if "import_error" not in values and not completed:
        last = stages[-1] if stages else None
        where = ("import torch did not finish" if last == "import torch"
                 else f"the probe stopped at stage {last!r}, before import torch")
        torch_fact["import_error"] = {
            "type": "ProbeFailure",
            "message": f"{where}: {result.describe_failure()}",
        }
    return [
        FactRecord("python", ok=True, value=python_fact, duration_s=result.duration_s),
        FactRecord("torch", ok=True, value=torch_fact, duration_s=result.duration_s),
    ]


def probe_python(env: Env, python: str, timeout: float = TORCH_PROBE_TIMEOUT_S,
                 starting: threading.Event | None = None) -> list[FactRecord]:
    """Run the probe script in ``python`` and return its two fact records; ``starting``
    is set as the child is started (after the script is read, before the command runs)."""
    argv = [python, "-c", probe_script_source()]
    if starting is not None:
        starting.set()
    result = env.run(argv, timeout=timeout)
    return interpret_probe(result, python)
