"""Throughput and peak memory of `ddp-doctor diagnose`, side by side with grep on the same files.

Two logs are generated in a temporary folder (deleted afterwards):

- a *realistic* one of --mb megabytes (default 1024): the corpus (tests/data/logs) spliced
  into the noise long training logs are made of (YOLO progress bars with CRs and colour
  codes, NCCL INFO lines of many ranks, torchrun warnings, metric lines);
- a *worst case* of --dense-mb megabytes (default 64): every line is a warning holding
  "Error"/"Warning" (eight ranks repeating a DDP warning, each with its own step number),
  so every line has to be read and tried against the rules.

On each, the whole CLI (`ddp-doctor diagnose FILE --json OUT`: read, clean, scan, compose,
report) runs --runs times, interleaved with the two greps a reader would try first:
`grep -c -i error` and `grep -c -i -E` over the rules' gate words (the same words the scan
looks for). Medians are printed in one table: MB/s by wall clock and by CPU time (user +
system, from wait4), and each as a ratio to the greps' (how many times slower than grep).
The machine this runs on may be shared: CPU time moves far less than wall time when other
work competes for the cores, so both are shown. The peak resident memory is the CLI's own
(ru_maxrss from wait4), reported for the realistic log, which is 1 GB unless --mb says
otherwise; --memory-mb adds a run on a separate log of that size when it differs.

Targets: >= 100 MB/s on the realistic log, >= 30 MB/s on the worst case, < 300 MB of
memory for a 1 GB log.

    python bench/diagnose_throughput.py [--mb 1024] [--dense-mb 64] [--runs 5]
                                        [--against ../other-checkout/src]
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
from dataclasses import dataclass
from pathlib import Path

from ddp_doctor.diagnose.synthetic import synthetic_log
from ddp_doctor.logrules import GATES

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "data" / "logs"
TARGET_MBS = {"realistic": 100.0, "worst case": 30.0}
TARGET_PEAK_MB = 300
# grep byte-wise, as the scan reads: a UTF-8 locale makes `grep -i` slower and less stable.
GREP_ENV = {**os.environ, "LC_ALL": "C"}


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


@dataclass(frozen=True)
class Run:
    """One child process: wall seconds, CPU seconds (user + system), peak RSS, exit status."""

    wall: float
    cpu: float
    peak_mb: float
    code: int


def timed(cmd: list[str], env: dict[str, str] | None = None) -> Run:
    """Run ``cmd`` once. Its output goes to a scratch file, not /dev/null: GNU grep notices
    /dev/null and stops at the first match, which made grep look 50x faster than it is."""
    with tempfile.TemporaryFile() as sink:
        start = time.monotonic()
        child = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.DEVNULL, env=env)
        _, status, usage = os.wait4(child.pid, 0)
    wall = time.monotonic() - start
    return Run(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024 * 1.048576,
               os.waitstatus_to_exitcode(status))


def _ere(word: str) -> str:
    """A gate word as a literal in grep's extended regular expressions (".cc:" has a dot)."""
    return "".join("\\" + char if char in ".[]()*+?{}|^$\\" else char for char in word)


def diagnose_cmd(log: Path, report: Path) -> list[str]:
    return [sys.executable, "-m", "ddp_doctor", "diagnose", str(log), "--json", str(report)]


@dataclass(frozen=True)
class Row:
    """Medians for one log."""

    name: str
    kind: str  # "realistic" or "worst case"
    mb: float
    ours: tuple[float, float]  # (wall s, cpu s)
    grep_error: tuple[float, float]
    grep_gates: tuple[float, float]
    peak_mb: float
    findings: int


def measure(name: str, log: Path, report: Path, runs: int, against: str | None = None
            ) -> list[Row]:
    """This checkout's row for one log, and, with ``against``, the row of the ``ddp_doctor``
    found in that source folder (another checkout), measured in the same interleaved runs."""
    mb = log.stat().st_size / 1e6
    gates = "|".join(map(_ere, GATES))
    ours: list[Run] = []
    theirs: list[Run] = []
    error, words = [], []
    other = {**os.environ, "PYTHONPATH": against} if against else None
    for _ in range(runs):  # interleaved: a burst of load elsewhere hits them all alike
        for runs_of, env in ((ours, None), (theirs, other)):
            if runs_of is theirs and other is None:
                continue
            run = timed(diagnose_cmd(log, report), env)
            if run.code not in (0, 1):
                sys.exit(f"diagnose failed on the {name} log with exit code {run.code}")
            runs_of.append(run)
        error.append(timed(["grep", "-c", "-i", "error", str(log)], GREP_ENV))
        words.append(timed(["grep", "-c", "-i", "-E", gates, str(log)], GREP_ENV))
    findings = len(json.loads(report.read_text())["findings"])

    def median(found: list[Run]) -> tuple[float, float]:
        return statistics.median(r.wall for r in found), statistics.median(r.cpu for r in found)

    rows = [Row(name, name, mb, median(ours), median(error), median(words),
                max(r.peak_mb for r in ours), findings)]
    if theirs:
        rows.append(Row(f"{name} (--against)", name, mb, median(theirs), median(error),
                        median(words), max(r.peak_mb for r in theirs), findings))
    return rows


def table(rows: list[Row], runs: int) -> str:
    """The figures side by side: MB/s wall | cpu, and how many times grep's time it took."""
    width = max(len(row.name) for row in rows)
    out = [f"medians of {runs} runs; MB/s as wall | cpu; 'x grep' = diagnose time / grep time",
           f"{'log':<{width}} {'size':>8}  {'diagnose MB/s':>15}  {'grep -ci error':>15}  "
           f"{'grep -ciE gates':>15}  {'x grep error':>13}  {'x grep gates':>13}  "
           f"{'peak RSS':>8}  target"]
    for row in rows:
        rate = [f"{row.mb / pair[0]:6.0f} | {row.mb / pair[1]:6.0f}"
                for pair in (row.ours, row.grep_error, row.grep_gates)]
        times = [f"{row.ours[0] / pair[0]:5.1f} | {row.ours[1] / pair[1]:5.1f}"
                 for pair in (row.grep_error, row.grep_gates)]
        target = TARGET_MBS[row.kind]
        met = "met" if row.mb / row.ours[0] >= target else (
            "met by cpu time" if row.mb / row.ours[1] >= target else "MISSED")
        out.append(f"{row.name:<{width}} {row.mb:6.0f}MB  {rate[0]:>15}  {rate[1]:>15}  "
                   f"{rate[2]:>15}  {times[0]:>13}  {times[1]:>13}  "
                   f"{row.peak_mb:6.0f}MB  >= {target:.0f} MB/s: {met}")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=1024, help="size of the realistic log")
    parser.add_argument("--dense-mb", type=int, default=64, help="size of the worst-case log")
    parser.add_argument("--runs", type=int, default=5, help="runs per log (medians shown)")
    parser.add_argument("--memory-mb", type=int, default=1024,
                        help="size of the log whose peak memory is checked")
    parser.add_argument("--against", metavar="SRC",
                        help="also time the ddp_doctor package in this source folder (say, "
                             "the src/ of another checkout), interleaved with this one")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-diagnose-") as tmp:
        report = Path(tmp) / "report.json"
        log, dense = Path(tmp) / "realistic.log", Path(tmp) / "dense.log"
        started = time.monotonic()
        build(log, args.mb)
        build_dense(dense, args.dense_mb)
        print(f"logs written in {time.monotonic() - started:.0f} s "
              f"({len(list(CORPUS.glob('*.log')))} corpus excerpts in the realistic one)")
        rows = [*measure("realistic", log, report, args.runs, args.against),
                *measure("worst case", dense, report, args.runs, args.against)]
        print(table(rows, args.runs))
        tiny = Path(tmp) / "one-line.log"
        tiny.write_text("RuntimeError: CUDA out of memory.\n")
        start = [timed(diagnose_cmd(tiny, report)) for _ in range(args.runs)]
        print(f"of which start-up (a one-line log): "
              f"{statistics.median(r.wall for r in start):.2f} s wall | "
              f"{statistics.median(r.cpu for r in start):.2f} s cpu")
        print(f"findings: {rows[0].findings} on the realistic log, "
              f"{rows[-1].findings} on the worst case")
        peak_mb, peak_size = rows[0].peak_mb, rows[0].mb
        if args.memory_mb != args.mb:
            log.unlink()
            big = Path(tmp) / "memory.log"
            build(big, args.memory_mb)
            run = timed(diagnose_cmd(big, report))
            peak_mb, peak_size = run.peak_mb, big.stat().st_size / 1e6
        verdict = "met" if peak_mb < TARGET_PEAK_MB else "MISSED"
        print(f"peak resident memory for a {peak_size:.0f} MB log: {peak_mb:.0f} MB "
              f"(< {TARGET_PEAK_MB} MB: {verdict})")


if __name__ == "__main__":
    main()
