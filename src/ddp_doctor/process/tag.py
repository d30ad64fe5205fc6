"""The run's tag: an environment variable every process of one run inherits.

The environment, not the command line: the user's command (``run``) is never changed,
while the environment is inherited by every descendant, including one that double-forked
away from its parent and was re-parented to init (or a subreaper), where walking the tree
down from the child no longer reaches it.
"""

from __future__ import annotations

import contextlib
import os
import uuid

import psutil

TAG_VARIABLE = "DDP_DOCTOR_RUN_TAG"
"""Set in a child's environment to a value unique to the run; every process whose
environment carries that value belongs to the run."""


def new_tag(prefix: str = "ddp-doctor") -> str:
    """A tag no other run has."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def environ_of(proc: psutil.Process) -> dict[str, str]:
    """A process's environment as it started; empty when it cannot be read (gone, another
    user's)."""
    try:
        return dict(proc.environ())
    except (psutil.Error, OSError):
        return {}


def tagged(tag: str) -> list[psutil.Process]:
    """Every process (but this one) whose environment carries ``tag``, zombies included."""
    me = os.getpid()
    found: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        if environ_of(proc).get(TAG_VARIABLE) == tag:
            found[proc.pid] = proc
    return list(found.values())


def is_live(proc: psutil.Process) -> bool:
    """Running and not a zombie (a zombie has ended; only its exit status is left)."""
    with contextlib.suppress(psutil.Error):
        return bool(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE)
    return False


def survivors(tag: str) -> list[psutil.Process]:
    """The processes of the run tagged ``tag`` that are still alive: after a stop, none.

    The proof the callers give (``run``'s "every process it started had ended") and the
    one the tests assert.
    """
    return [p for p in tagged(tag) if is_live(p)]
