"""SIGINT, SIGTERM and SIGHUP to the doctor while a run is going: stop the run cleanly.

The first such signal raises ``Interrupted`` (a SystemExit with status 128 + signal), so
the callers' ``finally`` blocks run and stop the run; the signal is then forwarded to the
run (``StopRequest.forward``): a Ctrl-C reaches the job as the SIGINT it would have got
without the doctor. A second signal does not interrupt that cleanup: it escalates it
(``StopRequest.hurry``), and ``ProcessTree.stop`` cuts the grace period short and sends
SIGKILL at once. A signal that arrives while a stop is already under way (a deadline
fired) escalates the same way, and is raised as ``Interrupted`` once the context ends, so
the doctor still exits with the status of the signal it was sent.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP", "SIGINT")
                     if hasattr(signal, n))


class Interrupted(SystemExit):
    """The doctor got SIGTERM/SIGHUP/SIGINT during a run; exit status 128 + signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum


@dataclass
class StopRequest:
    """What the doctor was told while a run went on: the first stop signal, and whether
    a further one asked to hurry (no more grace: SIGKILL)."""

    signum: int | None = None
    hurry: threading.Event = field(default_factory=threading.Event)
    stopping: bool = False  # a stop is under way: a signal now escalates it
    raised: bool = False

    @property
    def forward(self) -> int:
        """The signal the run gets first: the one the doctor got, else SIGTERM."""
        return self.signum if self.signum is not None else signal.SIGTERM

    def received(self, signum: int) -> None:
        """Record a stop signal; raise Interrupted for the first one outside a stop."""
        if self.signum is None:
            self.signum = signum
            if not self.stopping:
                self.raised = True
                raise Interrupted(signum)
        self.hurry.set()


@contextmanager
def stop_signals_raise() -> Iterator[StopRequest]:
    """While inside, the first stop signal raises ``Interrupted`` and later ones hurry the
    stop; the previous handlers come back on the way out.

    Outside the main thread no handler can be installed: the request then never fires.
    """
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return

    def handler(signum: int, _frame: Any) -> None:
        request.received(signum)

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield request
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
    if request.signum is not None and not request.raised:
        request.raised = True
        raise Interrupted(request.signum)
