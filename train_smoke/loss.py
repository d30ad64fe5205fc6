"""Detection loss: CIoU for boxes, BCE for objectness and classes.

* **Box**: ``1 - CIoU`` over the positive cells chosen by ``assign.assign_targets``.
  Complete IoU adds to IoU a centre-distance penalty and an aspect-ratio consistency
  term, so boxes that do not overlap yet still get a useful gradient (Zheng et al. 2020,
  "Distance-IoU Loss: Faster and Better Learning for Bounding Box Regression", AAAI,
  https://arxiv.org/abs/1911.08287, equations 10-11).
* **Objectness**: binary cross-entropy with logits on every cell of every level; the
  target of a positive cell is the (detached, clipped at 0) CIoU of its predicted box,
  so the objectness score learns localisation quality, and 0 elsewhere. (This term
  therefore rises while boxes improve; the total still falls clearly.) Averaged per
  level, then over levels, so the coarse level's few cells weigh as much as the fine
  level's many.
* **Class**: binary cross-entropy with logits against one-hot targets at positive cells
  (independent sigmoids rather than a softmax, as in YOLOv3, Redmon & Farhadi 2018,
  https://arxiv.org/abs/1804.02767).

All arithmetic is done in float32 even when the predictions come out of
``torch.autocast`` in float16/bfloat16: ``atan``, squares of small differences and the
IoU division lose too much precision in half types. Every prediction tensor takes part
in the objectness loss on every step, so under DDP every parameter receives a gradient
(no ``find_unused_parameters`` needed), also in batches without any box.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Union

import torch
from torch import nn
from torch.nn import functional as F

from .assign import PRIOR_CELLS, assign_targets


def decode_boxes(t: torch.Tensor) -> torch.Tensor:
    """Raw ``(tx, ty, tw, th)`` -> ``(x, y, w, h)`` in grid units, relative to the cell.

    Centres ``2*sigmoid - 0.5`` lie in (-0.5, 1.5) cells; sides ``(2*sigmoid)**2`` priors
    lie in (0, 4) priors. Bounded sides keep early steps (and AMP) free of the ``exp``
    overflow an unbounded parametrisation risks.
    """
    xy = t[..., 0:2].sigmoid() * 2 - 0.5
    wh = (t[..., 2:4].sigmoid() * 2) ** 2 * PRIOR_CELLS
    return torch.cat((xy, wh), dim=-1)


def complete_iou(pred: torch.Tensor, target: torch.Tensor, eps: float = 1e-7) -> torch.Tensor:
    """CIoU of paired ``(cx, cy, w, h)`` boxes ``[N, 4]`` (Zheng et al. 2020, eq. 10-11).

    ``CIoU = IoU - rho^2 / c^2 - alpha * v`` with ``rho`` the centre distance, ``c`` the
    diagonal of the smallest enclosing box, ``v`` the aspect-ratio discrepancy and
    ``alpha = v / (1 - IoU + v)`` treated as a constant weight (no gradient through it).
    """
    p1, p2 = pred[:, :2] - pred[:, 2:] / 2, pred[:, :2] + pred[:, 2:] / 2
    t1, t2 = target[:, :2] - target[:, 2:] / 2, target[:, :2] + target[:, 2:] / 2
    inter = (torch.minimum(p2, t2) - torch.maximum(p1, t1)).clamp(min=0).prod(dim=1)
    area_p = pred[:, 2] * pred[:, 3]
    area_t = target[:, 2] * target[:, 3]
    iou = inter / (area_p + area_t - inter + eps)
    enclose = torch.maximum(p2, t2) - torch.minimum(p1, t1)
    c2 = (enclose**2).sum(dim=1) + eps
    rho2 = ((pred[:, :2] - target[:, :2]) ** 2).sum(dim=1)
    angle_t = torch.atan(target[:, 2] / (target[:, 3] + eps))
    angle_p = torch.atan(pred[:, 2] / (pred[:, 3] + eps))
    v = (4 / math.pi**2) * (angle_t - angle_p) ** 2
    with torch.no_grad():
        alpha = v / (1 - iou + v + eps)
    return iou - rho2 / c2 - alpha * v


def _strides_of(model_or_strides: Union[nn.Module, Sequence[int]]) -> tuple[int, ...]:
    """Strides from a model (wrapped in DDP/DataParallel or not) or given directly."""
    if isinstance(model_or_strides, nn.Module):
        inner = getattr(model_or_strides, "module", model_or_strides)
        return tuple(int(s) for s in inner.strides)
    return tuple(int(s) for s in model_or_strides)


class DetectionLoss:
    """``loss_fn(preds, targets) -> (loss, {"box", "obj", "cls"})``.

    ``preds``: the model's list of ``[B, 1, H, W, 5 + num_classes]`` tensors.
    ``targets``: ``[T, 6]`` rows ``(image_index, class, cx, cy, w, h)``, normalised 0..1.
    ``loss`` is a float32 scalar (a per-batch mean, independent of the batch size, so
    DDP's gradient averaging keeps the single-process learning rate valid);
    ``parts`` holds the unweighted components as Python floats for the event log.
    """

    def __init__(
        self,
        model_or_strides: Union[nn.Module, Sequence[int]],
        num_classes: int,
        box_gain: float = 1.0,
        obj_gain: float = 2.0,
        cls_gain: float = 0.5,
    ) -> None:
        self.strides = _strides_of(model_or_strides)
        self.num_classes = num_classes
        self.box_gain = box_gain
        self.obj_gain = obj_gain
        self.cls_gain = cls_gain

    def __call__(
        self, preds: Sequence[torch.Tensor], targets: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, float]]:
        if len(preds) != len(self.strides):
            raise ValueError(f"expected {len(self.strides)} prediction levels, got {len(preds)}")
        device = preds[0].device
        targets = targets.to(device=device, dtype=torch.float32)
        grids = [(int(p.shape[2]), int(p.shape[3])) for p in preds]
        assigned = assign_targets(targets, self.strides, grids)

        zero = torch.zeros((), device=device)
        box_sum, cls_sum, obj_sum = zero, zero, zero
        levels_with_boxes = 0
        for p, a in zip(preds, assigned):
            p = p[:, 0].float()  # [B, H, W, 5 + C]
            obj_target = torch.zeros(p.shape[:3], device=device)
            if len(a):
                cells = p[a.image, a.gy, a.gx]  # [N, 5 + C]
                ciou = complete_iou(decode_boxes(cells[:, :4]), a.box)
                box_sum = box_sum + (1.0 - ciou).mean()
                onehot = F.one_hot(a.cls, self.num_classes).float()
                cls_sum = cls_sum + F.binary_cross_entropy_with_logits(cells[:, 5:], onehot)
                levels_with_boxes += 1
                # Several boxes may claim one cell: keep the best IoU, deterministically.
                flat = (a.image * p.shape[1] + a.gy) * p.shape[2] + a.gx
                obj_target.view(-1).scatter_reduce_(
                    0, flat, ciou.detach().clamp(min=0), reduce="amax", include_self=True
                )
            obj_sum = obj_sum + F.binary_cross_entropy_with_logits(p[..., 4], obj_target)

        n = max(levels_with_boxes, 1)
        box, obj, cls = box_sum / n, obj_sum / len(preds), cls_sum / n
        loss = self.box_gain * box + self.obj_gain * obj + self.cls_gain * cls
        values = torch.stack((box, obj, cls)).detach().cpu().tolist()
        return loss, dict(zip(("box", "obj", "cls"), values))
