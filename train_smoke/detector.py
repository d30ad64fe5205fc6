"""A compact YOLO-family detector, written for the smoke job.

Why a real detector rather than a toy MLP: the smoke job must fail where users' jobs
fail, so it exercises the same kernels (strided convolutions, BatchNorm, SiLU,
nearest upsampling, concatenations, max pooling) and the same DDP traffic pattern
(many parameter tensors of very different sizes, bucketed all-reduce) as the YOLO
models people train with ``torchrun``.

Architecture (our own compact design of the family):

* ``ConvBNAct``: Conv2d (no bias) -> BatchNorm2d -> SiLU, the unit everything is built from.
* ``CSPStage``: Cross Stage Partial stage (Wang et al. 2019, "CSPNet: A New Backbone that
  can Enhance Learning Capability of CNN", https://arxiv.org/abs/1911.11929): the input
  is projected and split in two; one half runs through ``n`` residual bottlenecks, the
  other bypasses them; both are concatenated and fused by a 1x1 convolution.
* ``SPPF``: spatial pyramid pooling (He et al. 2014, https://arxiv.org/abs/1406.4729) done
  as three chained 5x5 max-pools whose outputs are concatenated, which covers 5/9/13
  receptive fields at the price of one small pool.
* Neck: a top-down FPN path (Lin et al. 2017, https://arxiv.org/abs/1612.03144) followed
  by a bottom-up PAN path (Liu et al. 2018, https://arxiv.org/abs/1803.01534).
* Head: per level a 3x3 ConvBNAct and a 1x1 prediction convolution.

Output layout: ``model(images)`` with ``images`` float ``[B, 3, S, S]`` (S divisible by
32) returns a list of three raw (pre-activation) tensors, one per stride 8, 16, 32,
each ``[B, 1, S/stride, S/stride, 5 + num_classes]``. The dimension of size 1 is the
number of predictions per cell (one: a single square prior per level, see
``assign.py``). The last dimension holds ``tx, ty, tw, th, objectness, class...``;
``loss.decode_boxes`` turns ``tx..th`` into boxes.

Sizes scale channels by a width multiplier and the number of bottlenecks per CSP
stage by a depth multiplier, so ``n`` trains in seconds on a CPU and ``m`` loads a GPU
like a real job.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

STRIDES: tuple[int, int, int] = (8, 16, 32)

# Prior probability used to initialise the objectness bias, so that the first steps are
# not spent learning that almost every cell is background (Lin et al. 2017, "Focal Loss
# for Dense Object Detection", section 3.3, https://arxiv.org/abs/1708.02002).
OBJECTNESS_PRIOR = 0.01


@dataclass(frozen=True)
class SizeSpec:
    """Width and depth multipliers of one model size."""

    width: float
    depth: float


# Base channels per backbone level (/2, /4, /8, /16, /32) and base bottleneck counts per
# CSP stage (/4, /8, /16, /32, and each neck stage uses the last one's base count).
BASE_CHANNELS: tuple[int, ...] = (64, 128, 256, 512, 1024)
BASE_DEPTHS: tuple[int, ...] = (3, 6, 6, 3)

SIZES: dict[str, SizeSpec] = {
    "n": SizeSpec(width=0.25, depth=0.33),
    "s": SizeSpec(width=0.50, depth=0.33),
    "m": SizeSpec(width=0.75, depth=0.67),
}


def _channels(base: int, width: float) -> int:
    """Scaled channel count, rounded up to a multiple of 8 (friendly to tensor cores)."""
    return max(8, int(math.ceil(base * width / 8) * 8))


def _depth(base: int, depth: float) -> int:
    """Scaled number of bottlenecks; at least one so every stage has residual blocks."""
    return max(1, round(base * depth))


class ConvBNAct(nn.Module):
    """Conv2d -> BatchNorm2d -> SiLU; 'same' padding for odd kernels."""

    def __init__(self, c_in: int, c_out: int, k: int = 1, s: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, k, s, padding=k // 2, bias=False)
        self.bn = nn.BatchNorm2d(c_out, eps=1e-3, momentum=0.03)
        self.act = nn.SiLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    """1x1 then 3x3 convolution with an optional residual connection."""

    def __init__(self, c: int, shortcut: bool = True) -> None:
        super().__init__()
        self.cv1 = ConvBNAct(c, c, 1)
        self.cv2 = ConvBNAct(c, c, 3)
        self.shortcut = shortcut

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.cv2(self.cv1(x))
        return x + y if self.shortcut else y


class CSPStage(nn.Module):
    """Cross Stage Partial stage: half the channels go through the bottlenecks.

    The bypass half keeps gradients short and halves the bottlenecks' cost, which is
    the point of CSPNet. Residuals are used in the backbone, not in the neck, where
    the stage fuses two different feature maps rather than refining one.
    """

    def __init__(self, c_in: int, c_out: int, n: int, shortcut: bool = True) -> None:
        super().__init__()
        hidden = c_out // 2
        self.split = ConvBNAct(c_in, 2 * hidden, 1)
        self.blocks = nn.Sequential(*(Bottleneck(hidden, shortcut) for _ in range(n)))
        self.fuse = ConvBNAct(2 * hidden, c_out, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.split(x).chunk(2, dim=1)
        return self.fuse(torch.cat((self.blocks(a), b), dim=1))


class SPPF(nn.Module):
    """Spatial pyramid pooling with three chained 5x5 max-pools."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        hidden = c_in // 2
        self.reduce = ConvBNAct(c_in, hidden, 1)
        self.pool = nn.MaxPool2d(kernel_size=5, stride=1, padding=2)
        self.fuse = ConvBNAct(hidden * 4, c_out, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.reduce(x)
        p1 = self.pool(x)
        p2 = self.pool(p1)
        p3 = self.pool(p2)
        return self.fuse(torch.cat((x, p1, p2, p3), dim=1))


def _down_stage(c_in: int, c_out: int, n: int) -> nn.Sequential:
    """A stride-2 3x3 ConvBNAct that halves the resolution, then a residual CSP stage."""
    return nn.Sequential(ConvBNAct(c_in, c_out, 3, 2), CSPStage(c_out, c_out, n))


class Backbone(nn.Module):
    """Stem and four downsampling stages; returns the /8, /16 and /32 feature maps."""

    def __init__(self, ch: tuple[int, ...], depths: tuple[int, ...]) -> None:
        super().__init__()
        self.stem = ConvBNAct(3, ch[0], 3, 2)  # /2
        self.stage2 = _down_stage(ch[0], ch[1], depths[0])  # /4
        self.stage3 = _down_stage(ch[1], ch[2], depths[1])  # /8
        self.stage4 = _down_stage(ch[2], ch[3], depths[2])  # /16
        self.stage5 = nn.Sequential(_down_stage(ch[3], ch[4], depths[3]), SPPF(ch[4], ch[4]))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        c3 = self.stage3(self.stage2(self.stem(x)))
        c4 = self.stage4(c3)
        c5 = self.stage5(c4)
        return c3, c4, c5


class PANNeck(nn.Module):
    """FPN top-down then PAN bottom-up: each output level sees all three scales."""

    def __init__(self, ch: tuple[int, ...], n: int) -> None:
        super().__init__()
        c3, c4, c5 = ch[2], ch[3], ch[4]
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.lat5 = ConvBNAct(c5, c4, 1)
        self.top4 = CSPStage(c4 + c4, c4, n, shortcut=False)
        self.lat4 = ConvBNAct(c4, c3, 1)
        self.out3 = CSPStage(c3 + c3, c3, n, shortcut=False)
        self.down3 = ConvBNAct(c3, c3, 3, 2)
        self.out4 = CSPStage(c3 + c3, c4, n, shortcut=False)
        self.down4 = ConvBNAct(c4, c4, 3, 2)
        self.out5 = CSPStage(c4 + c4, c5, n, shortcut=False)

    def forward(
        self, feats: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        c3, c4, c5 = feats
        l5 = self.lat5(c5)
        t4 = self.top4(torch.cat((self.up(l5), c4), dim=1))
        l4 = self.lat4(t4)
        p3 = self.out3(torch.cat((self.up(l4), c3), dim=1))
        p4 = self.out4(torch.cat((self.down3(p3), l4), dim=1))
        p5 = self.out5(torch.cat((self.down4(p4), l5), dim=1))
        return p3, p4, p5


class DetectHead(nn.Module):
    """One 3x3 ConvBNAct and one 1x1 prediction conv per level; reshapes to the layout.

    Every level's stem narrows to the finest level's width: a few outputs per cell do
    not need the coarse level's wide features, and a full-width 3x3 there would hold a
    quarter of the parameters of the small sizes.
    """

    def __init__(self, ch_in: tuple[int, int, int], num_classes: int) -> None:
        super().__init__()
        self.num_outputs = 5 + num_classes
        hidden = ch_in[0]
        self.stems = nn.ModuleList(ConvBNAct(c, hidden, 3) for c in ch_in)
        self.preds = nn.ModuleList(nn.Conv2d(hidden, self.num_outputs, 1) for _ in ch_in)
        self._init_biases()

    def _init_biases(self) -> None:
        """Start objectness at OBJECTNESS_PRIOR and boxes/classes at zero logits."""
        obj_bias = math.log(OBJECTNESS_PRIOR / (1 - OBJECTNESS_PRIOR))
        with torch.no_grad():
            for conv in self.preds:
                assert conv.bias is not None
                conv.bias.zero_()
                conv.bias[4] = obj_bias

    def forward(self, feats: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
        outs = []
        for x, stem, pred in zip(feats, self.stems, self.preds):
            y = pred(stem(x))
            b, _, h, w = y.shape
            outs.append(y.view(b, 1, self.num_outputs, h, w).permute(0, 1, 3, 4, 2))
        return outs


class YOLO(nn.Module):
    """Backbone + PAN neck + head; ``strides``, ``num_classes`` and ``size`` describe it."""

    strides: tuple[int, int, int] = STRIDES

    def __init__(self, size: str = "n", num_classes: int = 4) -> None:
        super().__init__()
        if size not in SIZES:
            raise ValueError(f"unknown model size {size!r}; expected one of {sorted(SIZES)}")
        if num_classes < 1:
            raise ValueError(f"num_classes must be at least 1, got {num_classes}")
        spec = SIZES[size]
        ch = tuple(_channels(c, spec.width) for c in BASE_CHANNELS)
        depths = tuple(_depth(d, spec.depth) for d in BASE_DEPTHS)
        self.size = size
        self.num_classes = num_classes
        self.backbone = Backbone(ch, depths)
        self.neck = PANNeck(ch, depths[-1])
        self.head = DetectHead((ch[2], ch[3], ch[4]), num_classes)

    def forward(self, images: torch.Tensor) -> list[torch.Tensor]:
        if images.dim() != 4 or images.shape[-1] % 32 or images.shape[-2] % 32:
            raise ValueError(
                f"expected images [B, 3, S, S] with S divisible by 32, got {tuple(images.shape)}"
            )
        return self.head(self.neck(self.backbone(images)))


def build_model(size: str = "n", num_classes: int = 4) -> nn.Module:
    """The smoke job's detector: ``n`` (CPU-sized), ``s`` or ``m`` (GPU-sized)."""
    return YOLO(size, num_classes)


def count_parameters(model: nn.Module) -> int:
    """Number of trainable scalars, reported beside step times."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def build_optimizer(model: nn.Module, lr: float = 2e-3) -> torch.optim.Optimizer:
    """AdamW, with weight decay on convolution weights only (not BatchNorm or biases).

    Adam's per-parameter step sizes make the loss fall clearly within ~30 steps at one
    learning rate for every size, where SGD needs tuning, so the smoke job's "loss
    fell" criterion measures the machine, not the schedule. Measured on this CPU at
    128 px, 8 images, 30 steps, mean of the last 3 losses against the first 3: one
    repeated batch -64% (n), -64% (s), -54% (m); 2 ranks of size n under DDP: -51%
    with one batch per rank, -32% with two or four (SGD, lr 0.01: -20 to -30% on one
    batch). The elementwise update is deterministic, so replicas fed the same
    all-reduced gradients stay bit-identical.
    """
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.dim() > 1 else no_decay).append(p)
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": 5e-4}, {"params": no_decay, "weight_decay": 0.0}],
        lr=lr,
    )


_INT_VIEW = {
    torch.float64: torch.int64,
    torch.float32: torch.int32,
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
}


def _tensor_fingerprint(t: torch.Tensor) -> torch.Tensor:
    """An int64 hash of a tensor's exact bits: sum of bits times odd position weights.

    Reinterpreting floats as integers (no conversion) means two tensors match only if
    every bit matches, and -0.0 vs 0.0 or two NaN payloads still differ. Weighting each
    element by an odd number (a bijection modulo 2**64) makes swapped elements change
    the sum; int64 arithmetic wraps around deterministically on CPU and CUDA.
    """
    flat = t.detach().contiguous().reshape(-1)
    if flat.dtype in _INT_VIEW:
        bits = flat.view(_INT_VIEW[flat.dtype]).to(torch.int64)
    else:  # integer and bool buffers (e.g. BatchNorm's num_batches_tracked) are exact already
        bits = flat.to(torch.int64)
    weights = torch.arange(bits.numel(), device=bits.device, dtype=torch.int64) * 2 + 1
    return (bits * weights).sum()


def parameter_fingerprint(model: nn.Module, include_buffers: bool = False) -> torch.Tensor:
    """One int64 per parameter (then per buffer if asked), on the parameters' device.

    Ranks all-gather this vector and compare it exactly: equal vectors mean the model
    replicas are bit-identical (up to a 2**-64 chance of collision per tensor), which is
    what DDP promises after every optimizer step. Parameters are taken in
    ``named_parameters`` order, identical on every rank. Pass a model unwrapped or
    wrapped (DDP/DataParallel); the wrapper owns the same tensors.

    Buffers are left out by default: DDP broadcasts rank 0's buffers at the start of
    each forward, but the BatchNorm running statistics each rank then updates from its
    own shard differ after the last forward (unless SyncBatchNorm is used), so they are
    not a sync criterion.
    """
    tensors = [p for _, p in model.named_parameters()]
    if include_buffers:
        tensors += [b for _, b in model.named_buffers()]
    if not tensors:
        return torch.zeros(0, dtype=torch.int64)
    return torch.stack([_tensor_fingerprint(t) for t in tensors])


def parameter_checksum(model: nn.Module) -> float:
    """Sum of every parameter in float64: a human-readable value for event logs.

    Not a bit-identity test (different bits can sum alike); use
    ``parameter_fingerprint`` for the verdict.
    """
    with torch.no_grad():
        return float(sum(p.detach().double().sum().item() for p in model.parameters()))
