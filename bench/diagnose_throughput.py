"""Throughput and peak memory of `ddp-doctor diagnose` on a large synthetic log.

Builds a log of --mb megabytes from the corpus (tests/data/logs) spliced into realistic
noise (YOLO progress bars with CRs and colour codes, NCCL INFO lines of many ranks,
torchrun warnings), then times, side by side on the same file:

- `ddp-doctor diagnose FILE --json OUT` (the whole CLI: read, clean, scan, compose);
- `grep -c -i -E 'error|fail|...'` with the same gate words, a reader's usual first tool.

It prints MB/s for each, their ratio, and the CLI's peak resident memory (from wait4).
The aim: at least 50 MB/s, and under 300 MB of memory for a 1 GB log.

A second, worst-case scenario (--dense-mb, default 64) is a log in which every line is a
warning holding "Error"/"Warning" words (eight ranks repeating DDP warnings, each with its
own step number): every line then has to be decoded and tried against rules.

    python bench/diagnose_throughput.py [--mb 1024] [--dense-mb 64] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ddp_doctor.diagnose.synthetic import synthetic_log
from ddp_doctor.logrules import GATES

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "data" / "logs"


def build(path: Path, megabytes: int) -> int:
    excerpts = [p.read_text(encoding="utf-8", errors="replace")
                for p in sorted(CORPUS.glob("*.log"))]
    with path.open("wb") as out:
        for block, _ in synthetic_log(megabytes << 20, excerpts):
            out.write(block)
    return path.stat().st_size


def build_dense(path: Path, megabytes: int) -> int:
    """Every line a warning with a gate word; half repeat exactly, half carry a step number."""
    with path.open("w", encoding="utf-8") as out:
        step, size = 0, 0
        while size < megabytes << 20:
            step += 1
            rank = step % 8
            block = (f"[rank{rank}]:[W reducer.cpp:1360] Warning: find_unused_parameters=True "
                     f"was specified in DDP constructor, but did not find any unused parameters "
                     f"in the forward pass.\n"
                     f"[rank{rank}]: UserWarning: Error detected in AddBackward0. Traceback of "
                     f"forward call that caused the error (step {step})\n")
            out.write(block)
            size += len(block)
    return path.stat().st_size


def timed(cmd: list[str]) -> tuple[float, int, int]:
    """(wall seconds, peak RSS in MiB, exit status) of one child."""
    start = time.monotonic()
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.monotonic() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_maxrss // 1024, child.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=1024, help="size of the synthetic log")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dense-mb", type=int, default=64, help="size of the worst-case log")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-diagnose-") as tmp:
        log, report = Path(tmp) / "big.log", Path(tmp) / "report.json"
        size = build(log, args.mb)
        mb = size / 1e6
        print(f"synthetic log: {mb:.0f} MB, {len(list(CORPUS.glob('*.log')))} corpus excerpts")
        ours, grep, peaks = [], [], []
        pattern = "|".join(GATES)
        for _ in range(args.runs):
            wall, peak, code = timed([sys.executable, "-m", "ddp_doctor", "diagnose", str(log),
                                      "--json", str(report)])
            if code not in (0, 1):
                sys.exit(f"diagnose failed with exit code {code}")
            ours.append(wall)
            peaks.append(peak)
            wall, _, _ = timed(["grep", "-c", "-i", "-E", pattern, str(log)])
            grep.append(wall)
        findings = json.loads(report.read_text())["findings"]
        ours_s, grep_s = statistics.median(ours), statistics.median(grep)
        print(f"ddp-doctor diagnose: median {ours_s:.2f} s = {mb / ours_s:.1f} MB/s, "
              f"peak RSS {max(peaks)} MiB, {len(findings)} findings")
        print(f"grep -ciE (gates):   median {grep_s:.2f} s = {mb / grep_s:.1f} MB/s")
        print(f"ratio diagnose/grep throughput: {grep_s / ours_s:.2f}")
        dense = Path(tmp) / "dense.log"
        dense_mb = build_dense(dense, args.dense_mb) / 1e6
        walls = [timed([sys.executable, "-m", "ddp_doctor", "diagnose", str(dense), "--json",
                        str(report)])[0] for _ in range(args.runs)]
        dense_s = statistics.median(walls)
        print(f"worst case (every line a warning): {dense_mb:.0f} MB in {dense_s:.2f} s = "
              f"{dense_mb / dense_s:.1f} MB/s")


if __name__ == "__main__":
    main()
