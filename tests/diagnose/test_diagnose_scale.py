"""``diagnose`` reads a log as a stream: bounded memory, exact line numbers.

Why 128 MiB and not more: the bound (100 MiB) lies below the log's own size, so a reader that
held the whole log, or any fraction of it over about two fifths (the interpreter and the
package alone are ~50 MiB), fails; measured here, the peak is ~63 MiB for a 1, 64 or 128 MiB
log alike, so a bigger log proves nothing more and costs ~0.13 s of CPU per MiB (a 1 GiB
log took 137 s of the CI run). The log is generated on the fly and piped into the real CLI's
stdin, so nothing of that size touches the disk; peak memory is the child's own (wait4), not
this test's. The child is started by a small launcher process: a child forked straight from
pytest counts pytest's own pages (hundreds of MB late in a full run) in its peak RSS from
before its exec.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ddp_doctor.diagnose.synthetic import synthetic_log

LOG_BYTES = 128 << 20
PEAK_BOUND_MIB = 100  # below the log's 128 MiB: see the module's docstring
PLANTED = (
    "[rank3]: Traceback (most recent call last):\n"
    "[rank3]:   File \"train.py\", line 212, in <module>\n"
    "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 "
    "has a total capacity of 79.10 GiB of which 1.02 GiB is free.\n"
)


# Runs ARGV[2:] with this process's stdin, writes its peak RSS (KiB, from wait4) to ARGV[1]
# and exits with its exit code.
LAUNCHER = (
    "import os, subprocess, sys\n"
    "p = subprocess.Popen(sys.argv[2:])\n"
    "_, status, usage = os.wait4(p.pid, 0)\n"
    "open(sys.argv[1], 'w').write(str(usage.ru_maxrss))\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n"
)


@pytest.mark.slow
@pytest.mark.spawns
def test_a_128_mib_log_streams_through_stdin_in_under_100_mib(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    peak = tmp_path / "peak"
    child = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(peak), sys.executable, "-m", "ddp_doctor",
         "diagnose", "-", "--json", str(report)],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert child.stdin is not None
    planted_at: list[int] = []
    for block, starts in synthetic_log(LOG_BYTES, [PLANTED]):
        planted_at += starts
        child.stdin.write(block)
    child.stdin.close()
    _, status, _ = os.wait4(child.pid, 0)
    assert child.stderr is not None
    errors = child.stderr.read().decode()
    assert os.waitstatus_to_exitcode(status) == 1, errors
    peak_mib = int(peak.read_text()) / 1024
    assert peak_mib < PEAK_BOUND_MIB < LOG_BYTES / (1 << 20), f"peak RSS {peak_mib:.0f} MiB"
    data = json.loads(report.read_text())
    lead = data["findings"][0]
    assert lead["category"] == "gpu_out_of_memory"
    assert lead["affects"] == ["rank 3"]
    assert lead["evidence"][0]["label"] == f"line {planted_at[0] + 2}"
