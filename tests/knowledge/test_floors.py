"""Published floors (knowledge/floors.py): the figures as Azure's health checks set them, and
when a measurement may be judged by one."""

from __future__ import annotations

from ddp_doctor.knowledge.floors import FLOORS, comparable_allreduce, floor_for


def test_each_gpu_model_finds_its_own_floor_and_no_other():
    assert floor_for("NVIDIA H100 80GB HBM3", "h2d").gbps == 52.0
    assert floor_for("NVIDIA H100 80GB HBM3", "d2h").gbps == 52.0
    assert floor_for("NVIDIA H200", "h2d").gbps == 48.0
    assert floor_for("NVIDIA H200", "p2p").gbps == 335.0
    assert floor_for("NVIDIA A100-SXM4-40GB", "h2d").gbps == 24.0
    # Other parts of a family run on other hosts and links: no floor borrowed for them.
    for other in ("NVIDIA H100 PCIe", "NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe",
                  "NVIDIA GeForce RTX 4090", None, ""):
        assert floor_for(other, "h2d") is None, other


def test_every_floor_names_its_source_and_system():
    for floor in FLOORS:
        assert floor.source.startswith("https://github.com/Azure/azurehpc-health-checks")
        assert floor.gbps > 0 and floor.system.startswith("Azure ND")
        assert floor.metric in ("h2d", "d2h", "p2p", "allreduce_busbw")
        if floor.metric == "allreduce_busbw":
            assert floor.gpus == 8 and floor.message_bytes


def test_an_all_reduce_is_judged_only_by_a_floor_measured_alike():
    floor = floor_for("NVIDIA H100 80GB HBM3", "allreduce_busbw")
    assert floor is not None and floor.gbps == 460.0
    assert "460 GB/s at 16 GiB messages" in floor.label
    assert not comparable_allreduce(floor, 8, 64 << 20)  # the smoke job's 64 MiB buffer
    assert not comparable_allreduce(floor, 4, 16 << 30)
    assert comparable_allreduce(floor, 8, 16 << 30)
