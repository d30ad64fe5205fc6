"""Where ddp-doctor writes its own files: whole or not at all, and never over a device.

Reports, snapshots and bundles are written to a temporary name and renamed, so a full
disk or Ctrl-C leaves no partial file. A target that is a device or a FIFO (``--json
/dev/null``, ``/dev/stdout``) must be written into instead: renaming a file over
``/dev/null`` as root turns the system's null device into a plain file.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


def is_special_file(path: Path) -> bool:
    """Whether ``path`` exists and is neither a regular file nor a directory."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)
