"""Which trainer wrote a log, so that a fix can be given in that trainer's own options.

The same remedy is typed differently per trainer: a smaller batch is ``batch=8`` for
``yolo train`` but ``--batch-size 8`` for YOLOv5's ``train.py``; the GPUs are
``device=0,1`` or ``--device 0,1``; DataLoader workers ``workers=2`` or ``--workers 2``.
Only what the trainers themselves print counts, strongest first:

- their start-up banner (``select_device`` in ultralytics/utils/torch_utils.py:
  "Ultralytics 8.3.74 🚀 Python-3.12.9 torch-2.6.0+cu124 CUDA:0 (...)"; YOLOv5's
  utils/torch_utils.py: "YOLOv5 🚀 v6.2-0-gd3ea0df Python-3.9.0 torch-1.13.0+cu116 ...",
  printed as "YOLOR 🚀 ..." by YOLOR/YOLOv7 and "YOLO 🚀 v0.1-..." by YOLOv9);
- their argument echo (Ultralytics' "engine/trainer: task=detect, mode=train, ...",
  "yolo/engine/trainer: ..." before 8.1; YOLOv5's ``print_args`` "train: weights=...,");
- their own messages ("Invalid CUDA 'device=0,1' requested" from Ultralytics, "Invalid CUDA
  '--device 0,1' requested" from YOLOv5), the command line (``yolo train ...``,
  ``yolo task=detect mode=train``; ``train.py ... --img 640``) and traceback paths into the
  ``ultralytics`` package or a YOLO repository's ``train.py``; YOLOv5's validation header
  ("mAP@.5:.95") and its weight transfer line ("Transferred 498/506 items from yolov5m.pt",
  where Ultralytics says "from pretrained weights").

Sources: https://docs.ultralytics.com/usage/cfg/ (``key=value`` options) and
https://docs.ultralytics.com/yolov5/tutorials/multi_gpu_training/ (YOLOv5's argparse
options), ultralytics/engine/trainer.py and yolov5 train.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ddp_doctor.logrules.rule import ULTRALYTICS, YOLOV5

_STRONG: tuple[tuple[str, re.Pattern[str]], ...] = (
    (ULTRALYTICS, re.compile(r"^\s*Ultralytics\s+(?:YOLOv)?\d+\.\d+\S*\s.*\b(?:Python|torch)-",
                             re.MULTILINE)),
    (ULTRALYTICS, re.compile(r"(?:^|\s)(?:yolo/)?engine/trainer:\s+\w+=", re.MULTILINE)),
    (YOLOV5, re.compile(r"^\s*(?:YOLOv5|YOLOR|YOLO)\s+(?:🚀\s+)?v?\d[\w.\-]*\s+"
                        r"(?:Python-\S+\s+)?torch[- ]\d", re.MULTILINE)),
    (YOLOV5, re.compile(r"^\s*train: weights=", re.MULTILINE)),
)
_WEAK: tuple[tuple[str, re.Pattern[str]], ...] = (
    (ULTRALYTICS, re.compile(r"Invalid CUDA 'device=|\byolo\s+(?:(?:detect|segment|classify"
                             r"|pose|obb)\s+)?(?:train|val)\b|\byolo\s+task=\w+\s+mode="
                             r"|[/\\]ultralytics[/\\](?:engine|yolo|utils|data|models|nn|cfg)"
                             r"[/\\]|items from pretrained weights")),
    (YOLOV5, re.compile(r"Invalid CUDA '--device|\btrain(?:_dual|_aux)?\.py\b[^\n]*"
                        r"--img(?:sz|-size)?\b|(?:yolo\w*|yolor)[^/\\\s\"']*[/\\]train"
                        r"(?:_dual|_aux)?\.py|mAP@\.5:\.95|Transferred \d+/\d+ items from "
                        r"\S+\.pt\b", re.IGNORECASE)),
)


def which_trainer(texts: Iterable[str]) -> str | None:
    """The trainer (``ULTRALYTICS`` or ``YOLOV5``) whose own output is in ``texts``.

    A banner or argument echo decides; otherwise the weaker signs (messages, commands,
    paths) do when they point at one trainer only. None when nothing, or both, show.
    """
    pieces = list(texts)
    for marks in (_STRONG, _WEAK):
        found = {trainer for trainer, pattern in marks
                 if any(pattern.search(text) for text in pieces)}
        if len(found) == 1:
            return found.pop()
        if found:
            return None
    return None
