"""How long ``ddp-doctor compare`` takes on a cluster's worth of snapshots.

    python bench/compare_nodes.py [--nodes 32] [--repeat 5]

Writes N copies of the recorded 8x H100 machine (each its own host name; one with another
NCCL and an extra NCCL_* variable) to a temporary directory, then times the whole command
(a new process, as a user runs it) and, side by side, ``ddp-doctor --version`` (the
interpreter and import cost every command pays), and prints medians and their ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "facts" / \
    "healthy_8x_h100_nvlink.json"


def write_nodes(folder: Path, n: int) -> list[Path]:
    base = json.loads(FIXTURE.read_text(encoding="utf-8"))
    paths = []
    for i in range(n):
        data = json.loads(json.dumps(base))
        data["facts"]["os"]["value"]["hostname"] = f"gpu-node-{i:02d}"
        if i == n // 2:
            data["facts"]["torch"]["value"]["libraries"]["nccl_version"] = "2.18.3"
            data["facts"]["env_vars"]["value"]["NCCL_ALGO"] = "Ring"
        path = folder / f"facts-{i:02d}.json"
        path.write_text(json.dumps(data), encoding="utf-8")
        paths.append(path)
    return paths


def timed(command: list[str]) -> tuple[float, int]:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, check=False)
    return time.perf_counter() - started, done.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    doctor = [sys.executable, "-m", "ddp_doctor"]
    with tempfile.TemporaryDirectory() as tmp:
        paths = [str(p) for p in write_nodes(Path(tmp), args.nodes)]
        compare, version, codes = [], [], set()
        for _ in range(args.repeat):  # interleaved, so both see the same machine load
            seconds, code = timed([*doctor, "compare", *paths, "--json", f"{tmp}/r.json"])
            compare.append(seconds)
            codes.add(code)
            version.append(timed([*doctor, "--version"])[0])
        found = [f["code"] for f in json.loads(Path(tmp, "r.json").read_text())["findings"]]
    c, v = statistics.median(compare), statistics.median(version)
    print(f"compare of {args.nodes} snapshots: median {c:.2f} s (exit {sorted(codes)}, "
          f"findings {found})")
    print(f"ddp-doctor --version: median {v:.2f} s; compare / --version = {c / v:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
