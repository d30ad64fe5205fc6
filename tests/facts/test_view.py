"""FactsView: typed accessors over a snapshot, and the answers several checks share.

Recorded machines (tests/fixtures/facts) and variants of them with one value changed.
"""

from __future__ import annotations

import copy
from types import ModuleType

import pytest

from ddp_doctor.facts.sizing import (
    DEFAULT_MAX_WORKERS,
    RANK_BASE_BYTES,
    WEIGHT_SHARE_OF_GPU_MEMORY,
    WORKER_BYTES,
    nccl_version_text,
)
from ddp_doctor.facts.snapshot import FactRecord, Facts
from ddp_doctor.facts.view import FactsView
from ddp_doctor.registry import Catalogue, Summary, check, specs_in_module
from ddp_doctor.runner import run_checks
from tests.conftest import load_fixture_facts
from tests.support.checks import variant, without_fact


def view(name: str, changes: dict | None = None) -> FactsView:
    return FactsView(variant(name, changes))


def test_of_wraps_a_snapshot_once_and_never_copies_it():
    facts = load_fixture_facts("healthy_8x_v100_pcie")
    wrapped = FactsView.of(facts)
    assert isinstance(wrapped, FactsView)
    assert FactsView.of(wrapped) is wrapped
    assert wrapped.facts is facts


def test_the_generic_api_answers_as_the_snapshot_does():
    facts = without_fact(load_fixture_facts("healthy_8x_v100_pcie"), "interconnect",
                         "probe hung after 15 s")
    facts_view = FactsView(facts)
    assert facts_view["host"] is facts["host"]
    assert facts_view.get("interconnect", "absent") == "absent"
    assert facts_view.available("nvml") and not facts_view.available("interconnect")
    assert facts_view.why_unavailable("interconnect") == facts.why_unavailable("interconnect")
    assert facts_view.errors() == {"interconnect": "probe hung after 15 s"}
    with pytest.raises(KeyError, match="interconnect"):
        facts_view["interconnect"]


def test_a_missing_or_null_fact_reads_as_an_empty_shape():
    facts = Facts()
    facts.add(FactRecord("nvml", ok=False, error="NVML child timed out"))
    facts.add(FactRecord("torch", ok=True, value={"importable": True, "build": None,
                                                  "cuda": None, "libraries": None}))
    facts.add(FactRecord("os", ok=True, value=None))
    empty = FactsView(facts)
    assert empty.nvml() == {} and empty.nvml_gpus() == [] and empty.os() == {}
    assert empty.torch_build() == {} and empty.torch_cuda() == {}
    assert empty.cuda_devices() == [] and empty.gpu_tests("functional") == []
    assert empty.nccl_version() is None and empty.distro_id() == ""
    assert empty.target_python() == "python" and empty.target_pip() == "python -m pip"
    assert empty.usable_gpus() == (0, "NVML")
    assert not empty.is_wsl() and not empty.in_container() and not empty.nvidia_gpus_present()


def test_accessors_return_the_snapshot_values_themselves():
    facts = load_fixture_facts("healthy_8x_v100_pcie")
    facts_view = FactsView(facts)
    assert facts_view.nvml_gpus() is facts["nvml"]["gpus"]
    assert facts_view.cuda_devices() is facts["torch"]["cuda"]["devices"]
    assert facts_view.env_vars() is facts["env_vars"]
    assert len(facts_view.reachable_gpus()) == len(facts["nvml"]["gpus"]) == 8


def test_a_gpu_nvml_cannot_reach_is_listed_but_not_reachable():
    lost = {"index": 3, "error": "GPU is lost", "error_type": "NVMLError_GpuIsLost"}
    facts_view = view("healthy_8x_v100_pcie", {"nvml.gpus.3": lost})
    assert lost in facts_view.nvml_gpus()
    assert [g["index"] for g in facts_view.reachable_gpus()] == [0, 1, 2, 4, 5, 6, 7]


def test_the_target_interpreter_is_quoted_for_a_shell():
    facts_view = view("healthy_8x_v100_pcie", {"python.executable": "/opt/my envs/bin/python"})
    assert facts_view.target_python() == "'/opt/my envs/bin/python'"
    assert facts_view.target_pip() == "'/opt/my envs/bin/python' -m pip"


def test_usable_gpus_are_torchs_count_when_cuda_works():
    assert view("healthy_8x_v100_pcie").usable_gpus() == (8, "torch.cuda.device_count()")
    narrowed = view("healthy_8x_v100_pcie", {"torch.cuda.device_count": 2})
    assert narrowed.usable_gpus() == (2, "torch.cuda.device_count()")
    # A torch that does not import says nothing about CUDA, whatever its record holds.
    broken = view("healthy_8x_v100_pcie", {"torch.importable": False,
                                           "torch.cuda.device_count": 2})
    assert broken.usable_gpus() == (8, "NVML")


def test_usable_gpus_without_torch_are_nvmls_narrowed_by_cuda_visible_devices():
    assert view("torch_missing").usable_gpus() == (8, "NVML")
    # CUDA stops reading at the first invalid entry (9 on an 8-GPU machine).
    count, source = view("torch_missing", {"env_vars.CUDA_VISIBLE_DEVICES": "0,1,9,2"}
                         ).usable_gpus()
    assert count == 2 and "CUDA_VISIBLE_DEVICES='0,1,9,2'" in source
    # A MIG- entry names nothing while no GPU has MIG on.
    assert view("torch_missing", {"env_vars.CUDA_VISIBLE_DEVICES": "MIG-1234,0"}
                ).usable_gpus()[0] == 0


def test_job_gpus_follow_cuda_visible_devices_and_full_ones_are_found():
    facts_view = view("healthy_8x_v100_pcie")
    full = facts_view.full_gpus()
    assert [g["index"] for g in full] == [5]  # 31.6 of 31.7 GiB held by another job
    assert (full[0].get("memory_used") or 0) >= 0.9 * (full[0].get("memory_total") or 1)
    ordered = view("healthy_8x_v100_pcie", {"env_vars.CUDA_VISIBLE_DEVICES": "3,1"})
    assert [g["index"] for g in ordered.job_gpus()] == [3, 1]
    assert ordered.full_gpus() == []


def test_packages_tolerate_the_error_entry_of_an_old_interpreter():
    facts_view = view("nouveau_loaded")  # Python 3.7: no importlib.metadata
    assert isinstance(facts_view.python()["packages"].get("error"), str)
    assert facts_view.packages("torch") == [] and facts_view.package_versions("torch") == []
    assert facts_view.torch_version_source() == ("1.13.1+cu117", "torch.__version__")


def test_torch_version_falls_back_to_the_installed_package():
    no_build = view("healthy_8x_v100_pcie", {"torch.build": None})
    assert no_build.torch_version_source() == ("2.0.1+cu117", "installed package metadata")
    assert view("torch_missing").torch_version_source() == (None, "")


@pytest.mark.parametrize(("recorded", "expected"), [
    ("2.21.5", "2.21.5"), ("2708", "2.7.8"), ("21602", "2.16.2"), (None, None), ("", None),
    ([2, 18, 1], "2.18.1"),
])
def test_nccl_version_decodes_the_version_codes_older_snapshots_hold(recorded, expected):
    assert nccl_version_text(recorded) == expected
    facts_view = view("healthy_8x_v100_pcie", {"torch.libraries.nccl_version": recorded})
    assert facts_view.nccl_version() == expected


def test_wsl_is_read_from_the_os_probe_and_means_the_windows_driver():
    wsl = view("wsl2_rtx4070")
    assert wsl.is_wsl() and wsl.driver_os() == "windows"
    native = view("healthy_8x_v100_pcie")
    assert not native.is_wsl() and native.driver_os() == "linux"
    assert not view("healthy_8x_v100_pcie", {"os.wsl": None}).is_wsl()


def test_driver_cuda_is_nvmls_answer_else_derived_from_the_driver_version():
    assert view("healthy_8x_v100_pcie").driver_cuda() == "11.4"
    derived = view("healthy_8x_v100_pcie", {"nvml.cuda_driver_version": None})
    assert derived.driver_cuda() == "11.4"  # R470 from the release notes' table
    assert view("no_driver").driver_cuda() is None


def test_a_datacenter_gpu_or_a_cloud_kernel_looks_like_a_server():
    assert view("healthy_8x_v100_pcie").looks_like_server()  # Tesla V100
    assert not view("workstation_2x_rtx3090_pcie").looks_like_server()
    assert view("workstation_2x_rtx3090_pcie",
                {"driver.kernel_release": "6.8.0-1015-aws"}).looks_like_server()


def test_ram_needed_sizes_every_rank_by_the_largest_gpu_it_uses():
    facts_view = view("healthy_8x_v100_pcie")
    need = facts_view.ram_needed()
    largest = max(d["total_memory"] for d in facts_view.cuda_devices())
    cores = facts_view.cpu_cores()
    assert (need.ranks, need.gpu_memory) == (8, largest)
    assert (need.workers, need.workers_planned) == (min(cores // 8, DEFAULT_MAX_WORKERS), False)
    assert need.per_rank == (RANK_BASE_BYTES + int(largest * WEIGHT_SHARE_OF_GPU_MEMORY)
                             + need.workers * WORKER_BYTES)
    assert need.total == 8 * need.per_rank


def test_the_plan_overrides_ranks_and_workers():
    planned = view("healthy_8x_v100_pcie", {"plan.gpus": 2, "plan.workers": 3})
    need = planned.ram_needed()
    assert (planned.planned_ranks(), need.ranks, need.workers, need.workers_planned) == (
        2, 2, 3, True)
    assert planned.workers_per_rank(2) == (3, True)


def test_the_view_never_changes_the_snapshot():
    facts = load_fixture_facts("wsl2_rtx4070")
    before = copy.deepcopy(facts.to_dict())
    facts_view = FactsView(facts)
    for method in ("nvml_gpus", "reachable_gpus", "cuda_devices", "usable_gpus", "job_gpus",
                   "full_gpus", "gpu_memories", "ram_needed", "gpu_capabilities",
                   "looks_like_server", "driver_cuda", "nvidia_gpus_present"):
        getattr(facts_view, method)()
    assert facts.to_dict() == before


# ---------------------------------------------------------------- what checks receive


def _recording_module(seen: list[object]) -> ModuleType:
    module = ModuleType("recording_plugin")

    @check(id="test.recording", title="Recording", area="test", requires=("nvml",))
    def recording(facts):
        seen.append(facts)
        yield Summary(f"{len(facts['nvml']['gpus'])} GPUs, {len(facts.nvml_gpus())} typed")

    recording.__module__ = module.__name__
    module.recording = recording
    return module


def test_a_check_receives_a_view_that_still_answers_like_the_snapshot():
    seen: list[object] = []
    [spec] = specs_in_module(_recording_module(seen), "test")
    facts = load_fixture_facts("healthy_8x_v100_pcie")
    [result] = run_checks(Catalogue(specs=[spec]), facts)
    assert result.summary == "8 GPUs, 8 typed"
    assert isinstance(seen[0], FactsView) and seen[0].facts is facts


def test_a_checks_function_called_with_the_snapshot_gets_a_view_too():
    seen: list[object] = []
    [spec] = specs_in_module(_recording_module(seen), "test")
    facts = load_fixture_facts("healthy_8x_v100_pcie")
    assert list(spec.func(facts)) == [Summary("8 GPUs, 8 typed")]
    assert isinstance(seen[0], FactsView) and seen[0].facts is facts
