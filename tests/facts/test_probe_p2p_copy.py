"""The torch probe's P2P data test and its NVML-under-load reading, run on the CPU.

``copy_pair``, ``p2p_copy_test``, ``under_load`` and ``readings_under_load`` take ``torch``
(and NVML) as arguments. Here ``CpuGpus`` stands in for torch: its "cuda:N" tensors are real
CPU tensors, so the pattern, the verification and the timing run for real; a pair can be
made to hang, corrupt a word, copy nothing, or crawl. The GPU side proper (real devices,
real links) is in tests/gpu.
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from ddp_doctor.facts import python_probe_script as script


class Dev:
    """A real CPU tensor that remembers which "GPU" it is on."""

    def __init__(self, owner: CpuGpus, t: torch.Tensor, device: str) -> None:
        self.owner, self.t, self.device = owner, t, device

    def __mul__(self, k: int) -> Dev:
        return Dev(self.owner, self.t * k, self.device)

    def __add__(self, k: int) -> Dev:
        return Dev(self.owner, self.t + k, self.device)

    def __ne__(self, other: object) -> Any:  # type: ignore[override]
        assert isinstance(other, Dev)
        return self.t != other.t

    def fill_(self, value: int) -> Dev:
        self.t.fill_(value)
        return self

    def copy_(self, source: Dev) -> Dev:
        pair = (int(source.device.split(":")[1]), int(self.device.split(":")[1]))
        fault = self.owner.faults.get(pair)
        self.owner.copies.append(pair)
        if fault == "hang":
            self.owner.release.wait(30)
            return self
        if fault == "noop":
            return self
        if fault == "slow":
            time.sleep(0.02)
        self.t.copy_(source.t)
        if fault == "corrupt":
            self.t[3] += 1
        return self


class CpuGpus:
    """``faults``: (src, dst) -> "hang" | "corrupt" | "noop" | "slow"."""

    int32 = torch.int32

    def __init__(self, faults: dict[tuple[int, int], str] | None = None) -> None:
        self.faults = faults or {}
        self.release = threading.Event()
        self.copies: list[tuple[int, int]] = []
        self.synced: list[str] = []
        owner = self

        class _Event:
            def __init__(self) -> None:
                self.polls = 0

            def record(self) -> None:
                pass

            def query(self) -> bool:  # the work is pending for the first three polls
                self.polls += 1
                return self.polls > 3

        class cuda:
            Event = _Event

            @staticmethod
            def synchronize(device: str) -> None:
                owner.synced.append(device)

            @staticmethod
            def get_device_properties(index: int) -> SimpleNamespace:
                return SimpleNamespace(uuid=f"0000000{index}-aaaa-bbbb-cccc-dddddddddddd",
                                       pci_domain_id=0, pci_bus_id=0x1B + index,
                                       pci_device_id=0)

        self.cuda = cuda

    def arange(self, n: int, dtype: Any, device: str) -> Dev:
        return Dev(self, torch.arange(n, dtype=dtype), device)

    def empty(self, n: int, dtype: Any, device: str) -> Dev:
        return Dev(self, torch.empty(n, dtype=dtype), device)

    def equal(self, a: Dev, b: Dev) -> bool:
        return bool(torch.equal(a.t, b.t))

    def rand(self, *shape: int, device: str) -> Dev:
        return Dev(self, torch.rand(*shape), device)

    def matmul(self, a: Dev, b: Dev) -> Dev:
        return Dev(self, a.t @ b.t, a.device)


@pytest.fixture
def quiet(monkeypatch):
    """Collect the stage lines instead of printing them."""
    lines: list[dict] = []
    monkeypatch.setattr(script, "emit", lines.append)
    return lines


# ---------------------------------------------------------------- planning and one pair


def test_every_ordered_pair_is_planned_once():
    assert script.plan_pairs([0, 1, 2]) == [[0, 1], [0, 2], [1, 0], [1, 2], [2, 0], [2, 1]]
    assert len(script.plan_pairs(list(range(8)))) == 56
    assert script.plan_pairs([3]) == []


def test_a_good_copy_is_verified_and_timed():
    gpus = CpuGpus()
    ticks = iter([10.0, 10.5, 20.0, 20.25])  # first copy: 0.5 s; timed copies: 0.25 s
    seconds, problem = script.copy_pair(gpus, 0, 1, nbytes=4096, repeats=5,
                                        clock=lambda: next(ticks))
    assert problem is None
    assert seconds == 0.25
    assert gpus.copies == [(0, 1)] * 6  # one warm-up copy, then the five timed ones
    assert "cuda:0" in gpus.synced and "cuda:1" in gpus.synced


def test_a_corrupted_word_is_counted():
    _, problem = script.copy_pair(CpuGpus({(1, 0): "corrupt"}), 1, 0, nbytes=4096)
    assert problem == "1 of 1024 words differ after the first copy"


def test_a_copy_that_silently_does_nothing_is_caught():
    """The target is cleared before each phase, so stale data cannot pass as a copy."""
    _, problem = script.copy_pair(CpuGpus({(0, 1): "noop"}), 0, 1, nbytes=4096)
    assert problem == "1024 of 1024 words differ after the first copy"


def test_each_pair_gets_its_own_pattern():
    gpus = CpuGpus()
    a = script.pattern(gpus, 8, 1 * 1000 + 2 + 1, "cuda:1").t
    b = script.pattern(gpus, 8, 2 * 1000 + 1 + 1, "cuda:2").t
    assert not torch.equal(a, b)
    assert len(set(a.tolist())) == 8  # every word differs from its neighbours


# ---------------------------------------------------------------- the whole test


def test_all_pairs_healthy(quiet):
    matrix = [[None, True, False], [True, None, False], [False, False, None]]
    result, stuck = script.p2p_copy_test(CpuGpus(), [0, 1, 2], matrix, nbytes=4096, repeats=2)
    assert stuck is False and result["stopped"] is None and result["not_run"] == []
    assert (result["bytes"], result["repeats"]) == (4096, 2)
    pairs = result["pairs"]
    assert [(p["src"], p["dst"]) for p in pairs] == [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0),
                                                     (2, 1)]
    assert all(p["ok"] and not p["corrupt"] and not p["timed_out"] for p in pairs)
    assert all(p["gbps"] > 0 and p["seconds"] > 0 for p in pairs)
    assert [p["peer_access"] for p in pairs] == [True, False, True, False, False, False]
    assert [line["stage"] for line in quiet][:2] == ["cuda.p2p_copy:0>1", "cuda.p2p_copy:0>2"]


def test_a_hung_pair_is_named_and_the_rest_are_listed_as_not_run(quiet):
    gpus = CpuGpus({(1, 0): "hang"})
    start = time.monotonic()
    try:
        result, stuck = script.p2p_copy_test(gpus, [0, 1, 2], deadline=0.3, nbytes=4096)
    finally:
        gpus.release.set()
    # The fault hangs for 30 s: finishing well before that proves the deadline stopped it; a
    # margin of 60x over the 0.3 s deadline for a loaded machine (before: "< 3 s").
    assert time.monotonic() - start < 20
    assert stuck is True
    hung = result["pairs"][-1]
    assert (hung["src"], hung["dst"], hung["timed_out"], hung["ok"]) == (1, 0, True, False)
    assert hung["error"] == "copy hung after 0 s"
    assert result["stopped"] == "GPU 1 -> GPU 0 hung"
    assert result["not_run"] == [[1, 2], [2, 0], [2, 1]]


def test_corruption_is_recorded_per_pair_and_the_test_goes_on(quiet):
    result, stuck = script.p2p_copy_test(CpuGpus({(2, 1): "corrupt"}), [0, 1, 2],
                                         nbytes=4096)
    assert stuck is False
    bad = [p for p in result["pairs"] if not p["ok"]]
    assert [(p["src"], p["dst"], p["corrupt"]) for p in bad] == [(2, 1, True)]
    assert bad[0]["error"] == "1 of 1024 words differ after the first copy"


def test_the_budget_bounds_the_whole_test(quiet):
    """With 1.2 s of budget and slow copies, the test stops and lists the pairs it skipped."""
    faults = {(i, j): "slow" for i in range(4) for j in range(4) if i != j}
    start = time.monotonic()
    result, stuck = script.p2p_copy_test(CpuGpus(faults), [0, 1, 2, 3], budget=1.2,
                                         nbytes=4096, repeats=20)
    # Less than copying every pair would take (12 pairs x 20 repeats x 20 ms of sleep): a
    # ratio of 3 over the 1.2 s budget and one pair, not a fixed "< 2.5 s" a loaded machine
    # could exceed.
    assert time.monotonic() - start < 12 * 20 * 0.02
    assert stuck is False
    assert result["stopped"] == "the test's 1.2s budget ran out"
    assert len(result["pairs"]) + len(result["not_run"]) == 12
    assert result["not_run"]


def test_parent_deadline_covers_the_load_readings_and_the_copy_budget():
    from ddp_doctor.facts.torch_probe import BUDGETED_GPUS, TORCH_PROBE_TIMEOUT_S
    needed = (BUDGETED_GPUS * (script.GPU_DEADLINE_S + script.LOAD_DEADLINE_S)
              + script.P2P_DEADLINE_S + script.P2P_COPY_BUDGET_S)
    assert needed + 30 <= TORCH_PROBE_TIMEOUT_S


# ---------------------------------------------------------------- NVML under load


class FakeNvml:
    """pynvml's queries for the link, clock events and temperature; the generation ramps up
    from idle (Gen1) to Gen4 at the second reading, as a waking GPU's link does."""

    def __init__(self, reasons: int = 0, width: int = 16) -> None:
        self.gens = iter([1, 4, 4, 4, 4, 4])
        self.reasons = reasons
        self.width = width
        self.handles: list[str] = []

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        self.handles.append(uuid)
        return uuid

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: str) -> int:
        return next(self.gens)

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: str) -> int:
        return 4

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: str) -> int:
        return self.width

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: str) -> int:
        return 16

    def nvmlDeviceGetPcieReplayCounter(self, h: str) -> int:
        raise RuntimeError("Not Supported")

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: str) -> int:
        return self.reasons

    def nvmlDeviceGetTemperature(self, h: str, sensor: int) -> int:
        return 71


def test_under_load_reads_while_the_work_is_pending_and_keeps_the_highest_generation():
    nvml = FakeNvml(reasons=0x4)
    reading = script.under_load(CpuGpus(), 1, nvml, n=8, rounds=2, poll=0.001)
    assert nvml.handles == ["GPU-00000001-aaaa-bbbb-cccc-dddddddddddd"]
    assert reading == {
        "index": 1, "uuid": "GPU-00000001-aaaa-bbbb-cccc-dddddddddddd", "error": None,
        "pcie": {"gen_current": 4, "gen_max": 4, "width_current": 16, "width_max": 16,
                 "replay_counter": None},
        "clock_event_reasons": 0x4, "temperature": 71,
    }


def test_readings_without_pynvml_say_so_for_every_gpu(quiet):
    readings, stuck = script.readings_under_load(
        CpuGpus(), [0, 1], nvml_loader=lambda: (None, "pynvml is not importable here"))
    assert stuck is False
    assert [(r["index"], r["pcie"], r["error"]) for r in readings] == [
        (0, None, "pynvml is not importable here"), (1, None, "pynvml is not importable here")]
    assert quiet == []  # nothing was queued on any GPU


def test_readings_with_a_fake_nvml_for_each_gpu(quiet):
    readings, stuck = script.readings_under_load(CpuGpus(), [0, 2],
                                                 nvml_loader=lambda: (FakeNvml(), None),
                                                 n=8, rounds=2, poll=0.001)
    assert stuck is False
    assert [(r["index"], r["pcie"]["gen_current"]) for r in readings] == [(0, 4), (2, 4)]
    assert [line["stage"] for line in quiet] == ["cuda.under_load:0", "cuda.under_load:2"]
