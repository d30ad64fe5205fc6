"""Target assignment: which grid cells of which levels learn each ground-truth box.

Our own rule, in the spirit of YOLOv5/YOLOv4 assignment (one square prior per level):

1. **Level by scale.** Every level has one square prior of ``PRIOR_CELLS`` cells
   (4 cells: 32 px at stride 8, 64 px at 16, 128 px at 32). A box fits a level when
   neither side is more than ``FIT_RATIO`` times larger or smaller than the prior,
   which is exactly the range the head can express (``loss.decode_boxes`` predicts
   sides of 0..4 priors). A box may fit two or three levels and then trains all of
   them; a box that fits none (very small or very large) goes to the level whose
   prior is nearest in ratio, so no box is ever dropped.
2. **Centre cell plus two neighbours.** On each chosen level the cell containing the
   box centre is positive, plus the horizontal neighbour on the side the centre leans
   to and the vertical neighbour likewise (none when the centre sits exactly mid-cell,
   or when the neighbour is off the grid). Three positives per box instead of one give
   three times the box/class gradient signal, which matters for a job that must show
   learning in 30 steps. The head predicts centre offsets in (-0.5, 1.5) cells
   ("grid sensitivity" fix of YOLOv4, Bochkovskiy et al. 2020,
   https://arxiv.org/abs/2004.10934), so a neighbour can still reach the centre.

Everything is vectorised over targets; the result per level is a ``LevelTargets``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

PRIOR_CELLS = 4.0
FIT_RATIO = 4.0

# (dx, dy) of the candidate cells: centre, left, right, up, down.
_OFFSETS = ((0, 0), (-1, 0), (1, 0), (0, -1), (0, 1))


@dataclass(frozen=True)
class LevelTargets:
    """Positive cells of one level, one row per (box, cell) pair.

    ``box`` is ``(x, y, w, h)`` in grid units of this level, with ``x, y`` the box centre
    measured from the top-left corner of the positive cell (so in (-0.5, 1.5)); it is
    the frame ``loss.decode_boxes`` predicts in. ``target`` indexes the input row.
    """

    image: torch.Tensor  # int64 [N]
    gy: torch.Tensor  # int64 [N]
    gx: torch.Tensor  # int64 [N]
    cls: torch.Tensor  # int64 [N]
    box: torch.Tensor  # float [N, 4]
    target: torch.Tensor  # int64 [N]

    def __len__(self) -> int:
        return int(self.image.numel())


def _scale_ratio(wh_cells: torch.Tensor) -> torch.Tensor:
    """Worst side ratio between boxes ``[T, 2]`` (grid units) and the level's prior."""
    r = wh_cells.clamp(min=1e-6) / PRIOR_CELLS
    return torch.maximum(r, 1 / r).amax(dim=1)


def assign_targets(
    targets: torch.Tensor,
    strides: Sequence[int],
    grid_sizes: Sequence[tuple[int, int]],
) -> list[LevelTargets]:
    """Assign ``targets`` ``[T, 6]`` of ``(image, class, cx, cy, w, h)`` (0..1) to levels.

    ``grid_sizes[i]`` is ``(height, width)`` in cells of level ``i`` with stride
    ``strides[i]``. Returns one ``LevelTargets`` per level, on ``targets``' device.
    """
    if len(strides) != len(grid_sizes):
        raise ValueError("one grid size per stride is needed")
    targets = targets.reshape(-1, 6).float()
    device = targets.device
    ratios = []
    for gh, gw in grid_sizes:
        scale = torch.tensor([gw, gh], dtype=torch.float32, device=device)
        ratios.append(_scale_ratio(targets[:, 4:6] * scale))
    ratio = torch.stack(ratios, dim=0) if ratios else torch.zeros(0, 0, device=device)
    fits = ratio < FIT_RATIO  # [L, T]
    if targets.shape[0]:
        nearest = ratio.argmin(dim=0)  # fallback for boxes that fit no level
        orphan = ~fits.any(dim=0)
        levels = torch.arange(len(grid_sizes), device=device)[:, None]
        fits = fits | (orphan[None, :] & (levels == nearest[None, :]))
    return [
        _assign_level(targets, fits[i], gh, gw) for i, (gh, gw) in enumerate(grid_sizes)
    ]


def _assign_level(targets: torch.Tensor, chosen: torch.Tensor, gh: int, gw: int) -> LevelTargets:
    """Centre cell plus leaning neighbours for the targets ``chosen`` on one level."""
    device = targets.device
    index = torch.nonzero(chosen, as_tuple=False).reshape(-1)
    t = targets[index]
    size = torch.tensor([gw, gh], dtype=torch.float32, device=device)
    centre = t[:, 2:4] * size
    wh = t[:, 4:6] * size
    cell = centre.floor().long()
    cell = torch.minimum(cell.clamp(min=0), (size.long() - 1)[None, :])
    frac = centre - cell.float()
    cx, cy = cell[:, 0], cell[:, 1]
    fx, fy = frac[:, 0], frac[:, 1]
    keep = (
        torch.ones_like(fx, dtype=torch.bool),
        (fx < 0.5) & (cx > 0),
        (fx > 0.5) & (cx < gw - 1),
        (fy < 0.5) & (cy > 0),
        (fy > 0.5) & (cy < gh - 1),
    )
    rows, cells = [], []
    for (dx, dy), mask in zip(_OFFSETS, keep):
        sel = torch.nonzero(mask, as_tuple=False).reshape(-1)
        rows.append(sel)
        cells.append(cell[sel] + torch.tensor([dx, dy], device=device))
    row = torch.cat(rows)
    cell_xy = torch.cat(cells).reshape(-1, 2)
    box = torch.cat((centre[row] - cell_xy.float(), wh[row]), dim=1)
    return LevelTargets(
        image=t[row, 0].long(),
        gy=cell_xy[:, 1],
        gx=cell_xy[:, 0],
        cls=t[row, 1].long(),
        box=box,
        target=index[row],
    )
