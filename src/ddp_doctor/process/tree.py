"""One child of the doctor and everything it starts, found three ways and ended together.

The child runs in a session of its own, but launchers start their workers in sessions of
their own too (torch.distributed.elastic's SubprocessHandler uses ``start_new_session``),
so ending one process group is not enough. Every process of the run is found three ways:
the child's process group, its descendants (remembered while they are alive, because a
SIGKILLed launcher orphans them), and the run's tag in their environment (which also finds
a process that double-forked away before it was ever remembered).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import psutil

from ddp_doctor.process.group import signal_group
from ddp_doctor.process.signals import StopRequest
from ddp_doctor.process.tag import TAG_VARIABLE, is_live, survivors

GRACE_S = 3.0  # between the first signal and SIGKILL: time for ranks to flush and exit
GIVE_UP_S = 10.0  # SIGKILL again and again for this long; longer is a process in D state
_STEP_S = 0.05


class ProcessTree:
    """A started child (``proc``), the run's ``tag``, and every descendant seen so far."""

    def __init__(self, proc: subprocess.Popen[Any], tag: str) -> None:
        self.proc, self.tag = proc, tag
        self.known: dict[int, psutil.Process] = {}
        self.remember()

    @classmethod
    def start(cls, argv: Sequence[str], tag: str, env: Mapping[str, str] | None = None,
              **popen: Any) -> ProcessTree:
        """Start ``argv`` in a session of its own with ``tag`` in its environment.

        ``popen`` goes to ``subprocess.Popen`` (stdin, stdout, stderr, cwd); OSError
        when the command cannot be started.
        """
        environ = dict(os.environ if env is None else env)
        environ[TAG_VARIABLE] = tag
        proc: subprocess.Popen[Any] = subprocess.Popen(
            list(argv), env=environ, start_new_session=True, **popen)
        return cls(proc, tag)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def remember(self) -> None:
        """Note the child and its descendants now, for the day their parent is gone."""
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(self.proc.pid)
            for p in [root, *root.children(recursive=True)]:
                self.known.setdefault(p.pid, p)

    def alive(self) -> list[psutil.Process]:
        """Every live process of the run: remembered or tagged, running, not a zombie."""
        procs = {p.pid: p for p in self.known.values()}
        procs.update({p.pid: p for p in survivors(self.tag)})
        procs.pop(os.getpid(), None)
        return [p for p in procs.values() if is_live(p)]

    def _signal(self, procs: Iterable[psutil.Process], sig: int) -> None:
        """``sig`` to the child's group (it leads its session), and to each process of the
        run outside that group; once each, so a forwarded SIGINT is one KeyboardInterrupt."""
        grouped = signal_group(self.proc.pid, sig)
        for p in procs:
            with contextlib.suppress(psutil.Error, ProcessLookupError, PermissionError):
                if grouped and os.getpgid(p.pid) == self.proc.pid:
                    continue
                p.send_signal(sig)

    def stop(self, grace_s: float = GRACE_S, request: StopRequest | None = None
             ) -> list[psutil.Process]:
        """End everything of the run; returns what is still alive (nothing, unless a
        process could not be killed within GIVE_UP_S).

        The first signal is the one the doctor was sent (``request``), else SIGTERM;
        after ``grace_s``, or at once when ``request`` is told to hurry (a second
        Ctrl-C), SIGKILL until nothing is left.
        """
        if request is not None:
            request.stopping = True
        first = request.forward if request is not None else signal.SIGTERM
        self.remember()
        live = self.alive()
        if live or self.proc.poll() is None:
            self._signal(live, first)
            self._wait(grace_s, request)
        deadline = time.monotonic() + GIVE_UP_S
        while time.monotonic() < deadline:
            self.remember()
            live = self.alive()
            if not live and self.proc.poll() is not None:
                break
            self._signal(live, signal.SIGKILL)
            self._wait(0.5, None)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=1.0)
        return self.alive()

    def _wait(self, seconds: float, request: StopRequest | None) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if request is not None and request.hurry.is_set():
                return
            self.proc.poll()
            if self.proc.returncode is not None and not self.alive():
                return
            time.sleep(_STEP_S)
