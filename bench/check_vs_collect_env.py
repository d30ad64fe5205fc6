"""Wall time of `ddp-doctor check` against PyTorch's own `collect_env`, side by side.

What it measures: the end-to-end wall-clock time, as a user would experience it, of

* ``ddp-doctor check --json FILE``: start the CLI, gather every fact (the torch probe
  runs in a child interpreter), run the checks and write the JSON report; and
* ``python -m torch.utils.collect_env``: the script PyTorch's issue template asks
  every bug reporter to run (its output is discarded here).

Why: ddp-doctor is meant to be run before every training job and in CI, as a
replacement for "paste the output of collect_env". The requirement is that
``ddp-doctor check`` takes no longer than ``collect_env`` on the same machine; this
script measures exactly that ratio. Both commands are fresh processes of the same
interpreter, run alternately (check, collect_env, check, ...) so that drift in the
machine's load, caches or CPU frequency affects both equally. The first run of each
pays for cold file-system caches, which is why the median, not the mean, is compared.

Usage::

    python bench/check_vs_collect_env.py [--runs N]

Prints every run's times, the median of each command and
``median(check) / median(collect_env)``; a ratio at or below 1.0 meets the requirement.
The exit status is 0 when both commands ran (whatever the ratio), 1 when torch cannot
be imported by this interpreter (collect_env needs it) or a command failed, 2 on bad
arguments. This is a benchmark, not a test: it asserts nothing about the ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# ddp-doctor exits 1 when it finds problems (e.g. no GPU here): that is a finished run.
CHECK_OK_CODES = (0, 1)


def doctor_command(json_path: Path) -> list[str]:
    """The installed console script next to this interpreter, else ``-m ddp_doctor``."""
    script = Path(sys.executable).with_name("ddp-doctor")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script), "check", "--json", str(json_path)]
    return [sys.executable, "-m", "ddp_doctor", "check", "--json", str(json_path)]


def collect_env_command() -> list[str]:
    return [sys.executable, "-m", "torch.utils.collect_env"]


def torch_problem() -> str | None:
    """Why torch.utils.collect_env cannot run with this interpreter, or None."""
    probe = subprocess.run(
        [sys.executable, "-c", "import torch.utils.collect_env, torch; print(torch.__version__)"],
        capture_output=True, text=True, check=False,
    )
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["(no error output)"])[-1]
        return f"torch is not importable by {sys.executable}: {last}"
    return None


def timed(command: list[str], ok_codes: tuple[int, ...]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode not in ok_codes:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"{' '.join(command)} exited {proc.returncode}:\n{tail}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each command (default 5)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")

    problem = torch_problem()
    if problem:
        print(f"cannot benchmark: {problem}", file=sys.stderr)
        print("collect_env is part of torch; run this script with an interpreter that has "
              "torch installed.", file=sys.stderr)
        return 1

    with tempfile.TemporaryDirectory(prefix="ddp-doctor-bench-") as tmp:
        check_cmd = doctor_command(Path(tmp) / "report.json")
        env_cmd = collect_env_command()
        print(f"python:      {sys.executable} ({sys.version.split()[0]})")
        print(f"check:       {' '.join(check_cmd)}")
        print(f"collect_env: {' '.join(env_cmd)} > /dev/null")
        print(f"runs:        {args.runs} of each, interleaved\n")
        print(f"{'run':>4}  {'check (s)':>10}  {'collect_env (s)':>16}")
        check_times: list[float] = []
        env_times: list[float] = []
        try:
            for run in range(1, args.runs + 1):
                check_times.append(timed(check_cmd, CHECK_OK_CODES))
                env_times.append(timed(env_cmd, (0,)))
                print(f"{run:>4}  {check_times[-1]:>10.3f}  {env_times[-1]:>16.3f}", flush=True)
        except RuntimeError as exc:
            print(f"\nbenchmark aborted: {exc}", file=sys.stderr)
            return 1

    check_median = statistics.median(check_times)
    env_median = statistics.median(env_times)
    ratio = check_median / env_median
    print(f"\n{'median':>4}  {check_median:>10.3f}  {env_median:>16.3f}")
    print(f"ratio median(check) / median(collect_env) = {ratio:.2f} "
          f"({'within' if ratio <= 1.0 else 'OVER'} the budget of 1.0)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
