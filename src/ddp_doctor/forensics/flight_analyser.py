"""Torch's own Flight Recorder analyser, run on the ranks' pickled dumps, as a second opinion.

``python -m torch.distributed.flight_recorder.fr_trace DIR --prefix fr-trace-rank`` merges
every rank's dump and reports, in its own words, the first collective the ranks did not
call alike (missing ranks, a mismatched op, size or dtype). It needs torch and reads the
pickles with ``pickle.load``, so it runs in a child process of the job's own interpreter
(the one that wrote the dumps, in the job's own folder), with a deadline, and only on the
dumps the job just wrote, never on a file from a ticket. Its output is kept as evidence
beside ddp-doctor's own reading (``flight_verdict``), which does not depend on it.

It is not run on dumps whose process groups have no name: torch 2.13's gloo recorder
writes ``pg_config`` as ``{"": {"name": "", ...}}``, and the analyser then fails with
``KeyError: ('0', 1)`` (tried on the planted barrier hang's dumps), after a torch import
that would only delay the report. When it fails anyway, its words are not shown.

Source: torch 2.13's torch/distributed/flight_recorder/fr_trace.py and
components/loader.py (``read_dir``: files named ``<prefix><rank>``).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from ddp_doctor.forensics.flight import read_dump

PREFIX = "fr-trace-rank"  # ddp_doctor.train_smoke.flight writes fr-trace-rank<R>
ANALYSER_TIMEOUT_S = 60.0  # importing torch on a loaded machine, then a few dumps
_KEPT_LINES = 12
_NOISE = ("UserWarning", "_conversion_method_template", "Failed to initialize NumPy")


def _named_groups(path: Path) -> bool:
    """Every process group of the dump has a name (what the analyser keys groups by)."""
    try:
        record = read_dump(path.name, path.read_bytes())
    except OSError:
        return False
    return record.why is None and bool(record.groups) and all(record.groups)


def torch_analysis(folder: Path, python: str, timeout: float = ANALYSER_TIMEOUT_S
                   ) -> str | None:
    """What torch's analyser says of the pickled dumps in ``folder`` (its last lines), or
    None: no pickled dumps, groups it cannot key, or it failed or ran out of time."""
    dumps = sorted(folder.glob(f"{PREFIX}[0-9]*"))
    if not dumps or not all(_named_groups(d) for d in dumps):
        return None
    command = [python, "-m", "torch.distributed.flight_recorder.fr_trace", str(folder),
               "--prefix", PREFIX]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              check=False, stdin=subprocess.DEVNULL)
    except (subprocess.TimeoutExpired, OSError):
        return None
    lines = [line.rstrip() for line in (done.stdout + "\n" + done.stderr).splitlines()
             if line.strip() and not any(noise in line for noise in _NOISE)]
    if done.returncode != 0:
        return None
    return "\n".join(lines[-_KEPT_LINES:]) if lines else "torch's analyser found nothing to say"
