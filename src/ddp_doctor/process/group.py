"""End one process group: SIGTERM (or another first signal), a grace period, SIGKILL.

For a child started in a session of its own whose descendants stay in its group (a probe
under a deadline: ``facts.seam.run_with_deadline``). A run whose descendants start
sessions of their own (torchrun's ranks) needs ``ProcessTree.stop``, which also signals
the processes it remembered and those carrying the run's tag.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from typing import Any


def signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to the group; False when the group is gone (or not ours)."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def reap_group(proc: subprocess.Popen[Any], grace_s: float = 2.0,
               first: int = signal.SIGTERM, kill_wait_s: float = 5.0) -> None:
    """``first`` to the child's group, then SIGKILL to what is left after ``grace_s``.

    The child leads its group (``start_new_session``); when it has exited its group may
    still hold members, which are killed too.
    """
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        return
    for sig, wait in ((first, grace_s), (signal.SIGKILL, kill_wait_s)):
        if not signal_group(pgid, sig):
            return
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        # The leader is gone; make sure no member of its group lingers.
        signal_group(pgid, signal.SIGKILL)
        return
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=0)
