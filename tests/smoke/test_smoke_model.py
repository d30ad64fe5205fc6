"""The smoke job's detector, loss and target assignment, in one process on the CPU.

The multi-process runs live in the smoke supervisor's tests; here the model must have
the documented layout at every size, learn on a fixed batch, give every parameter a
gradient (DDP without find_unused_parameters), survive AMP and SyncBatchNorm
conversion, and assign hand-made boxes to the cells the rule in assign.py names.
"""

from __future__ import annotations

import math

import pytest
import torch
from ddp_doctor.train_smoke.assign import assign_targets
from ddp_doctor.train_smoke.data import SyntheticDetection, collate
from ddp_doctor.train_smoke.detector import (
    build_model,
    build_optimizer,
    count_parameters,
    parameter_checksum,
    parameter_fingerprint,
)
from ddp_doctor.train_smoke.loss import DetectionLoss, complete_iou, decode_boxes
from torch import nn

IMGSZ = 128
GRIDS = [(16, 16), (8, 8), (4, 4)]  # at IMGSZ for strides 8, 16, 32
STRIDES = (8, 16, 32)


def _batch(n: int = 8, imgsz: int = IMGSZ) -> tuple[torch.Tensor, torch.Tensor]:
    data = SyntheticDetection(n, imgsz, num_classes=4, seed=3)
    return collate([data[i] for i in range(n)])


def _box(image: int, cls: int, cx_px: float, cy_px: float, w_px: float, h_px: float):
    """One target row in YOLO format for an IMGSZ image, from pixel coordinates."""
    return [image, cls, cx_px / IMGSZ, cy_px / IMGSZ, w_px / IMGSZ, h_px / IMGSZ]


# ---- model -------------------------------------------------------------------------------


@pytest.mark.parametrize("size", ["n", "s", pytest.param("m", marks=pytest.mark.slow)])
def test_output_layout_for_each_size(size):
    model = build_model(size, num_classes=3)
    assert model.strides == (8, 16, 32)
    outs = model(torch.rand(2, 3, 64, 64))
    assert [tuple(o.shape) for o in outs] == [(2, 1, 8, 8, 8), (2, 1, 4, 4, 8), (2, 1, 2, 2, 8)]
    assert all(o.dtype == torch.float32 for o in outs)


def test_parameter_counts_grow_with_size():
    counts = [count_parameters(build_model(size)) for size in ("n", "s", "m")]
    assert counts[0] < counts[1] < counts[2]
    assert counts[0] < 3_000_000  # n stays CPU-sized


def test_bad_size_and_bad_image_side_are_refused():
    with pytest.raises(ValueError, match="unknown model size"):
        build_model("xl")
    with pytest.raises(ValueError, match="divisible by 32"):
        build_model("n")(torch.rand(1, 3, 48, 48))


def test_objectness_starts_at_the_prior():
    """Bias initialisation: a fresh model calls almost every cell background."""
    model = build_model("n").eval()
    with torch.no_grad():
        outs = model(torch.rand(1, 3, 64, 64))
    mean_obj = torch.cat([o[..., 4].sigmoid().reshape(-1) for o in outs]).mean().item()
    assert 0.001 < mean_obj < 0.05


@pytest.mark.slow
def test_loss_falls_on_a_fixed_batch():
    torch.manual_seed(0)
    images, targets = _batch()
    model = build_model("n")
    loss_fn = DetectionLoss(model, num_classes=4)
    optimizer = build_optimizer(model)
    losses = []
    for _ in range(30):
        loss, parts = loss_fn(model(images), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        assert set(parts) == {"box", "obj", "cls"}
        assert all(math.isfinite(v) for v in parts.values())
    first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
    assert math.isfinite(last)
    assert last < 0.7 * first, losses


@pytest.mark.parametrize("with_boxes", [True, False])
def test_every_parameter_gets_a_gradient(with_boxes):
    """DDP without find_unused_parameters needs every parameter in the graph, every step."""
    images, targets = _batch(2, 64)
    if not with_boxes:
        targets = targets[:0]
    model = build_model("n")
    loss, parts = DetectionLoss(model, 4)(model(images), targets)
    loss.backward()
    missing = [name for name, p in model.named_parameters() if p.grad is None]
    assert missing == []
    if not with_boxes:
        assert parts["box"] == 0.0 and parts["cls"] == 0.0 and parts["obj"] > 0


def test_autocast_outputs_give_a_float32_finite_loss():
    """AMP: the loss runs in float32 whatever dtype the autocast forward produced."""
    images, targets = _batch(2, 64)
    model = build_model("n")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        outs = model(images)
    assert outs[0].dtype == torch.bfloat16
    loss, _ = DetectionLoss(model, 4)(outs, targets)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    loss.backward()


def test_sync_batchnorm_conversion_keeps_the_model_working():
    model = build_model("n")
    n_bn = sum(isinstance(m, nn.BatchNorm2d) for m in model.modules())
    synced = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    assert sum(isinstance(m, nn.SyncBatchNorm) for m in synced.modules()) == n_bn > 0
    assert not any(type(m) is nn.BatchNorm2d for m in synced.modules())
    outs = synced(torch.rand(2, 3, 64, 64))  # no process group: falls back to plain BN
    assert outs[0].shape == (2, 1, 8, 8, 9)


def test_loss_reads_strides_through_a_wrapper():
    model = build_model("n")
    assert DetectionLoss(nn.DataParallel(model), 4).strides == (8, 16, 32)
    assert DetectionLoss((8, 16, 32), 4).strides == (8, 16, 32)


# ---- fingerprint -------------------------------------------------------------------------


@pytest.mark.slow  # the first optimizer of a process imports torch._dynamo: ~2.5 s of CPU
def test_fingerprint_equal_for_identical_models_and_changes_after_a_step():
    torch.manual_seed(7)
    a = build_model("n")
    torch.manual_seed(7)
    b = build_model("n")
    fa, fb = parameter_fingerprint(a), parameter_fingerprint(b)
    assert fa.dtype == torch.int64 and fa.shape == (len(list(a.parameters())),)
    assert torch.equal(fa, fb)
    assert parameter_checksum(a) == parameter_checksum(b)

    images, targets = _batch(2, 64)
    optimizer = build_optimizer(b)
    loss, _ = DetectionLoss(b, 4)(b(images), targets)
    loss.backward()
    optimizer.step()
    assert not torch.equal(fa, parameter_fingerprint(b))


def test_fingerprint_sees_single_bits_and_swapped_elements():
    base = nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        base.weight.copy_(torch.tensor([[0.0, 1.0], [2.0, 3.0]]))
    ref = parameter_fingerprint(base)
    with torch.no_grad():
        base.weight[0, 0] = -0.0  # equal as floats, different bits
    assert not torch.equal(ref, parameter_fingerprint(base))
    with torch.no_grad():
        base.weight.copy_(torch.tensor([[1.0, 0.0], [2.0, 3.0]]))  # same values, swapped
    assert not torch.equal(ref, parameter_fingerprint(base))


# ---- target assignment -------------------------------------------------------------------


def _cells(level) -> set[tuple[int, int, int, int]]:
    return {
        (int(i), int(y), int(x), int(c))
        for i, y, x, c in zip(level.image, level.gy, level.gx, level.cls)
    }


def test_small_box_mid_cell_goes_to_its_cell_on_stride_8_only():
    # 12 px box centred in cell (x=5, y=3) of the stride-8 grid, class 2, image 1.
    targets = torch.tensor([_box(1, 2, 5.5 * 8, 3.5 * 8, 12, 12)])
    levels = assign_targets(targets, STRIDES, GRIDS)
    assert _cells(levels[0]) == {(1, 3, 5, 2)}
    assert len(levels[1]) == 0 and len(levels[2]) == 0
    assert torch.allclose(levels[0].box, torch.tensor([[0.5, 0.5, 1.5, 1.5]]))


def test_off_centre_box_adds_the_neighbours_it_leans_to():
    # Centre at (5.2, 3.8) cells: left neighbour (4, 3) and lower neighbour (5, 4).
    targets = torch.tensor([_box(0, 1, 5.2 * 8, 3.8 * 8, 12, 12)])
    level = assign_targets(targets, STRIDES, GRIDS)[0]
    assert _cells(level) == {(0, 3, 5, 1), (0, 3, 4, 1), (0, 4, 5, 1)}
    offsets = {(int(y), int(x)): tuple(round(v, 4) for v in b[:2].tolist())
               for y, x, b in zip(level.gy, level.gx, level.box)}
    assert offsets == {(3, 5): (0.2, 0.8), (3, 4): (1.2, 0.8), (4, 5): (0.2, -0.2)}


def test_neighbours_never_leave_the_grid():
    targets = torch.tensor([_box(0, 0, 0.2 * 8, 0.3 * 8, 12, 12)])
    assert _cells(assign_targets(targets, STRIDES, GRIDS)[0]) == {(0, 0, 0, 0)}


def test_large_box_trains_every_level_whose_prior_fits():
    # 100 px: within 4x of the 32, 64 and 128 px priors.
    targets = torch.tensor([_box(0, 3, 64, 64, 100, 100)])
    levels = assign_targets(targets, STRIDES, GRIDS)
    # (64, 64) px is a cell corner on every level: the centre cell plus left and up.
    assert _cells(levels[0]) == {(0, 8, 8, 3), (0, 8, 7, 3), (0, 7, 8, 3)}
    assert _cells(levels[1]) == {(0, 4, 4, 3), (0, 4, 3, 3), (0, 3, 4, 3)}
    assert _cells(levels[2]) == {(0, 2, 2, 3), (0, 2, 1, 3), (0, 1, 2, 3)}


def test_medium_box_skips_the_level_whose_prior_is_too_big():
    # 30 px fits the 32 and 64 px priors, not the 128 px one (ratio 4.27).
    targets = torch.tensor([_box(0, 0, 4.5 * 8, 4.5 * 8, 30, 30)])
    levels = assign_targets(targets, STRIDES, GRIDS)
    assert [len(level) > 0 for level in levels] == [True, True, False]


def test_box_that_fits_no_level_goes_to_the_nearest_one():
    tiny = torch.tensor([_box(2, 1, 3.5 * 8, 3.5 * 8, 2, 2)])  # 16x smaller than 32 px
    levels = assign_targets(tiny, STRIDES, GRIDS)
    assert _cells(levels[0]) == {(2, 3, 3, 1)} and not len(levels[1]) and not len(levels[2])


def test_boxes_keep_their_image_and_source_row():
    targets = torch.tensor([
        _box(0, 0, 5.5 * 8, 5.5 * 8, 12, 12),
        _box(3, 1, 9.5 * 8, 2.5 * 8, 12, 12),
    ])
    level = assign_targets(targets, STRIDES, GRIDS)[0]
    assert _cells(level) == {(0, 5, 5, 0), (3, 2, 9, 1)}
    assert sorted(level.target.tolist()) == [0, 1]


# ---- box geometry -----------------------------------------------------------------------


def test_complete_iou_on_known_boxes():
    unit = torch.tensor([[0.0, 0.0, 1.0, 1.0]])
    assert complete_iou(unit, unit).item() == pytest.approx(1.0, abs=1e-5)
    shifted = torch.tensor([[0.5, 0.0, 1.0, 1.0]])
    # IoU 0.5/1.5; centre distance^2 0.25 over enclosing diagonal^2 1.5^2 + 1; same aspect.
    expected = 1 / 3 - 0.25 / 3.25
    assert complete_iou(shifted, unit).item() == pytest.approx(expected, abs=1e-5)
    far = torch.tensor([[5.0, 0.0, 1.0, 1.0]])
    assert complete_iou(far, unit).item() < 0


def test_decoded_boxes_span_the_assignment_ranges():
    big = decode_boxes(torch.full((4,), 50.0))
    small = decode_boxes(torch.full((4,), -50.0))
    assert big.tolist() == pytest.approx([1.5, 1.5, 16.0, 16.0])  # 4 priors of 4 cells
    assert small.tolist() == pytest.approx([-0.5, -0.5, 0.0, 0.0])
