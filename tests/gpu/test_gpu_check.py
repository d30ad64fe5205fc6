"""`ddp-doctor check` on a healthy GPU machine, through the real CLI: the GPU checks pass,
the facts agree with nvidia-smi, and the time the check takes is printed with its parts
(run with ``-s`` to see it; bench/gpu_validate.sh does). CPU counterparts: the checks on
recorded facts (tests/checks), the probe's parts (tests/facts/test_probe_torch.py).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.gpu.conftest import GPUS
from tests.support import gpu_validation as gv

pytestmark = [pytest.mark.spawns, pytest.mark.slow]


@pytest.fixture(scope="module")
def healthy(tmp_path_factory) -> SimpleNamespace:
    """One `check --json --save-facts` of this machine, timed, and nvidia-smi's view."""
    out: Path = tmp_path_factory.mktemp("check")
    started = time.monotonic()
    proc = gv.run_doctor("check", "--json", str(out / "report.json"), "--save-facts",
                         str(out / "facts.json"), timeout=600)
    wall_s = time.monotonic() - started
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    query = subprocess.run(gv.SMI_QUERY, capture_output=True, text=True, timeout=60,
                           check=True).stdout
    listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60,
                             check=True).stdout
    return SimpleNamespace(
        wall_s=wall_s,
        report=json.loads((out / "report.json").read_text(encoding="utf-8")),
        facts=json.loads((out / "facts.json").read_text(encoding="utf-8")),
        smi=gv.parse_smi_query(query), listed=gv.parse_smi_list(listing))


def test_a_healthy_gpu_passes_the_driver_cuda_cudnn_arch_and_nccl_checks(healthy):
    checks = {c["id"]: c for c in healthy.report["checks"]}
    for check_id in gv.HEALTHY_CHECKS:
        result = checks[check_id]
        assert result["status"] == "pass", (check_id, result["summary"], result["findings"])
    assert not [f for f in healthy.report["findings"]
                if f["severity"] == "error" and f["code"].startswith(("DRV", "CUD", "TOR"))]


def test_the_facts_agree_with_nvidia_smi(healthy):
    assert len(healthy.smi) == GPUS
    assert gv.facts_disagree_with_smi(healthy.facts, healthy.smi, healthy.listed) == []
    # Every GPU ran the matmul and the cuDNN tests and passed them.
    cuda = healthy.facts["facts"]["torch"]["value"]["cuda"]
    assert [r["ok"] for r in cuda["functional"]] == [True] * GPUS
    assert [r["ok"] for r in cuda["cudnn_test"]] == [True] * GPUS


def test_the_time_check_takes_and_its_parts(healthy, record_property):
    summary = gv.load_summary_module()
    timings = summary.probe_timings(healthy.facts)
    parts = {k: v for k, v in timings.items() if k.endswith("_s") and k != "duration_s"}
    print(f"\ncheck took {healthy.wall_s:.2f} s; the torch probe {timings['duration_s']} s: "
          + ", ".join(f"{k} {v}" for k, v in parts.items()))
    for gpu in timings["per_gpu"]:
        print(f"  GPU {gpu['index']}: functional {gpu.get('functional_s')} s, "
              f"cuDNN {gpu.get('cudnn_s')} s")
    record_property("check_wall_s", round(healthy.wall_s, 3))
    record_property("probe_timings", json.dumps(timings))
    for part in ("startup_s", "import_torch_s", "cuda_init_s", "gpu_tests_s", "under_load_s",
                 "total_s"):
        assert isinstance(timings[part], float) and timings[part] >= 0, (part, timings)
    assert timings["import_torch_s"] > 0 and timings["cuda_init_s"] > 0
    assert [g["index"] for g in timings["per_gpu"]] == list(range(GPUS))
    assert all(g["functional_s"] > 0 and g["cudnn_s"] > 0 for g in timings["per_gpu"])
    # The parts are inside the whole: the probe's own clock, then the parent's.
    inner = sum(v for k, v in parts.items() if k not in ("startup_s", "total_s") and v)
    assert inner <= timings["total_s"] + 0.05
    assert timings["total_s"] + timings["startup_s"] == pytest.approx(timings["duration_s"],
                                                                      abs=0.01)
    assert timings["duration_s"] < healthy.wall_s
