"""How well the solved-threads index finds threads of the same root cause, and whether the
low-confidence category suggestion (DIAG009) is worth making.

    python bench/similar_precision.py            # train: leave-one-out, the threshold grid
    python bench/similar_precision.py --blind    # + the blind cases, once, counts only

The index is built from the non-blind cases only (as shipped). On the training cases each
log is queried with its own thread left out: top-1 / top-3 category agreement over all of
them, and, for the logs no rule explains (the diagnosis leads with DIAG001), the precision
and coverage of the suggestion for each (minimum similarity, agreeing threads) pair, so
the shipped constants can be read against the alternatives. ``--blind`` then applies the
shipped constants, unchanged, to the blind cases that end as DIAG001 and prints only
counts: nothing of those logs is shown, and nothing is tuned on them. Also timed: loading
the shipped index and one query.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ddp_doctor.diagnose import diagnose
from ddp_doctor.diagnose import similar as S
from ddp_doctor.diagnose import similar_build as B

LOGS = Path(__file__).resolve().parents[1] / "tests" / "data" / "logs"
GRID_SIMILARITY = (0.15, 0.2, 0.25, 0.3, 0.4)
GRID_AGREEING = (1, 2, 3)


def suggest(matches: list[S.Match], minimum: float, agreeing: int) -> str | None:
    """The suggestion rule of similar.suggested_category with other constants."""
    if not matches or matches[0].score < minimum:
        return None
    category = matches[0].thread.category
    if category == "unknown" or sum(m.thread.category == category for m in matches) < agreeing:
        return None
    return category


def precision(rows: list[tuple[str, list[S.Match]]], minimum: float, agreeing: int
              ) -> tuple[int, int, int]:
    """(right suggestions, suggestions made, cases) for one pair of constants."""
    made = [(expected, suggest(m, minimum, agreeing)) for expected, m in rows]
    made = [(e, got) for e, got in made if got is not None]
    return sum(e == got for e, got in made), len(made), len(rows)


BIG_LOG = "".join(
    f"Epoch {i}/100 GPU_mem 23.1G box_loss 0.0{i % 97} cls_loss 1.{i % 13} 640: 45% "
    f"{i}/2000\n" + (f"[rank{i % 8}]: WARNING: step {i} failed on node-{i % 5}\n"
                     if i % 500 == 0 else "") for i in range(200_000)
) + "RuntimeError: CUDA error: an illegal memory access was encountered\n"


def big_log_mb() -> float:
    return len(BIG_LOG) / 1e6


def big_log_ms(index: S.SimilarIndex) -> float:
    """Error lines and query for a long training log: bounded by the context the scan keeps."""
    import tempfile

    from ddp_doctor.diagnose import scan_input

    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "train.log"
        log.write_text(BIG_LOG, encoding="utf-8")
        scan = scan_input(str(log))[0]
    started = time.perf_counter()
    for _ in range(10):
        index.query(S.error_lines(scan))
    return (time.perf_counter() - started) / 10 * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blind", action="store_true",
                        help="also measure the shipped constants on the blind split, once")
    args = parser.parse_args()
    cases = B.read_cases(LOGS)
    train = [c for c in cases if c.get("split", "train") != "blind"]
    index = S.SimilarIndex([B.thread_of(c, LOGS / c["file"]) for c in train])
    top1 = top3 = asked = 0
    unknown_rows: list[tuple[str, list[S.Match]]] = []
    timings: list[float] = []
    for case in train:
        diagnosis = diagnose(str(LOGS / case["file"]))
        started = time.perf_counter()  # what a diagnosis pays: its error lines, the query
        lines = S.error_lines(diagnosis.scan)
        matches = index.query(lines, exclude=case["url"])
        timings.append(time.perf_counter() - started)
        categories = [m.thread.category for m in matches]
        asked += bool(lines)
        top1 += categories[:1] == [case["category"]]
        top3 += case["category"] in categories
        if diagnosis.report.results[0].findings[0].code.id == "DIAG001":
            unknown_rows.append((case["category"], matches))
    n = len(train)
    print(f"index: {len(index)} threads (non-blind cases)")
    print(f"leave-one-out category agreement: top-1 {top1}/{n} = {top1 / n:.1%}, "
          f"top-3 {top3}/{n} = {top3 / n:.1%} ({n - asked} logs show no error line and "
          f"query nothing)")
    print(f"error lines + query: mean {sum(timings) / n * 1000:.2f} ms, max "
          f"{max(timings) * 1000:.2f} ms; on a {big_log_mb():.0f} MB log: "
          f"{big_log_ms(index):.1f} ms")
    S.load_index.cache_clear()
    started = time.perf_counter()
    S.load_index()
    print(f"loading the shipped index: {(time.perf_counter() - started) * 1000:.1f} ms, "
          f"{(Path(S.__file__).parents[1] / 'knowledge' / S.INDEX_FILE).stat().st_size} bytes")
    print(f"\ntrain cases ending as DIAG001: {len(unknown_rows)} "
          f"(of which category 'unknown': {sum(e == 'unknown' for e, _ in unknown_rows)})")
    print("min similarity  agreeing  right/made  precision  coverage")
    best: tuple[tuple[int, float, int], tuple[float, int]] | None = None
    for minimum in GRID_SIMILARITY:
        for agreeing in GRID_AGREEING:
            right, made, total = precision(unknown_rows, minimum, agreeing)
            shipped = " <- shipped" if (minimum, agreeing) == (
                S.SUGGEST_MIN_SIMILARITY, S.SUGGEST_AGREEING) else ""
            print(f"{minimum:>14.2f}  {agreeing:>8}  {right:>4}/{made:<4}  "
                  f"{(right / made if made else 0):>9.2f}  {made / total:>8.2f}{shipped}")
            # most right minus wrong; ties to the stricter threshold, then more agreement
            key = (2 * right - made, minimum, agreeing)
            if best is None or key > best[0]:
                best = (key, (minimum, agreeing))
    assert best is not None
    print(f"picked by most right minus wrong, ties to the stricter rule: "
          f"min similarity {best[1][0]}, {best[1][1]} agreeing (shipped: "
          f"{S.SUGGEST_MIN_SIMILARITY}, {S.SUGGEST_AGREEING})")
    if args.blind:
        blind_rows: list[tuple[str, list[S.Match]]] = []
        for case in (c for c in cases if c.get("split") == "blind"):
            diagnosis = diagnose(str(LOGS / case["file"]))
            if diagnosis.report.results[0].findings[0].code.id == "DIAG001":
                blind_rows.append((case["category"], index.query(S.error_lines(diagnosis.scan))))
        right, made, total = precision(blind_rows, S.SUGGEST_MIN_SIMILARITY, S.SUGGEST_AGREEING)
        print(f"\nblind cases ending as DIAG001: {total}; shipped constants: {right}/{made} "
              f"right = {(right / made if made else 0):.2f} precision, coverage "
              f"{(made / total if total else 0):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
