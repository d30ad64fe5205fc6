"""A callback that Ultralytics carries into every DDP rank (pickled by module and name).

Kept in its own small module beside the driver, importable by the ranks through
PYTHONPATH, because a function of the driver script (``__main__``) cannot be unpickled in
the rank processes Ultralytics starts from its generated file.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

RANKS_ENV = "DDP_DOCTOR_ULTRA_RANKS"


def rank_started(trainer: Any) -> None:
    """Leave ``rank<RANK>`` in the marker folder: this process began training."""
    folder = os.environ.get(RANKS_ENV)
    if folder:
        rank = os.environ.get("RANK", "0")
        Path(folder, f"rank{rank}").write_text(f"{time.time()}\n")
