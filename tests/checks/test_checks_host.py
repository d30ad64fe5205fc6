"""host.shm (HST001) on recorded machines and variants of them, through the runner."""

from __future__ import annotations

import pytest

from ddp_doctor.categories import Category
from ddp_doctor.model import Severity, Status
from tests.conftest import load_fixture_facts
from tests.support.checks import (
    FIXTURES,
    GIB,
    MIB,
    commands,
    evidence,
    evidence_sources,
    only_finding,
    run,
    variant,
    without_fact,
)

NCCL_DOCS = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html"
DOCKER = "docker run --ipc=host ...   # or: --shm-size=16g"
KUBERNETES = None  # YAML for the pod spec: in the step's text, not a shell command
REMOUNT = "sudo mount -o remount,size=16G /dev/shm"
DF = "df /dev/shm (psutil.disk_usage)"

BIG_SHM = {  # every recorded machine but the 64 MB container: (summary)
    "healthy_8x_v100_pcie": "188 GiB (188 GiB free)",
    "healthy_8x_h100_nvlink": "32.0 GiB (32.0 GiB free)",
    "workstation_2x_rtx3090_pcie": "15.6 GiB (15.6 GiB free)",
    "wsl2_rtx4070": "7.7 GiB (7.7 GiB free)",
    "laptop_gpu_newer_than_wheel": "31.2 GiB (31.1 GiB free)",
    "no_driver": "41.7 GiB (41.7 GiB free)",
    "torch_missing": "188 GiB (188 GiB free)",
    "torch_import_broken": "126 GiB (126 GiB free)",
    "torch_cpu_wheel_on_gpu_box": "14.0 GiB (14.0 GiB free)",
    "nouveau_loaded": "7.8 GiB (7.8 GiB free)",
    "sandbox_cpu_container": "23.5 GiB (23.5 GiB free)",
    "h200_single_gpu_vm": "128 GiB (128 GiB free)",
}


def test_every_fixture_but_the_small_container_is_a_shm_baseline():
    assert set(FIXTURES) - set(BIG_SHM) == {"container_64mb_shm"}


@pytest.mark.parametrize("name", sorted(BIG_SHM))
def test_large_shm_passes_with_its_size(name):
    result = run(load_fixture_facts(name))["host.shm"]
    assert result.status is Status.PASS
    assert result.findings == ()
    assert result.summary == BIG_SHM[name]


def test_docker_default_64mb_is_an_error_with_the_docker_fix_first():
    """pytorch#60082's container: Docker's default /dev/shm of 67108864 bytes."""
    facts = load_fixture_facts("container_64mb_shm")
    assert facts["host"]["shm"]["total"] == 67108864
    result = run(facts)["host.shm"]
    assert result.status is Status.FAIL
    finding = only_finding(result)
    assert finding.code.id == "HST001"
    assert finding.category is Category.NCCL_SHARED_MEMORY
    assert finding.effective_severity is Severity.ERROR
    assert finding.title == ("/dev/shm is only 64.0 MiB inside a Docker container; NCCL and "
                             "DataLoader workers need at least 1 GiB")
    assert evidence(finding) == {"/dev/shm size": "64.0 MiB", "/dev/shm free": "64.0 MiB",
                                 "container": "docker"}
    assert evidence_sources(finding) == {
        "/dev/shm size": DF, "/dev/shm free": DF,
        "container": "/.dockerenv exists; /proc/1/cgroup mentions docker"}
    assert commands(finding) == [DOCKER, KUBERNETES, None]
    assert finding.remediation[0].url == NCCL_DOCS
    # Ultralytics takes workers=0 (key=value), not --workers 0
    assert "`workers=0` for Ultralytics (`yolo train ... workers=0`)" in \
        finding.remediation[2].text
    assert "--workers" not in finding.remediation[2].text
    assert finding.to_dict()["docs_url"] == NCCL_DOCS


@pytest.mark.parametrize(("total", "size_text", "severity", "status"), [
    (64 * MIB, "64.0 MiB", Severity.ERROR, Status.FAIL),
    (511 * MIB, "511 MiB", Severity.ERROR, Status.FAIL),
    (512 * MIB, "512 MiB", Severity.WARNING, Status.WARN),
    (768 * MIB, "768 MiB", Severity.WARNING, Status.WARN),
    (GIB - MIB, "1023 MiB", Severity.WARNING, Status.WARN),
])
def test_small_shm_severity_follows_the_size(total, size_text, severity, status):
    facts = variant("container_64mb_shm", {"host.shm.total": total, "host.shm.free": total,
                                           "host.shm.used": 0})
    result = run(facts)["host.shm"]
    assert result.status is status
    finding = only_finding(result)
    assert finding.effective_severity is severity
    assert finding.title == (f"/dev/shm is only {size_text} inside a Docker container; NCCL and "
                             "DataLoader workers need at least 1 GiB")
    assert evidence(finding)["/dev/shm size"] == size_text


def test_exactly_one_gib_is_enough():
    facts = variant("container_64mb_shm", {"host.shm.total": GIB, "host.shm.free": GIB})
    result = run(facts)["host.shm"]
    assert result.status is Status.PASS
    assert result.summary == "1.0 GiB (1.0 GiB free)"


def test_nearly_full_shm_is_a_warning_that_starts_with_stale_segments():
    """The V100 server's 188 GiB /dev/shm with only 100 MiB left (crashed jobs' segments)."""
    total = load_fixture_facts("healthy_8x_v100_pcie")["host"]["shm"]["total"]
    facts = variant("healthy_8x_v100_pcie", {"host.shm.free": 100 * MIB,
                                             "host.shm.used": total - 100 * MIB})
    result = run(facts)["host.shm"]
    assert result.status is Status.WARN
    finding = only_finding(result)
    assert finding.code.id == "HST001"
    assert finding.effective_severity is Severity.WARNING
    assert finding.title == "/dev/shm is nearly full: 100 MiB of 188 GiB free"
    assert evidence(finding)["/dev/shm free"] == "100 MiB"
    assert evidence(finding)["container"] == "none detected"
    # Bare metal: look at the leftovers, then remount larger; no Docker advice.
    assert commands(finding) == ["ls -la /dev/shm/ | head -50", REMOUNT, None]


def test_free_space_at_the_threshold_passes():
    facts = variant("healthy_8x_v100_pcie", {"host.shm.free": 256 * MIB})
    result = run(facts)["host.shm"]
    assert result.status is Status.PASS
    assert result.summary == "188 GiB (256 MiB free)"


def test_missing_shm_on_bare_metal_is_an_error():
    facts = variant("healthy_8x_v100_pcie",
                    {"host.shm": {"path": "/dev/shm", "missing": True}})
    result = run(facts)["host.shm"]
    assert result.status is Status.FAIL
    finding = only_finding(result)
    assert finding.code.id == "HST001"
    assert finding.effective_severity is Severity.ERROR
    assert finding.title == "/dev/shm is not mounted"
    assert evidence(finding) == {"/dev/shm": "not found"}
    assert commands(finding) == [REMOUNT, None]


def test_missing_shm_in_a_container_names_the_container():
    facts = variant("container_64mb_shm",
                    {"host.shm": {"path": "/dev/shm", "missing": True}})
    finding = only_finding(run(facts)["host.shm"])
    assert finding.title == "/dev/shm is not mounted inside a Docker container"
    assert finding.effective_severity is Severity.ERROR
    assert commands(finding)[0] == DOCKER


def test_small_shm_on_bare_metal_offers_the_remount():
    facts = variant("healthy_8x_v100_pcie", {"host.shm.total": 64 * MIB,
                                             "host.shm.free": 64 * MIB})
    finding = only_finding(run(facts)["host.shm"])
    assert finding.title == ("/dev/shm is only 64.0 MiB; NCCL and DataLoader workers need at "
                             "least 1 GiB")
    assert commands(finding) == [REMOUNT, None]


def test_kubernetes_pod_gets_the_emptydir_step_first():
    """The 64 MB container as a Kubernetes pod (KUBERNETES_SERVICE_HOST set)."""
    facts = variant("container_64mb_shm", {"os.container": {
        "in_container": True, "kind": "kubernetes",
        "evidence": ["/proc/1/cgroup mentions kubepods", "KUBERNETES_SERVICE_HOST is set"]}})
    result = run(facts)["host.shm"]
    assert result.status is Status.FAIL
    finding = only_finding(result)
    assert finding.title == ("/dev/shm is only 64.0 MiB inside a Kubernetes pod; NCCL and "
                             "DataLoader workers need at least 1 GiB")
    assert commands(finding) == [KUBERNETES, DOCKER, None]
    assert "emptyDir" in finding.remediation[0].text
    assert evidence(finding)["container"] == "kubernetes"
    assert evidence_sources(finding)["container"] == (
        "/proc/1/cgroup mentions kubepods; KUBERNETES_SERVICE_HOST is set")


def test_skipped_when_the_host_fact_could_not_be_gathered():
    facts = without_fact(load_fixture_facts("container_64mb_shm"), "host",
                         "PermissionError: [Errno 13] Permission denied (at host.py:40)")
    result = run(facts)["host.shm"]
    assert result.status is Status.SKIP
    assert result.skip_reason == ("fact 'host' could not be gathered: PermissionError: "
                                  "[Errno 13] Permission denied (at host.py:40)")
