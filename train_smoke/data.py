"""STAND-IN, replaced by the real implementation at merge.

Deterministic random images with one box each, satisfying the data contract
(``SyntheticDetection(length, imgsz, num_classes, seed)``, ``collate``).
"""

from __future__ import annotations

import torch
from torch.utils.data import Dataset


class SyntheticDetection(Dataset):
    def __init__(self, length: int, imgsz: int, num_classes: int = 4, seed: int = 0) -> None:
        self.length, self.imgsz, self.num_classes, self.seed = length, imgsz, num_classes, seed

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(self.seed * 100003 + index)
        cls = float(index % self.num_classes)
        # The class sets the brightness, so there is something to learn.
        image = torch.rand(3, self.imgsz, self.imgsz, generator=gen) * 0.2 + cls / self.num_classes
        box = torch.rand(4, generator=gen) * 0.5 + 0.25
        return image, torch.tensor([[cls, *box.tolist()]])


def collate(batch: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    images = torch.stack([image for image, _ in batch])
    rows = [torch.cat([torch.full((len(lab), 1), float(i)), lab], 1)
            for i, (_, lab) in enumerate(batch)]
    return images, torch.cat(rows) if rows else torch.zeros(0, 6)
