"""The torch probe's deadline module copies the probe script's per-part deadlines: the
script runs in another interpreter and cannot import it, so the copies are held equal
here, and the deadline is the one the gather and the command line use."""

from __future__ import annotations

from ddp_doctor.facts import probe_deadline
from ddp_doctor.facts import python_probe_script as script
from ddp_doctor.facts.gather import GatherOptions
from ddp_doctor.facts.torch_probe import TORCH_PROBE_TIMEOUT_S


def test_the_copied_deadlines_equal_the_probe_scripts():
    for name in ("GPU_DEADLINE_S", "P2P_DEADLINE_S", "LOAD_DEADLINE_S", "P2P_COPY_BUDGET_S"):
        assert getattr(probe_deadline, name) == getattr(script, name), name


def test_the_whole_deadline_budgets_every_part_for_eight_gpus():
    parts = (8 * (script.GPU_DEADLINE_S + script.LOAD_DEADLINE_S) + script.P2P_DEADLINE_S
             + script.P2P_COPY_BUDGET_S)
    assert probe_deadline.TORCH_PROBE_BASE_S + parts == probe_deadline.TORCH_PROBE_TIMEOUT_S
    assert TORCH_PROBE_TIMEOUT_S == probe_deadline.TORCH_PROBE_TIMEOUT_S
    assert GatherOptions().torch_timeout_s == probe_deadline.TORCH_PROBE_TIMEOUT_S
