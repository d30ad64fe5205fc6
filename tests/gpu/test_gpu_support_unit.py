"""The GPU suite's own helpers, on CPU: they run everywhere (this module's name ends in
``_unit``, so tests/gpu/conftest.py neither marks it ``gpu`` nor skips it).

nvidia-smi's output is written here in the format nvidia-smi prints (``-L`` and
``--query-gpu ... --format=csv,noheader,nounits``), with the GPUs of a recorded machine
(tests/fixtures/facts/healthy_8x_h100_nvlink.json).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import FACTS_DIR
from tests.gpu import conftest as gpu_conftest
from tests.support import gpu_validation as gv
from tests.support.smoke_reports import failing_run, passing_run

H100 = json.loads((FACTS_DIR / "healthy_8x_h100_nvlink.json").read_text(encoding="utf-8"))
UUIDS = [f"GPU-{i:08x}-1b2c-3d4e-5f60-7182930a4b5c" for i in range(8)]


def machine() -> tuple[dict, str, str]:
    """The recorded H100 machine's facts with UUIDs, and nvidia-smi's two outputs for it."""
    facts = copy.deepcopy(H100)
    gpus = facts["facts"]["nvml"]["value"]["gpus"]
    for gpu, uuid in zip(gpus, UUIDS):
        gpu["uuid"] = uuid
    for device, uuid in zip(facts["facts"]["torch"]["value"]["cuda"]["devices"], UUIDS):
        device["uuid"] = uuid[len("GPU-"):]  # torch's device properties: no prefix
    driver = facts["facts"]["nvml"]["value"]["driver_version"]
    query = "".join(f"{g['index']}, {g['name']}, {g['uuid']}, {g['memory_total'] // 2**20}, "
                    f"{driver}\n" for g in gpus)
    listing = "".join(f"GPU {g['index']}: {g['name']} (UUID: {g['uuid']})\n" for g in gpus)
    return facts, query, listing


def disagreements(facts: dict, query: str, listing: str) -> list[str]:
    return gv.facts_disagree_with_smi(facts, gv.parse_smi_query(query),
                                      gv.parse_smi_list(listing))


def test_the_query_csv_is_read_field_by_field():
    text = ("0, NVIDIA H100 80GB HBM3, GPU-4f2a6c3e-1b2c-3d4e-5f60-7182930a4b5c, 81559, "
            "570.133.20\n1, \"Tesla V100-SXM2-32GB, rev A\", GPU-0badc0de-0000-1111-2222-"
            "333344445555, 32768, 535.54.03\n\n")
    assert gv.parse_smi_query(text) == [
        gv.SmiGpu(0, "NVIDIA H100 80GB HBM3", "GPU-4f2a6c3e-1b2c-3d4e-5f60-7182930a4b5c",
                  81559, "570.133.20"),
        gv.SmiGpu(1, "Tesla V100-SXM2-32GB, rev A", "GPU-0badc0de-0000-1111-2222-333344445555",
                  32768, "535.54.03")]
    with pytest.raises(ValueError, match="expected 5 fields"):
        gv.parse_smi_query("0, NVIDIA H100 80GB HBM3, 81559\n")


def test_the_gpu_list_skips_mig_devices():
    text = textwrap.dedent("""\
        GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)
          MIG 3g.40gb     Device  0: (UUID: MIG-a1b2c3d4-0000-5555-8888-0123456789ab)
        GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-6e6cb1e7-e44e-3c3d-635e-af4e9e3c9b88)
        """)
    assert gv.parse_smi_list(text) == [
        (0, "NVIDIA A100-SXM4-80GB", "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77"),
        (1, "NVIDIA A100-SXM4-80GB", "GPU-6e6cb1e7-e44e-3c3d-635e-af4e9e3c9b88")]


def test_facts_that_match_nvidia_smi_have_no_disagreement():
    assert disagreements(*machine()) == []


def test_each_kind_of_disagreement_is_named():
    facts, query, listing = machine()
    gpus = facts["facts"]["nvml"]["value"]["gpus"]
    gpus[1]["memory_total"] += 3 * 2**20  # 3 MiB more than nvidia-smi's figure
    gpus[2]["name"] = "NVIDIA H100 PCIe"
    gpus[3]["uuid"] = UUIDS[4]
    facts["facts"]["nvml"]["value"]["driver_version"] = "550.54.15"
    cuda = facts["facts"]["torch"]["value"]["cuda"]
    cuda["device_count"] = 7
    cuda["devices"] = cuda["devices"][:7]
    found = disagreements(facts, query, listing.replace("GPU 7:", "GPU 8:"))
    assert found == [
        f"GPU 1: memory {gpus[1]['memory_total']} bytes != 81559 MiB",
        "GPU 2: name 'NVIDIA H100 PCIe' != 'NVIDIA H100 80GB HBM3'",
        f"GPU 3: uuid '{UUIDS[4]}' != '{UUIDS[3]}'",
        f"nvidia-smi -L GPU 8 (NVIDIA H100 80GB HBM3, {UUIDS[7]}) is not in the query",
        "driver '550.54.15' != ['570.133.20']",
        "torch sees 7 GPUs, nvidia-smi 8",
        f"torch's devices {sorted((d['name'], 'GPU-' + d['uuid']) for d in cuda['devices'])}"
        f" != nvidia-smi's {sorted(('NVIDIA H100 80GB HBM3', u) for u in UUIDS)}",
    ]


def test_memory_within_a_mib_and_torch_in_another_order_agree():
    facts, query, listing = machine()
    facts["facts"]["nvml"]["value"]["gpus"][0]["memory_total"] += 2**19  # half a MiB
    facts["facts"]["torch"]["value"]["cuda"]["devices"].reverse()  # CUDA_DEVICE_ORDER
    assert disagreements(facts, query, listing) == []


def test_a_count_mismatch_between_the_list_and_the_query_is_named():
    facts, query, listing = machine()
    found = disagreements(facts, query, "".join(listing.splitlines(True)[:7]))
    assert found == ["nvidia-smi -L lists 7 GPUs, the query 8"]


def test_probe_timings_are_read_with_each_gpus_tests():
    summary = gv.load_summary_module()
    facts = {"facts": {"torch": {"ok": True, "value": {
        "probe": {"duration_s": 9.5, "timings": {"startup_s": 0.1, "import_torch_s": 2.5,
                                                  "cuda_init_s": 3.2, "gpu_tests_s": 1.1}},
        "cuda": {"functional": [{"index": 1, "duration_s": 0.3}, {"index": 0,
                                                                   "duration_s": 0.4}],
                 "cudnn_test": [{"index": 0, "duration_s": 0.2}]}}}}}
    assert summary.probe_timings(facts) == {
        "duration_s": 9.5, "startup_s": 0.1, "import_torch_s": 2.5, "cuda_init_s": 3.2,
        "gpu_tests_s": 1.1,
        "per_gpu": [{"index": 0, "functional_s": 0.4, "cudnn_s": 0.2},
                    {"index": 1, "functional_s": 0.3}]}
    assert summary.probe_timings({"facts": {}}) == {}


def test_smoke_figures_come_from_the_judged_run():
    summary = gv.load_summary_module()
    data = passing_run().data
    figures = summary.smoke_figures({"smoke": data})
    assert figures["ok"] is True and figures["ranks"] == 2
    assert figures["images_per_s"] == data["measurements"]["images_per_s_total"] > 0
    assert figures["median_step_s"] == data["measurements"]["median_step_s"] > 0
    assert figures["peak_gpu_mem_bytes"] is None  # a CPU run: no GPU memory
    assert summary.smoke_figures({"smoke": failing_run().data})["ok"] is False
    assert summary.smoke_figures({})["images_per_s"] is None


@pytest.mark.spawns
def test_junit_counts_of_a_real_pytest_run(tmp_path):
    module = tmp_path / "test_three.py"
    module.write_text("import pytest\n\ndef test_a():\n    pass\n\ndef test_b():\n"
                      "    assert False\n\n@pytest.mark.skip(reason='no')\ndef test_c():\n"
                      "    pass\n")
    xml = tmp_path / "out.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    f"--junitxml={xml}", "--rootdir", str(tmp_path), "-c", "/dev/null",
                    str(module)], capture_output=True, timeout=120, check=False)
    summary = gv.load_summary_module()
    assert summary.junit_counts(xml.read_text()) == {
        "total": 3, "failed": 1, "errors": 0, "skipped": 1, "passed": 1}
    assert summary.junit_failures(xml.read_text()) == ["test_three.py::test_b"]


def test_steps_and_the_summary_say_what_failed_and_what_was_skipped(tmp_path):
    summary = gv.load_summary_module()
    (tmp_path / "steps.tsv").write_text("install\t0\t12.5\t\ngpu suite\tskipped\t0\t"
                                        "dry run: no GPU step\ncheck\t1\t20.0\t\n")
    (tmp_path / "machine.json").write_text(json.dumps({"torch": "2.13.0+cpu"}))
    assert summary.summarize(tmp_path) == 1
    text = (tmp_path / "summary.md").read_text()
    assert "Result: **FAILED**" in text
    assert "| check | 1 | 20.0 |  |" in text
    assert "Skipped:\n- gpu suite (dry run: no GPU step)\n" in text
    assert "- torch: 2.13.0+cpu" in text
    (tmp_path / "steps.tsv").write_text("install\t0\t12.5\t\n")
    assert summary.summarize(tmp_path) == 0
    (tmp_path / "steps.tsv").write_text("")
    assert summary.summarize(tmp_path) == 1  # no step ran: nothing was validated


@pytest.mark.parametrize(("path", "needed", "exactly", "gpus", "reason"), [
    ("tests/gpu/test_gpu_check.py", 1, None, 0, "needs 1 CUDA GPU, this machine has 0"),
    ("tests/gpu/test_gpu_check.py", 2, None, 1, "needs 2 CUDA GPUs, this machine has 1"),
    ("tests/gpu/test_gpu_check.py", 1, None, 1, None),
    ("tests/gpu/test_gpu_faults.py", 1, 1, 2, "needs exactly 1 CUDA GPU, this machine has 2"),
    ("tests/gpu/test_gpu_faults.py", 1, 1, 1, None),
    ("tests/gpu/test_gpu_support_unit.py", 1, None, 0, None),
])
def test_the_suites_skip_reasons(path, needed, exactly, gpus, reason):
    assert gpu_conftest.skip_reason(path, needed, exactly, gpus) == reason


@pytest.mark.slow
@pytest.mark.spawns
def test_minus_m_gpu_selects_the_suite_and_not_these_unit_tests():
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "gpu",
                           "-p", "no:cacheprovider", "tests/gpu"], capture_output=True,
                          text=True, timeout=120, check=False, cwd=gv.REPO)
    ids = [line for line in proc.stdout.splitlines() if "::" in line]
    assert ids, proc.stdout + proc.stderr
    assert all(line.startswith("tests/gpu/test_gpu_") for line in ids)
    assert not [line for line in ids if "_unit.py" in line]
    assert any("test_gpu_health.py" in line for line in ids)
