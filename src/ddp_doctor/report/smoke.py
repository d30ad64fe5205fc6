"""The smoke job on screen: live per-rank progress while it trains, a summary table after.

The same rows feed the console table and the Markdown section, so both say the same.
"""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from rich.console import Console, Group
from rich.text import Text

from ddp_doctor.model import Report
from ddp_doctor.report.blocks import Wrapped, finding_block, print_block, verdict_line


def _seconds(value: Any) -> str | None:
    return None if value is None else f"{value:.2f} s"


def _bytes(value: Any) -> str:
    return "n/a (CPU)" if value is None else f"{value / 2**20:.0f} MiB"


def smoke_rows(data: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value) rows describing a smoke run; rows without a value are left out."""
    if data.get("skipped"):
        return [("Smoke training", f"not run: {data['skipped']}")]
    if data.get("trainer") == "ultralytics":
        return _ultralytics_rows(data)
    m = data.get("measurements") or {}
    per_rank = m.get("per_rank") or []
    rows: list[tuple[str, Any]] = [
        ("Result", "passed" if data.get("ok") else "FAILED"),
        ("Ranks", f"{data.get('ranks')} ({data.get('local_ranks')} on this node), "
                  f"{data.get('device')}, " + (
                      f"{data.get('backend')}, ddp via {data.get('launcher')}"
                      if data.get("mode") == "ddp" else _dp_label(data))),
        ("Model", f"YOLO-{data.get('model')} at {data.get('imgsz')} px, batch "
                  f"{data.get('batch')} per rank"),
        ("Steps", f"{data.get('steps_done')} of {data.get('steps')}"),
    ]
    if data.get("loss_first") is not None:
        rows.append(("Loss (first → last steps)",
                     f"{data['loss_first']:.4g} → {data['loss_last']:.4g}"))
    if data.get("params_in_sync") is not None:
        rows.append(("Parameters across ranks",
                     "bit-identical" if data["params_in_sync"] else "DIFFERENT"))
    if data.get("all_reduce_ok") is not None:
        rows.append(("All-reduce value", "correct" if data["all_reduce_ok"] else "WRONG"))
    rows += [
        ("Time to rendezvous", _seconds(m.get("rendezvous_s"))),
        ("Time to first step", _seconds(m.get("first_step_s"))),
        ("Median step time", None if m.get("median_step_s") is None
         else f"{m['median_step_s'] * 1000:.1f} ms"),
    ]
    if m.get("images_per_s_total"):
        ranks = ", ".join(f"{r['images_per_s']:.0f}" for r in per_rank if r["images_per_s"])
        where = "on this node" if (data.get("ranks") or 0) > (data.get("local_ranks") or 0) \
            else "total"
        rows.append(("Images/s", f"{m['images_per_s_total']:.0f} {where} ({ranks} per rank)"))
    if per_rank and data.get("device") == "cuda":
        rows.append(("Peak GPU memory", ", ".join(
            f"rank {r['rank']}: {_bytes(r['peak_gpu_mem_bytes'])}" for r in per_rank)))
    if m.get("allreduce_busbw_gbps") is not None:
        how = m.get("allreduce_note") or "nccl-tests busbw"
        rows.append(("All-reduce bus bandwidth",
                     f"{m['allreduce_busbw_gbps']:.2f} GB/s "
                     f"({m['allreduce_bytes'] / 2**20:.0f} MiB buffer, {how})"))
    copies = [c for c in data.get("host_copy") or [] if c.get("h2d_gbps") is not None]
    if copies:
        rows.append(("Host → GPU / GPU → host", ", ".join(
            f"rank {c['rank']}: {c['h2d_gbps']:.1f} / {c['d2h_gbps'] or 0:.1f} GB/s"
            + (f" (expected ≥ {c['h2d_expected']['gbps']:g})" if c.get("h2d_expected")
               else "") for c in copies)))
    rows += _nccl_rows(data.get("nccl"))
    split = data.get("compute_split") or {}
    if split:
        rows.append(("Compute / sync per step", ", ".join(
            f"rank {r}: {v['compute_s'] * 1000:.1f} / {v['sync_s'] * 1000:.1f} ms"
            for r, v in sorted(split.items(), key=lambda kv: int(kv[0])))
            + (" (slow ranks not judged: SyncBatchNorm waits count as compute)"
               if data.get("compute_split_note") else "")))
    scaling = data.get("scaling") or {}
    if scaling.get("speedup"):
        rows.append(("Scaling 1 → N ranks", f"speedup {scaling['speedup']:.2f}× on "
                     f"{scaling['ranks']} ranks, efficiency {scaling['efficiency']:.0%}"))
    elif scaling.get("not_measured"):
        rows.append(("Scaling 1 → N ranks", f"not measured ({scaling['not_measured']})"))
    rows.append(("Wall time", _seconds(data.get("wall_s"))))
    if data.get("run_dir"):
        rows.append(("Rank logs kept in", data["run_dir"]))
    return [(label, str(value)) for label, value in rows if value is not None]


def smoke_table(data: dict[str, Any], indent: int = 0) -> Group:
    """Labels in a column, values wrapped beside them between words only.

    A value too long for its column (the run directory's path) gets a line of its own
    under the label, whole, rather than folded where a reader copies it.
    """
    rows = smoke_rows(data)
    label_width = max((cell_len(label) for label, _ in rows), default=0)
    lines: list[Any] = []
    for label, value in rows:
        style = "bold red" if value in ("FAILED", "DIFFERENT", "WRONG") else ""
        prefix = Text(" " * indent)
        prefix.append(label, style="dim")
        prefix.append(" " * (label_width - cell_len(label) + 2))
        lines.append(Wrapped(Text(value, style=style), prefix=prefix, fallback=indent + 2))
    return Group(*lines)


def smoke_markdown(data: dict[str, Any]) -> list[str]:
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["## Smoke training", "", "| | |", "|---|---|"]
    lines += [f"| {cell(label)} | {cell(value)} |" for label, value in smoke_rows(data)]
    return [*lines, ""]


def render_smoke_console(report: Report, console: Console, *, verbose: bool = False,
                         quiet: bool = False, strict: bool = False) -> None:
    """`ddp-doctor smoke` on the terminal: the summary table, findings, the verdict.

    ``quiet`` keeps only the findings and the verdict, as for the full report.
    """
    if not quiet:
        console.print(Text("Smoke training", style="bold underline"))
        print_block(console, smoke_table(report.smoke or {}))
        console.print()
    for finding in report.findings:
        print_block(console, finding_block(finding, verbose))
        console.print()
    print_block(console, verdict_line(report, strict))


def _nccl_rows(nccl: dict[str, Any] | None) -> list[tuple[str, Any]]:
    """The transport NCCL chose per pair of ranks, grouped by transport, and the path's rate."""
    if not nccl:
        return []
    by_kind: dict[str, list[str]] = {}
    for pair in nccl.get("pairs") or []:
        for kind in pair.get("transports") or {}:
            by_kind.setdefault(kind, []).append(f"{pair['from']}→{pair['to']}")
    if by_kind:
        text = "; ".join(f"{kind}: {', '.join(pairs[:12])}"
                         + (f" (+{len(pairs) - 12} more)" if len(pairs) > 12 else "")
                         for kind, pairs in sorted(by_kind.items()))
    else:
        text = "no channel lines in NCCL's output"
    extras = [f"network {nccl['network']}" if nccl.get("network") else None,
              "NVLS offered" if nccl.get("nvls") else None,
              "CollNet loaded" if nccl.get("collnet") else None]
    text += "".join(f", {e}" for e in extras if e)
    rows: list[tuple[str, Any]] = [("NCCL transport (rank→rank)", text),
                                   ("NCCL debug output", nccl.get("debug"))]
    expected = nccl.get("expected")
    if expected:
        rows.append(("Path's nominal rate", f"{expected['gbps']:.1f} GB/s per direction "
                     f"({expected['link']})"))
    return rows


def _ultralytics_rows(data: dict[str, Any]) -> list[tuple[str, str]]:
    """The rows of a run of the Ultralytics trainer: its epochs and timings, not steps."""
    u = data.get("ultralytics") or {}
    ranks = data.get("ranks") or 0
    rows: list[tuple[str, Any]] = [
        ("Result", "passed" if data.get("ok") else "FAILED"),
        ("Trainer", "Ultralytics" + (f" {u['version']}, {u.get('model_yaml')} at "
                                     f"{data.get('imgsz')} px" if u.get("version") else "")),
        ("Ranks", f"{ranks}, {data.get('device')}, "
                  + ("Ultralytics' own DDP" if ranks > 1 else "one process")),
        ("Epochs", f"{u['epochs_done']} of {u['epochs']}" if u else None),
    ]
    if data.get("loss_first") is not None:
        rows.append(("Box loss (first → last epoch)",
                     f"{data['loss_first']:.4g} → {data['loss_last']:.4g}"))
    rows += [("Time to first epoch", _seconds(u.get("time_to_first_epoch_s"))),
             ("Epoch time", _seconds(u.get("epoch_s"))),
             ("Wall time", _seconds(data.get("wall_s")))]
    return [(label, value) for label, value in rows if value is not None]


def _dp_label(data: dict[str, Any]) -> str:
    """nn.DataParallel only replicates over several GPUs; elsewhere the worker runs the plain
    model in one process, and the summary says so rather than claim DataParallel ran."""
    if data.get("device") == "cuda" and (data.get("gpus_used") or 2) > 1:
        return "nn.DataParallel in one process"
    return "one process (DataParallel needs more than one GPU)"

