"""accelerate's state block read across the log: every rank on one GPU (DIAG025).

The block is accelerate's PartialState.__repr__ (accelerate/state.py at v1.1.0), which
scripts log once per process; blind split E's ViewDiff thread showed "Num processes: 4" with
every rank's "Device: cuda:0" and only NCCL's "Duplicate GPU detected" besides.
"""

from __future__ import annotations

import pytest

from ddp_doctor.diagnose import diagnose

PREFIX = "11/28/2026 10:00:00 - INFO - __main__ - "


def _block(index: int, local: int, device: str, size: int = 4) -> list[str]:
    return [f"{PREFIX}Distributed environment: MULTI_GPU  Backend: nccl",
            f"Num processes: {size}", f"Process index: {index}",
            f"Local process index: {local}", f"Device: {device}", ""]


def _codes(tmp_path, lines: list[str]) -> list[str]:
    path = tmp_path / "job.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [f.code.id for f in diagnose(str(path)).report.results[0].findings]


def test_every_rank_on_one_gpu_is_gpu_not_visible(tmp_path):
    lines = [line for i in range(4) for line in _block(i, 0, "cuda:0")]
    assert _codes(tmp_path, lines)[0] == "DIAG025"


def test_it_explains_nccls_duplicate_gpu(tmp_path):
    lines = [line for i in range(2) for line in _block(i, 0, "cuda:0", size=2)]
    lines.append("node1:123:456 [1] init.cc:871 NCCL WARN Duplicate GPU detected : rank 1 and "
                 "rank 0 both on CUDA device 1a000")
    path = tmp_path / "job.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    lead = diagnose(str(path)).report.results[0].findings[0]
    assert lead.code.id == "DIAG025" and lead.code.category.value == "gpu_not_visible"
    assert any("Duplicate GPU" in e.value for e in lead.evidence)


def test_interleaved_blocks_are_read_by_their_values(tmp_path):
    blocks = [_block(i, 0, "cuda:0") for i in range(4)]
    lines = [block[row] for row in range(6) for block in blocks]  # printed at one moment
    assert _codes(tmp_path, lines)[0] == "DIAG025"


@pytest.mark.parametrize("lines", [
    # one GPU per rank: healthy
    [line for i in range(4) for line in _block(i, i, f"cuda:{i}")],
    # a one-process run
    _block(0, 0, "cuda:0", size=1),
    # one rank's block only: nothing says the others share its GPU
    _block(0, 0, "cuda:0"),
    # two nodes, one GPU each: cuda:0 on both is right
    ["accelerate launch --num_machines 2 --machine_rank 0 train.py",
     *(line for i in range(2) for line in _block(i, 0, "cuda:0", size=2))],
])
def test_what_is_not_ranks_sharing_a_gpu(tmp_path, lines):
    assert "DIAG025" not in _codes(tmp_path, lines)


def test_the_duplicate_gpu_lead_is_a_declared_consequence_not_an_engine_case():
    """The relation is declared beside the reader (accelerate_state.CAUSES, with its
    reason) and applied by the one evidence model: refine() names no log code for it."""
    from pathlib import Path

    from ddp_doctor.diagnose import context
    from ddp_doctor.diagnose.accelerate_state import CAUSES

    assert "DIAG025" in context.RELATIONS.explainers("LOG057")
    assert all(item.relation.reason for item in CAUSES)
    assert "LOG057" not in Path(context.__file__).read_text(encoding="utf-8")
