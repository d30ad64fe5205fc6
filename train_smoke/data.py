"""Synthetic detection data: bright shapes of several classes on textured backgrounds.

Why synthetic: the smoke job must never download anything, must produce the same data
on every rank, node and run (so a failure reproduces), and must be learnable enough
that a falling loss in ~30 steps proves training works. Item ``i`` is drawn from its
own ``torch.Generator`` seeded from ``(seed, i)``, so it does not depend on which
DataLoader worker or rank renders it, nor on the global RNG state.

Images are ``float32 [3, S, S]`` in 0..1. The background is a dark base colour with a
smooth low-frequency texture and fine pixel noise, clipped to 0..``BACKGROUND_MAX``;
shapes are filled with a bright colour (every channel at least ``SHAPE_MIN``) plus
noise, so a shape pixel is always brighter than any background pixel. Shapes never
overlap, so each label's box is the exact pixel extent of what was drawn. Labels are
``[n, 5]`` rows of ``(class, cx, cy, w, h)`` normalised to 0..1 (YOLO format).
"""

from __future__ import annotations

import torch
from torch.utils.data import Dataset

# Class index -> shape drawn; a data set uses the first ``num_classes`` of them.
SHAPES: tuple[str, ...] = ("rectangle", "ellipse", "triangle", "cross", "ring", "diamond")

BACKGROUND_MAX = 0.45
SHAPE_MIN = 0.55
MIN_SIDE, MAX_SIDE = 0.12, 0.45  # shape sides as fractions of the image side
PLACEMENT_TRIES = 12


def _item_seed(seed: int, index: int) -> int:
    """A 32-bit generator seed, distinct for every index of one data set.

    torch's CPU generator (MT19937) keeps only the low 32 bits of its seed
    (``init_with_uint32`` in https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/core/MT19937RNGEngine.h),
    so packing ``seed`` into high bits would give every seed the same images. Instead
    ``index`` is offset by ``seed`` times the 32-bit golden-ratio constant: a bijection
    of the index for a given seed, and different seeds start ~2**32/phi apart.
    """
    return (index + seed * 0x9E3779B9) & 0xFFFFFFFF


def _uniform(g: torch.Generator, low: float, high: float, *shape: int) -> torch.Tensor:
    return low + (high - low) * torch.rand(shape or (1,), generator=g)


def _shape_mask(kind: str, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Pixels of a shape in box-local coordinates ``u, v`` in [-1, 1] (y points down)."""
    inside = (u.abs() <= 1) & (v.abs() <= 1)
    if kind == "rectangle":
        return inside
    if kind == "ellipse":
        return u**2 + v**2 <= 1
    if kind == "triangle":  # apex at the top centre, base along the bottom edge
        return inside & (u.abs() <= (v + 1) / 2)
    if kind == "cross":
        return inside & ((u.abs() <= 0.35) | (v.abs() <= 0.35))
    if kind == "ring":
        r2 = u**2 + v**2
        return (r2 <= 1) & (r2 >= 0.3)
    if kind == "diamond":
        return u.abs() + v.abs() <= 1
    raise ValueError(f"unknown shape {kind!r}")


def _upsample(coarse: torch.Tensor, size: int) -> torch.Tensor:
    """Bilinear upsampling of ``[C, c, c]`` to ``[C, size, size]`` from single IEEE ops.

    ``F.interpolate`` returns results that differ in the last bit with the number of
    intra-op threads (a DataLoader worker runs with one, the main process with all), so
    the same item would differ between a worker and the parent. Gathers, subtractions,
    multiplications and additions issued as separate tensor ops are exact whatever the
    threading or vector width.
    """
    c = coarse.shape[-1]
    src = ((torch.arange(size, dtype=torch.float32) + 0.5) * (c / size) - 0.5).clamp(0, c - 1)
    lo = src.floor().long()
    hi = (lo + 1).clamp(max=c - 1)
    t = src - lo.float()
    rows = coarse[:, lo, :] + (coarse[:, hi, :] - coarse[:, lo, :]) * t[None, :, None]
    return rows[:, :, lo] + (rows[:, :, hi] - rows[:, :, lo]) * t[None, None, :]


def _background(g: torch.Generator, size: int) -> torch.Tensor:
    """Dark base colour + bilinear-upsampled coarse noise (texture) + pixel noise."""
    base = _uniform(g, 0.05, 0.30, 3, 1, 1)
    coarse = max(2, size // 16)
    texture = _upsample(_uniform(g, -0.15, 0.15, 3, coarse, coarse), size)
    noise = _uniform(g, -0.05, 0.05, 3, size, size)
    return (base + texture + noise).clamp(0.0, BACKGROUND_MAX)


def _overlaps(box: tuple[int, int, int, int], placed: list[tuple[int, int, int, int]]) -> bool:
    """True if ``box`` (x0, y0, x1, y1, exclusive ends) touches a placed box (1 px gap)."""
    x0, y0, x1, y1 = box
    return any(
        x0 <= px1 and px0 <= x1 and y0 <= py1 and py0 <= y1 for px0, py0, px1, py1 in placed
    )


class SyntheticDetection(Dataset):
    """``length`` deterministic images of ``imgsz`` pixels with 1..``max_objects`` shapes."""

    def __init__(
        self,
        length: int,
        imgsz: int,
        num_classes: int = 4,
        seed: int = 0,
        max_objects: int = 4,
    ) -> None:
        if not 1 <= num_classes <= len(SHAPES):
            raise ValueError(f"num_classes must be in 1..{len(SHAPES)}, got {num_classes}")
        if length < 0 or imgsz < 32 or max_objects < 1:
            raise ValueError("length >= 0, imgsz >= 32 and max_objects >= 1 are required")
        self.length = length
        self.imgsz = imgsz
        self.num_classes = num_classes
        self.seed = seed
        self.max_objects = max_objects

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if index < 0:
            index += self.length
        if not 0 <= index < self.length:
            raise IndexError(f"index {index} out of range for {self.length} items")
        g = torch.Generator().manual_seed(_item_seed(self.seed, index))
        size = self.imgsz
        image = _background(g, size)
        ys = torch.arange(size, dtype=torch.float32)[:, None] + 0.5
        xs = torch.arange(size, dtype=torch.float32)[None, :] + 0.5
        n_objects = int(torch.randint(1, self.max_objects + 1, (1,), generator=g))
        placed: list[tuple[int, int, int, int]] = []
        labels: list[list[float]] = []
        for _ in range(n_objects):
            cls = int(torch.randint(0, self.num_classes, (1,), generator=g))
            colour = _uniform(g, SHAPE_MIN + 0.05, 1.0, 3, 1, 1)
            for _ in range(PLACEMENT_TRIES):
                w, h = (_uniform(g, MIN_SIDE, MAX_SIDE, 2) * size).tolist()
                cx = float(_uniform(g, w / 2, size - w / 2))
                cy = float(_uniform(g, h / 2, size - h / 2))
                mask = _shape_mask(SHAPES[cls], (xs - cx) / (w / 2), (ys - cy) / (h / 2))
                rows = torch.nonzero(mask.any(dim=1)).reshape(-1)
                cols = torch.nonzero(mask.any(dim=0)).reshape(-1)
                if rows.numel() == 0:
                    continue
                box = (int(cols[0]), int(rows[0]), int(cols[-1]) + 1, int(rows[-1]) + 1)
                if _overlaps(box, placed):
                    continue
                placed.append(box)
                fill = (colour + _uniform(g, -0.05, 0.0, 3, size, size)).clamp(SHAPE_MIN, 1.0)
                image = torch.where(mask[None], fill, image)
                x0, y0, x1, y1 = box
                labels.append(
                    [cls, (x0 + x1) / 2 / size, (y0 + y1) / 2 / size, (x1 - x0) / size,
                     (y1 - y0) / size]
                )
                break
        return image, torch.tensor(labels, dtype=torch.float32).reshape(-1, 5)


def collate(
    batch: list[tuple[torch.Tensor, torch.Tensor]],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack images ``[B, 3, S, S]``; concatenate labels into ``[T, 6]`` with the image index.

    A module-level function (not a lambda) so DataLoader workers can pickle it.
    """
    if not batch:
        raise ValueError("cannot collate an empty batch")
    images = torch.stack([image for image, _ in batch])
    targets = [
        torch.cat((torch.full((labels.shape[0], 1), float(i)), labels), dim=1)
        for i, (_, labels) in enumerate(batch)
    ]
    return images, torch.cat(targets)
