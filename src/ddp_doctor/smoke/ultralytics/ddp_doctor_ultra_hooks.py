"""What Ultralytics carries into every DDP rank: a trainer class that marks its rank.

On more than one GPU Ultralytics does not train in the process that called
``model.train()``: it writes a small script (``ultralytics/utils/dist.py``,
``generate_ddp_file``) that imports the trainer's class *by module and name*, builds it
from the training arguments alone and trains, and starts that script once per GPU with
``torch.distributed.run``. Callbacks added to the model or the trainer do not travel (the
script builds its trainer without ``_callbacks``), so a callback could only ever mark the
first process. A trainer *class* does travel: this module is on the ranks' PYTHONPATH, the
driver passes ``trainer=MarkedDetectionTrainer``, and each rank's trainer adds the marking
callback to itself when it is built.

The class subclasses Ultralytics' own DetectionTrainer, so it is made on first use (a
module ``__getattr__``): importing this module needs no Ultralytics, and it is imported
only where Ultralytics is.
"""

from __future__ import annotations

import importlib
import os
import time
from pathlib import Path
from typing import Any

RANKS_ENV = "DDP_DOCTOR_ULTRA_RANKS"
TRAINER_NAME = "MarkedDetectionTrainer"
_made: dict[str, type] = {}


def rank_started(trainer: Any) -> None:
    """Leave ``rank<RANK>`` in the marker folder: this process began training."""
    folder = os.environ.get(RANKS_ENV)
    if folder:
        rank = os.environ.get("RANK", "0")
        Path(folder, f"rank{rank}").write_text(f"{time.time()}\n")


def _marked_trainer() -> type:
    # By name: the user's package, unknown to the doctor's own type checking.
    detect = importlib.import_module("ultralytics.models.yolo.detect")
    base: type = detect.DetectionTrainer

    class MarkedDetectionTrainer(base):  # type: ignore[misc]
        """Ultralytics' detection trainer, marking the rank it trains on."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.add_callback("on_pretrain_routine_start", rank_started)

    # The DDP script imports the class by these two names.
    MarkedDetectionTrainer.__module__ = __name__
    MarkedDetectionTrainer.__qualname__ = TRAINER_NAME
    return MarkedDetectionTrainer


def __getattr__(name: str) -> Any:
    if name != TRAINER_NAME:
        raise AttributeError(name)
    if name not in _made:
        _made[name] = _marked_trainer()
    return _made[name]
