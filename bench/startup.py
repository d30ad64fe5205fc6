"""How close ddp-doctor's start-up and ``check`` come to their floors, as paired ratios.

What it measures, each as a whole process of this interpreter, in pairs run in turn
(A B A B ...) so that drift in the machine's load moves both sides of a pair alike:

* ``ddp-doctor --version`` against ``python -c "import typer"``: the command line's own
  start-up against the framework it is built on (issue 25: it used to load 131 of the
  doctor's modules, the flows, the checks and the log rules among them);
* ``ddp-doctor check --json FILE`` against ``python -c "import torch"``: the whole
  pre-flight against the one thing it cannot avoid, importing torch (the torch probe does,
  in a child interpreter); the goal is a ratio of 1.15 or less.

For each pair it prints the wall-clock and CPU ratio A/B, pair by pair, and their median,
minimum and maximum: quote the median. CPU is user + system time of the process and every
process it waited for (the probe child included), from ``os.wait4``. Then the torch
probe's own breakdown, from one more ``check --save-facts``: where the probe's time went
(``startup_s`` is the interpreter's start before the script's clock; ``packages_s`` and
``torchvision_s`` run beside ``import_torch_s`` and ``cuda_init_s``, so the parts overlap),
and how long each fact took in the gather.

Usage::

    python bench/startup.py [--runs N] [--only version|check]

The exit status is 0 when every command ran (whatever the ratios), 1 when one failed or
torch is not importable here, 2 on bad arguments. A benchmark, not a test: it asserts
nothing about the ratios.
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

# ddp-doctor exits 1 when it finds problems (e.g. no GPU here): that is a finished run.
DOCTOR_OK_CODES = (0, 1)


@dataclass(frozen=True)
class Run:
    wall_s: float
    cpu_s: float


def doctor(*args: str) -> list[str]:
    """The installed console script next to this interpreter, else ``-m ddp_doctor``."""
    script = Path(sys.executable).with_name("ddp-doctor")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script), *args]
    return [sys.executable, "-m", "ddp_doctor", *args]


def run_once(command: list[str], ok_codes: tuple[int, ...] = (0,)) -> Run:
    """One whole process: its wall time, and the CPU of it and every child it waited for."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in ok_codes:
        raise RuntimeError(f"{' '.join(command)} exited {proc.returncode}")
    return Run(wall, usage.ru_utime + usage.ru_stime)


def paired(a: list[str], b: list[str], runs: int, a_ok: tuple[int, ...]) -> list[tuple[Run, Run]]:
    """RUNS pairs after one warm-up pair (cold file-system caches are not the floor)."""
    run_once(a, a_ok)
    run_once(b)
    return [(run_once(a, a_ok), run_once(b)) for _ in range(runs)]


def spread(values: list[float]) -> str:
    return (f"median {statistics.median(values):.3f}  min {min(values):.3f}  "
            f"max {max(values):.3f}")


def report(title: str, pairs: list[tuple[Run, Run]]) -> None:
    print(f"\n{title}  ({len(pairs)} pairs)")
    for i, (a, b) in enumerate(pairs, 1):
        print(f"  pair {i}: A {a.wall_s:6.2f} s wall {a.cpu_s:6.2f} s cpu | "
              f"B {b.wall_s:6.2f} s wall {b.cpu_s:6.2f} s cpu | "
              f"A/B wall {a.wall_s / b.wall_s:.3f} cpu {a.cpu_s / b.cpu_s:.3f}")
    print(f"  A/B wall: {spread([a.wall_s / b.wall_s for a, b in pairs])}")
    print(f"  A/B cpu:  {spread([a.cpu_s / b.cpu_s for a, b in pairs])}")


def probe_breakdown(workdir: Path) -> None:
    """The torch probe's parts and each fact's gather time, from one saved snapshot."""
    saved = workdir / "facts.json"
    run_once(doctor("check", "--quiet", "--save-facts", str(saved)), DOCTOR_OK_CODES)
    facts = json.loads(saved.read_text(encoding="utf-8"))["facts"]
    probe = ((facts.get("torch") or {}).get("value") or {}).get("probe") or {}
    print(f"\ntorch probe: {probe.get('duration_s')} s in all, seen from the doctor")
    for part, seconds in (probe.get("timings") or {}).items():
        print(f"  {part:16} {'-' if seconds is None else f'{seconds:.3f} s'}")
    print("gather, per fact (in parallel):")
    for name, record in sorted(facts.items()):
        if isinstance(record, dict) and record.get("duration_s") is not None:
            print(f"  {name:16} {record['duration_s']:.3f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="pairs per comparison (default 5)")
    parser.add_argument("--only", choices=("version", "check"),
                        help="only one of the two comparisons")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be 1 or more")
    print(f"interpreter: {sys.executable}")
    try:
        if args.only in (None, "version"):
            report("A: ddp-doctor --version  B: python -c 'import typer'",
                   paired(doctor("--version"), [sys.executable, "-c", "import typer"],
                          args.runs, (0,)))
        if args.only in (None, "check"):
            with tempfile.TemporaryDirectory(prefix="ddp-doctor-bench-") as tmp:
                workdir = Path(tmp)
                report("A: ddp-doctor check --json FILE  B: python -c 'import torch'",
                       paired(doctor("check", "--json", str(workdir / "report.json")),
                              [sys.executable, "-c", "import torch"], args.runs,
                              DOCTOR_OK_CODES))
                probe_breakdown(workdir)
    except RuntimeError as exc:
        print(f"startup.py: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
