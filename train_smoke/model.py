"""STAND-IN, replaced by the real implementation at merge.

A tiny conv net with three outputs (strides 8, 16, 32) that satisfies the model contract
(``build_model``, ``parameter_fingerprint``) so the DDP worker and the supervisor can be
built and tested before the real YOLO detector lands.
"""

from __future__ import annotations

import torch
from torch import nn

_WIDTH = {"n": 8, "s": 16, "m": 24}


def _block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, 2, 1, bias=False), nn.BatchNorm2d(cout),
                         nn.SiLU())


class _TinyNet(nn.Module):
    def __init__(self, width: int, num_classes: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(_block(3, width), _block(width, width), _block(width, width))
        self.down16 = _block(width, width * 2)
        self.down32 = _block(width * 2, width * 4)
        out = 5 + num_classes
        self.heads = nn.ModuleList(nn.Conv2d(c, out, 1) for c in (width, width * 2, width * 4))

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        p8 = self.stem(x)
        p16 = self.down16(p8)
        p32 = self.down32(p16)
        return [head(p) for head, p in zip(self.heads, (p8, p16, p32))]


def build_model(size: str = "n", num_classes: int = 4) -> nn.Module:
    return _TinyNet(_WIDTH[size], num_classes)


def parameter_fingerprint(model: nn.Module) -> torch.Tensor:
    """Per-parameter sums of the raw bits (int64): equal tensors mean identical parameters."""
    sums = []
    for p in model.parameters():
        bits = p.detach().float().cpu().contiguous().view(torch.int32).to(torch.int64)
        sums.append(bits.sum())
    return torch.stack(sums)
