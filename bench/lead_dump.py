"""Every corpus and unseen log's diagnosis, reduced to what a refactor must keep: the lead
finding's code, category and title, its evidence, and the codes of every finding in order.

A change to the engine that must not change behaviour (the evidence model, the scan's speed)
is checked by dumping before and after and diffing the two files:

    python bench/lead_dump.py /tmp/before.json
    ... change ...
    python bench/lead_dump.py /tmp/after.json && python bench/lead_dump.py --diff \
        /tmp/before.json /tmp/after.json
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = (ROOT / "tests" / "data" / "logs", ROOT / "tests" / "data" / "unseen")


def one(path: str) -> tuple[str, dict[str, Any]]:
    from ddp_doctor.diagnose import diagnose

    result = diagnose(path).report.results[0]
    lead = result.findings[0]
    return (f"{Path(path).parent.name}/{Path(path).name}", {
        "lead": lead.code.id,
        "category": lead.code.category.value,
        "title": lead.title,
        "summary": result.summary,
        "evidence": [[e.label, e.value] for e in lead.evidence],
        "codes": [f.code.id for f in result.findings],
    })


def dump(out: Path, jobs: int) -> None:
    paths = [str(p) for folder in FOLDERS for p in sorted(folder.glob("*.log"))]
    with ProcessPoolExecutor(jobs) as pool:
        rows = dict(pool.map(one, paths, chunksize=8))
    out.write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{len(rows)} logs -> {out}")


def diff(before: Path, after: Path) -> int:
    old = json.loads(before.read_text(encoding="utf-8"))
    new = json.loads(after.read_text(encoding="utf-8"))
    changed = 0
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name), new.get(name)
        if a == b:
            continue
        changed += 1
        print(f"{name}:")
        for key in sorted(set(a or {}) | set(b or {})):
            if (a or {}).get(key) != (b or {}).get(key):
                print(f"  {key}: {(a or {}).get(key)!r}\n  {' ' * len(key)}-> "
                      f"{(b or {}).get(key)!r}")
    leads = sum(1 for n in set(old) & set(new) if old[n]["lead"] != new[n]["lead"])
    print(f"{changed} of {len(old)} logs changed ({leads} leads)")
    return 1 if changed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", type=Path)
    parser.add_argument("--diff", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    if args.diff:
        return diff(*args.diff)
    if args.out is None:
        parser.error("give an output file or --diff BEFORE AFTER")
    dump(args.out, args.jobs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
