"""Synthetic detection data: deterministic everywhere, labels that match the pixels.

Every rank, DataLoader worker and rerun must see the same item for the same (seed,
index), or a failure would not reproduce and "loss fell" would measure luck; and each
box must be the exact extent of a drawn shape, or the detector learns noise.
"""

from __future__ import annotations

import hashlib
import pickle
import subprocess
import sys

import pytest
import torch
from ddp_doctor.train_smoke.data import (
    BACKGROUND_MAX,
    SHAPE_MIN,
    SHAPES,
    SyntheticDetection,
    collate,
)
from torch.utils.data import DataLoader

IMGSZ = 96


def _digest(image: torch.Tensor, labels: torch.Tensor) -> str:
    """SHA-256 of the exact bytes of an item (no numpy in the job's environment)."""
    h = hashlib.sha256()
    for t in (image, labels):
        h.update(bytes(t.contiguous().reshape(-1).view(torch.uint8).tolist()))
    return h.hexdigest()


def test_items_are_deterministic_and_distinct():
    data = SyntheticDetection(10, IMGSZ, seed=5)
    again = SyntheticDetection(10, IMGSZ, seed=5)
    other_seed = SyntheticDetection(10, IMGSZ, seed=6)
    assert _digest(*data[3]) == _digest(*data[3]) == _digest(*again[3])
    assert _digest(*data[3]) != _digest(*data[4])
    assert _digest(*data[3]) != _digest(*other_seed[3])


def test_global_rng_state_does_not_leak_into_items():
    data = SyntheticDetection(4, IMGSZ, seed=1)
    torch.manual_seed(0)
    first = _digest(*data[2])
    torch.manual_seed(123)
    torch.rand(1000)
    assert _digest(*data[2]) == first


def test_items_do_not_depend_on_the_thread_count():
    """DataLoader workers run with one intra-op thread, the parent with all of them."""
    data = SyntheticDetection(3, IMGSZ, seed=7)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        single = [_digest(*data[i]) for i in range(3)]
        torch.set_num_threads(4)
        several = [_digest(*data[i]) for i in range(3)]
    finally:
        torch.set_num_threads(threads)
    assert single == several


@pytest.mark.slow
@pytest.mark.spawns
def test_items_are_identical_in_a_fresh_process():
    data = SyntheticDetection(8, IMGSZ, seed=11)
    script = (
        "import hashlib, torch\n"
        "from ddp_doctor.train_smoke.data import SyntheticDetection\n"
        f"image, labels = SyntheticDetection(8, {IMGSZ}, seed=11)[6]\n"
        "h = hashlib.sha256()\n"
        "for t in (image, labels):\n"
        "    h.update(bytes(t.contiguous().reshape(-1).view(torch.uint8).tolist()))\n"
        "print(h.hexdigest())\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert proc.stdout.strip() == _digest(*data[6])


@pytest.mark.spawns
def test_dataloader_workers_and_pickling_give_the_same_batches():
    data = SyntheticDetection(6, IMGSZ, seed=2)
    clone = pickle.loads(pickle.dumps(data))
    assert pickle.loads(pickle.dumps(collate)) is collate
    loader = DataLoader(clone, batch_size=3, num_workers=2, collate_fn=collate)
    batches = list(loader)
    assert len(batches) == 2
    for b, (images, targets) in enumerate(batches):
        exp_images, exp_targets = collate([data[i] for i in range(3 * b, 3 * b + 3)])
        assert torch.equal(images, exp_images)
        assert torch.equal(targets, exp_targets)


def test_item_layout_and_label_ranges():
    data = SyntheticDetection(30, IMGSZ, num_classes=4, seed=0)
    seen_classes = set()
    for i in range(len(data)):
        image, labels = data[i]
        assert image.shape == (3, IMGSZ, IMGSZ) and image.dtype == torch.float32
        assert image.min() >= 0.0 and image.max() <= 1.0
        assert labels.dtype == torch.float32 and labels.dim() == 2 and labels.shape[1] == 5
        assert 1 <= labels.shape[0] <= 4
        cls, cx, cy, w, h = labels.unbind(1)
        assert torch.equal(cls, cls.round()) and cls.min() >= 0 and cls.max() < 4
        assert (w > 0).all() and (h > 0).all()
        assert (cx - w / 2 >= 0).all() and (cx + w / 2 <= 1 + 1e-6).all()
        assert (cy - h / 2 >= 0).all() and (cy + h / 2 <= 1 + 1e-6).all()
        seen_classes |= {int(c) for c in cls}
    assert seen_classes == {0, 1, 2, 3}


def test_boxes_are_the_exact_extent_of_the_drawn_shapes():
    """Shape pixels are the bright ones; each box bounds its own, nothing bright outside."""
    data = SyntheticDetection(20, IMGSZ, seed=9)
    for i in range(len(data)):
        image, labels = data[i]
        bright = image.min(dim=0).values >= SHAPE_MIN
        assert image[:, ~bright].max() <= BACKGROUND_MAX
        covered = torch.zeros_like(bright)
        for _, cx, cy, w, h in labels.tolist():
            x0, x1 = round((cx - w / 2) * IMGSZ), round((cx + w / 2) * IMGSZ)
            y0, y1 = round((cy - h / 2) * IMGSZ), round((cy + h / 2) * IMGSZ)
            inside = bright[y0:y1, x0:x1]
            # Tight: the first and last row and column of the box hold shape pixels.
            assert inside[0].any() and inside[-1].any()
            assert inside[:, 0].any() and inside[:, -1].any()
            assert inside.float().mean() > 0.3  # a filled shape, not a speck
            covered[y0:y1, x0:x1] = True
        assert not (bright & ~covered).any(), f"item {i}: bright pixels outside every box"


def test_background_is_textured_not_flat():
    image, _ = SyntheticDetection(1, IMGSZ, seed=4)[0]
    bright = image.min(dim=0).values >= SHAPE_MIN
    background = image[:, ~bright]
    assert background.std(dim=1).min() > 0.02


def test_collate_layout():
    data = SyntheticDetection(3, IMGSZ, seed=8)
    items = [data[i] for i in range(3)]
    images, targets = collate(items)
    assert images.shape == (3, 3, IMGSZ, IMGSZ)
    counts = [labels.shape[0] for _, labels in items]
    assert targets.shape == (sum(counts), 6)
    expected_index = torch.cat([torch.full((n,), float(i)) for i, n in enumerate(counts)])
    assert torch.equal(targets[:, 0], expected_index)
    assert torch.equal(targets[:, 1:], torch.cat([labels for _, labels in items]))


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        SyntheticDetection(4, IMGSZ, num_classes=len(SHAPES) + 1)
    with pytest.raises(IndexError):
        SyntheticDetection(4, IMGSZ)[4]
    with pytest.raises(ValueError):
        collate([])
