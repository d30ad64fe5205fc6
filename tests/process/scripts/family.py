"""A child for tests/process: makes the family a test asks for, then waits to be stopped.

``family.py OUT KIND``: writes one line per process to OUT/pids ("role pid") and, for each
stop signal a process gets, a line to OUT/signals ("role SIGNAME"). KIND:

- ``grandchildren``: starts two grandchildren, each in a session of its own (as torchrun
  starts its ranks), that sleep;
- ``ignores-term``: ignores SIGTERM (and SIGINT), so only SIGKILL ends it;
- ``double-fork``: forks twice and exits; the grandchild, re-parented, sleeps on;
- ``records``: notes SIGINT/SIGTERM and goes on (a second one is needed to end it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(sys.argv[1])
KIND = sys.argv[2]
ROLE = sys.argv[3] if len(sys.argv) > 3 else "child"


def note(name: str, text: str) -> None:
    with open(OUT / name, "a", encoding="utf-8") as fh:
        fh.write(text + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def record(signum: int, _frame: object) -> None:
    note("signals", f"{ROLE} {signal.Signals(signum).name}")


def sleep_forever() -> None:
    while True:
        time.sleep(0.2)


if KIND == "sleep":
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    note("pids", f"{ROLE} {os.getpid()}")
    sleep_forever()
elif KIND == "grandchildren":
    for i in range(2):
        subprocess.Popen([sys.executable, __file__, str(OUT), "sleep", f"grandchild{i}"],
                         start_new_session=True)
    note("pids", f"{ROLE} {os.getpid()}")
    sleep_forever()
elif KIND == "ignores-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    note("pids", f"{ROLE} {os.getpid()}")
    sleep_forever()
elif KIND == "double-fork":
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            note("pids", f"orphan {os.getpid()}")
            sleep_forever()
        os._exit(0)
    os.wait()
    note("pids", f"{ROLE} {os.getpid()}")
elif KIND == "records":
    signal.signal(signal.SIGINT, record)
    signal.signal(signal.SIGTERM, record)
    note("pids", f"{ROLE} {os.getpid()}")
    sleep_forever()
