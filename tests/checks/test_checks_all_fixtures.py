"""Every recorded machine through the whole catalogue: no crash, pure checks, sound files.

Checks are pure functions of the facts (docs: "It never prints, spawns or reads files"):
the same facts give the same results, the facts are left as they were, and a check that
reaches for a process, a file or the network fails here.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import socket
import subprocess
from dataclasses import replace

import pytest

from ddp_doctor.checklist import load_catalogue
from ddp_doctor.facts.shapes import NvmlGpu, TorchCuda
from ddp_doctor.model import Status
from ddp_doctor.runner import run_checks
from tests.conftest import FACTS_DIR, load_fixture_facts
from tests.support.checks import FIXTURES

FACT_NAMES = {"python", "torch", "nvml", "os", "host", "driver", "env_vars", "interconnect",
              "wsl", "plan"}
# saved by --save-facts on a real machine (this sandbox, and the H200 lent on 2026-11-25 to
# bench/gpu_validate.sh), not built from a thread
RECORDED_LIVE = {"sandbox_cpu_container", "h200_single_gpu_vm"}
# Facts a live snapshot of a newer ddp-doctor has beyond those every fixture holds.
NEWER_FACTS = {"kernel_log"}


def _dump(facts) -> str:
    return json.dumps(facts.to_dict(), sort_keys=True)


def test_there_are_fixtures_for_every_scenario():
    assert set(FIXTURES) >= {
        "healthy_8x_v100_pcie", "workstation_2x_rtx3090_pcie", "wsl2_rtx4070",
        "container_64mb_shm", "laptop_gpu_newer_than_wheel", "no_driver", "torch_missing",
        "torch_import_broken", "torch_cpu_wheel_on_gpu_box", "nouveau_loaded",
        "healthy_8x_h100_nvlink",
    }


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_is_a_complete_snapshot_with_its_source(name):
    data = json.loads((FACTS_DIR / f"{name}.json").read_text(encoding="utf-8"))
    assert data["format"] == "ddp-doctor-facts"
    assert data["schema_version"] == 1
    assert FACT_NAMES <= set(data["facts"]) <= FACT_NAMES | NEWER_FACTS
    assert all(rec["ok"] is True and rec["error"] is None for rec in data["facts"].values())
    if name not in RECORDED_LIVE:
        sources = data["meta"]["source"]
        assert sources and all(url.startswith("https://") for url in sources)
        assert len(data["meta"]["description"]) > 80


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_facts_have_the_probes_shape(name):
    """Same keys as the live snapshot of this machine, so a hand edit cannot drift."""
    live = load_fixture_facts("sandbox_cpu_container")
    facts = load_fixture_facts(name)
    for fact in ("python", "torch", "os", "host", "driver"):
        assert set(facts[fact]) == set(live[fact]), fact
    # The probe's timings came after the sandbox's snapshot: a newer key, allowed alone.
    assert set(facts["torch"]["probe"]) - {"timings"} == set(live["torch"]["probe"]) - {"timings"}
    nvml = facts["nvml"]
    if nvml["initialized"]:
        assert set(nvml) == {"initialized", "error", "driver_version", "cuda_driver_version",
                             "nvml_version", "gpus", "topology"}
        assert set(nvml["topology"]) == {"link", "pcie", "nvlinks", "numa_affinity", "error"}
        for gpu in nvml["gpus"]:
            # The link and clock readings came with the hardware-health checks; the older
            # fixtures lack them, the live H200 snapshot has them: keys of NvmlGpu either way.
            assert {"index", "name", "uuid", "pci_bus_id", "memory_total", "memory_used",
                    "compute_capability", "mig_mode", "compute_mode", "persistence_mode",
                    "ecc", "retired_pages_pending", "remapped_rows", "fabric",
                    "processes"} <= set(gpu) <= set(NvmlGpu.__annotations__)
            for proc in gpu["processes"]:
                assert set(proc) == {"pid", "used_memory", "name", "username"}
    else:
        assert set(nvml) == set(live["nvml"])
    torch = facts["torch"]
    if torch["importable"]:
        assert set(torch["build"]) == set(live["torch"]["build"])
        # Readings under load and copies between GPUs exist only where GPUs worked.
        assert set(live["torch"]["cuda"]) <= set(torch["cuda"]) <= set(TorchCuda.__annotations__)
        for dev in torch["cuda"]["devices"]:
            assert set(dev) == {"index", "name", "capability", "total_memory",
                                "multi_processor_count", "uuid", "pci_bus_id"}


def test_readme_lists_every_fixture_and_nothing_else():
    text = (FACTS_DIR / "README.md").read_text(encoding="utf-8")
    listed = {line.split("`")[1].removesuffix(".json")
              for line in text.splitlines() if line.startswith("| `")}
    assert listed == set(FIXTURES)


@pytest.mark.parametrize("name", FIXTURES)
def test_whole_catalogue_runs_on_every_fixture_without_a_crash(name):
    catalogue = load_catalogue()
    assert catalogue.failures == []
    results = run_checks(catalogue, load_fixture_facts(name))
    assert [r.check_id for r in results] == [s.id for s in catalogue.specs]
    crashed = {r.check_id: r.error for r in results if r.status is Status.ERROR}
    assert crashed == {}
    for result in results:
        assert result.status in (Status.PASS, Status.WARN, Status.FAIL, Status.SKIP)
        assert result.summary


def _without_timing(results):
    return [replace(r, duration_s=0.0).to_dict() for r in results]


@pytest.mark.parametrize("name", FIXTURES)
def test_checks_are_pure_functions_of_the_facts(name):
    catalogue = load_catalogue(entry_points=[])
    facts = load_fixture_facts(name)
    before = _dump(facts)
    for spec in catalogue.specs:
        if not all(facts.available(f) for f in spec.requires):
            continue
        first, second = list(spec.func(facts)), list(spec.func(facts))
        assert first == second, spec.id
        assert _dump(facts) == before, f"{spec.id} changed the facts"
    assert _without_timing(run_checks(catalogue, facts)) == _without_timing(
        run_checks(catalogue, facts))
    assert _dump(facts) == before


class ForbiddenSideEffect(AssertionError):
    pass


@contextlib.contextmanager
def _no_side_effects(monkeypatch):
    def refuse(what):
        def call(*args, **kwargs):
            raise ForbiddenSideEffect(f"a check used {what}: {args[:1]}")
        return call

    with monkeypatch.context() as m:
        m.setattr(subprocess, "Popen", refuse("subprocess.Popen"))
        m.setattr(os, "system", refuse("os.system"))
        m.setattr(os, "popen", refuse("os.popen"))
        m.setattr(builtins, "open", refuse("open()"))
        m.setattr(socket, "socket", refuse("socket.socket"))
        yield


@pytest.mark.parametrize("name", FIXTURES)
def test_checks_spawn_nothing_open_nothing_print_nothing(name, monkeypatch, capsys):
    catalogue = load_catalogue(entry_points=[])
    facts = load_fixture_facts(name)
    with _no_side_effects(monkeypatch):
        for spec in catalogue.specs:
            if all(facts.available(f) for f in spec.requires):
                list(spec.func(facts))
    out, err = capsys.readouterr()
    assert (out, err) == ("", "")
