"""A stand-in for the doctor in tests/process: start a tagged child, stop it on a signal.

``doctor.py OUT KIND GRACE``: starts ``family.py OUT KIND`` through ``ProcessTree``, writes
its tag to OUT/tag and "ready" to OUT/doctor, and waits inside ``stop_signals_raise``; the
signal it is sent ends the wait (``Interrupted``) and the ``finally`` stops the child with
``GRACE`` seconds of grace. Exits with the status ``Interrupted`` carries.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from ddp_doctor.process.signals import stop_signals_raise
from ddp_doctor.process.tag import new_tag
from ddp_doctor.process.tree import ProcessTree

OUT, KIND, GRACE = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
FAMILY = str(Path(__file__).with_name("family.py"))

tag = new_tag("ddp-doctor-test")
(OUT / "tag").write_text(tag)
with stop_signals_raise() as request:
    tree = ProcessTree.start([sys.executable, FAMILY, str(OUT), KIND], tag)
    try:
        (OUT / "doctor").write_text("ready\n")
        while True:
            time.sleep(0.1)
    finally:
        left = tree.stop(GRACE, request)
        with open(OUT / "doctor", "a", encoding="utf-8") as fh:
            fh.write(f"stopped, {len(left)} left\n")
