"""How fast a smoke run that trained really was: NCCL's transport, its bandwidth, slow ranks.

Four judgements, each a warning (the run trained; it is slower than the machine allows):

- the transport NCCL chose for each pair of ranks (from its own INFO output, read by
  ``smoke.nccl_log``) against the topology in the facts: SHM or the network between two
  NVLink-joined GPUs, TCP sockets between nodes that have active InfiniBand ports (SMK026);
- the all-reduce bus bandwidth against the nominal rate of the slowest link the job's
  ranks cross (``knowledge.bandwidth``, SMK027);
- each rank's host-to-GPU copy rates against its GPU's published floor or its PCIe link
  (``verdict.copies``, SMK030);
- each rank's own compute time per step (the wait for its peers left out, see
  ``train_smoke/timing.py``) against the other ranks' median (SMK028), named with its
  GPU's clock-event reasons and temperature when the facts have them.

Without facts (``ddp-doctor smoke`` alone) the topology is unknown: only the slow-rank
judgement and the transports themselves are reported.
"""

from __future__ import annotations

import glob
import os
import statistics
from pathlib import Path
from typing import Any

from ddp_doctor.facts.view import FactsView, pci_key
from ddp_doctor.knowledge import bandwidth as B
from ddp_doctor.knowledge.links import active_reasons
from ddp_doctor.model import Evidence, Finding, Step
from ddp_doctor.smoke import codes as C
from ddp_doctor.smoke.launch import NCCL_LOG_PATTERN
from ddp_doctor.smoke.monitor import RankState
from ddp_doctor.smoke.nccl_log import NcclTransports, parse_nccl_info
from ddp_doctor.smoke.verdict.copies import copy_rates

SLOW_RATIO = 1.5
"""A rank whose median compute time is above this multiple of the other ranks' median is
slow. Healthy identical GPUs agree within a few percent; 1.5 leaves room for noisy CPUs."""
SLOW_MIN_STEPS = 5
"""Timed steps (the first, with its warm-up, left out) each rank needs before judging."""
SLOW_MIN_GAP_S = 0.02
"""...and the slow rank must be at least this much slower per step: on a step of a few
milliseconds a ratio is scheduler noise, not a slower GPU."""


def nccl_log_files(run_dir: Path, environ: dict[str, str]) -> list[Path]:
    """Where NCCL's INFO output of the run went: our per-rank files, or the user's file."""
    files = sorted(run_dir.glob(NCCL_LOG_PATTERN.replace("%h", "*").replace("%p", "*")))
    user = environ.get("NCCL_DEBUG_FILE")
    if user and environ.get("NCCL_DEBUG"):
        files += [Path(p) for p in sorted(glob.glob(user.replace("%h", "*").replace("%p", "*")))]
    return files


def read_transports(files: list[Path], texts: list[str]) -> NcclTransports:
    """Every transport line in the files and texts (launcher output, rank stderr)."""
    result = NcclTransports()
    for path in files:
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                parse_nccl_info(handle, result)
        except OSError:
            continue
    for text in texts:
        parse_nccl_info(text.splitlines(), result)
    return result


def nccl_bus_key(bus: str | None) -> tuple[int, int, int] | None:
    """NCCL's busId (``18000``: the PCI address's hex digits run together) as a PCI key."""
    try:
        value = int(bus or "", 16)
    except ValueError:
        return None
    return value >> 20, (value >> 12) & 0xFF, (value >> 4) & 0xFF


def rank_gpus(ranks: list[RankState], nccl: NcclTransports | None,
              view: FactsView | None) -> dict[int, int]:
    """Rank -> NVML index of its GPU on this node: NCCL's nvmlDev or busId, else the PCI
    address the rank recorded, matched to the facts' GPUs."""
    out: dict[int, int] = {}
    by_bus = {pci_key(g.get("pci_bus_id")): g.get("index")
              for g in (view.nvml_gpus() if view else [])}
    for state in ranks:
        key = pci_key(state.startup.get("pci_bus_id"))
        if key is not None and by_bus.get(key) is not None:
            out[state.rank] = int(by_bus[key] or 0)
    for rank, info in (nccl.gpus.items() if nccl else []):
        index = by_bus.get(nccl_bus_key(info.get("bus_id")))
        if index is None and info.get("nvml_dev") is not None and rank in out:
            continue
        if index is None:
            index = info.get("nvml_dev")
        if index is not None and rank not in out:
            out[rank] = int(index)
    return out


def _topology(view: FactsView) -> dict[str, Any]:
    nvml = view.nvml()
    topo = nvml.get("topology") if nvml.get("initialized") else None
    return dict(topo) if topo else {}


def _nvlinks(view: FactsView, a: int, b: int) -> int:
    matrix = _topology(view).get("nvlinks") or []
    if a < len(matrix) and b < len(matrix[a] or []):
        return int(matrix[a][b] or 0)
    return 0


def transport_findings(nccl: NcclTransports, view: FactsView,
                       gpus: dict[int, int]) -> list[Finding]:
    """SHM/NET between NVLink-joined GPUs; sockets across nodes with active IB ports."""
    found: list[Finding] = []
    slow_local = []
    for (src, dst), pair in sorted(nccl.pairs.items()):
        slow = [k for k in pair.transports if k == "SHM" or k.startswith("NET")]
        if not slow or src not in gpus or dst not in gpus or len(pair.hosts) > 1:
            continue
        links = _nvlinks(view, gpus[src], gpus[dst])
        if links:
            slow_local.append((src, dst, gpus[src], gpus[dst], links, "/".join(slow)))
    if slow_local:
        pairs = "; ".join(f"rank {s} (GPU {a}) -> rank {d} (GPU {b}) via {via}, joined by "
                          f"NV{n}" for s, d, a, b, n, via in slow_local)
        found.append(Finding(
            C.SLOW_TRANSPORT,
            f"NCCL sent traffic through {slow_local[0][5]} between GPUs joined by NVLink",
            (Evidence("transport per pair", pairs, "NCCL INFO output (NCCL_DEBUG=INFO)"),
             Evidence("topology", "NVLink between these GPUs", "NVML (nvidia-smi topo -m)")),
            (Step("See what NCCL was told to avoid.",
                  command="env | grep -E '^NCCL_(P2P|SHM|NVLS|ALGO|PROTO)'"),
             Step("Check the links.", command="nvidia-smi nvlink --status")),
            affects=tuple(f"gpu:{a}" for _, _, a, _, _, _ in slow_local)))
    sockets = [(s, d) for (s, d), p in sorted(nccl.pairs.items())
               if any(k == "NET/Socket" for k in p.transports)]
    ib = B.active_ib_ports(dict(view.interconnect()))
    if sockets and ib:
        found.append(Finding(
            C.SLOW_TRANSPORT,
            "NCCL connected the nodes through TCP sockets although InfiniBand ports are active",
            (Evidence("transport across nodes", ", ".join(f"rank {s} -> rank {d}"
                                                          for s, d in sockets[:8])
                      + " via NET/Socket", "NCCL INFO output"),
             Evidence("active InfiniBand ports", ", ".join(ib), "/sys/class/infiniband")),
            (Step("See whether InfiniBand was switched off or another network chosen.",
                  command="env | grep -E '^NCCL_(IB_|NET|SOCKET_IFNAME)'"),
             Step("In a container, pass the devices: --device /dev/infiniband and the "
                  "rdma-core libraries (libibverbs)."))))
    return found


def expected_path(view: FactsView, gpus: list[int], nnodes: int) -> B.PathRate | None:
    """The nominal rate of the slowest link the job's ring crosses, None when unknown.

    Across nodes, NCCL drives one NIC per GPU at once (rails): the expectation is the
    port rate times the rails every node should have (``B.expected_rails``: this node's
    ranks, up to the InfiniBand ports it has, down ones included), so a node whose ports
    went down is measured against what it should carry, not what is left.
    """
    if nnodes > 1:
        interconnect = dict(view.interconnect())
        return B.network_rate(interconnect, B.expected_rails(interconnect, max(1, len(gpus))))
    if len(gpus) < 2:
        return None
    nvml_gpus = [dict(g) for g in view.reachable_gpus()]
    nvlinks = _topology(view).get("nvlinks")
    rates = []
    ring = sorted(gpus)
    for a, b in zip(ring, ring[1:] + ring[:1]):
        rate = B.pair_rate(nvml_gpus, nvlinks, a, b)
        if rate is None:
            return None
        rates.append(rate)
    return min(rates, key=lambda r: r.gbps)


def bandwidth_findings(measured: dict[str, Any], path: B.PathRate | None) -> list[Finding]:
    """busbw under FAR_BELOW of the path's nominal rate (on a buffer big enough to judge)."""
    busbw = measured.get("allreduce_busbw_gbps")
    size = measured.get("allreduce_bytes") or 0
    if (path is None or busbw is None or size < B.MIN_JUDGED_BYTES or path.gbps <= 0
            or measured.get("allreduce_note")):  # one rank: its busbw is 0 by definition
        return []
    share = busbw / path.gbps
    if share >= B.FAR_BELOW:
        return []
    return [Finding(
        C.BUSBW_LOW,
        f"All-reduce bus bandwidth {busbw:.1f} GB/s is {share:.0%} of the {path.gbps:.0f} GB/s "
        f"the {path.link} path carries",
        (Evidence("measured busbw", f"{busbw:.2f} GB/s on a {size / 2**20:.0f} MiB buffer",
                  "smoke job (nccl-tests' busbw)"),
         Evidence("nominal rate", f"{path.gbps:.1f} GB/s per direction ({path.link})",
                  path.source),
         Evidence("judged far below", f"under {B.FAR_BELOW:.0%} of the nominal rate",
                  B.NCCL_TESTS_PERFORMANCE)),
        (Step("Measure with nccl-tests over the same GPUs.",
              command="all_reduce_perf -b 64M -e 1G -f 2 -g 1"),
         Step("Compare each GPU's PCIe link with what it can do.",
              command="nvidia-smi -q -d PCI | grep -A3 'Link'")))]


def compute_split(ranks: list[RankState]) -> dict[int, dict[str, Any]]:
    """Per rank: median compute and sync time over the timed steps (the first left out)."""
    out: dict[int, dict[str, Any]] = {}
    for state in ranks:
        steps = [e for e in state.steps()[1:] if "compute_s" in e]
        if not steps:
            continue
        out[state.rank] = {
            "steps": len(steps),
            "compute_s": round(statistics.median(e["compute_s"] for e in steps), 5),
            "sync_s": round(statistics.median(e.get("sync_s") or 0.0 for e in steps), 5)}
    return out


def _gpu_state(view: FactsView | None, index: int | None) -> list[Evidence]:
    if view is None or index is None:
        return []
    gpu = next((g for g in view.nvml_gpus() if g.get("index") == index), None)
    if gpu is None:
        return []
    evidence = []
    mask = gpu.get("clock_event_reasons")
    if mask is not None:
        reasons = [r.name for r in active_reasons(mask)]
        evidence.append(Evidence(f"GPU {index} clock-event reasons",
                                 ", ".join(reasons) or "none active", "NVML, at idle"))
    if gpu.get("temperature") is not None:
        evidence.append(Evidence(f"GPU {index} temperature", f"{gpu['temperature']} C"
                                 + (f" (slows down at {gpu['temperature_slowdown']} C)"
                                    if gpu.get("temperature_slowdown") else ""), "NVML"))
    return evidence


def slow_rank_findings(split: dict[int, dict[str, Any]], view: FactsView | None = None,
                       gpus: dict[int, int] | None = None) -> list[Finding]:
    """Each rank whose compute time is SLOW_RATIO times the other ranks' median or more."""
    judged = {r: s for r, s in split.items() if s["steps"] >= SLOW_MIN_STEPS}
    if len(judged) < 2:
        return []
    found = []
    for rank, mine in sorted(judged.items()):
        others = statistics.median(s["compute_s"] for r, s in judged.items() if r != rank)
        if others <= 0 or mine["compute_s"] < SLOW_RATIO * others \
                or mine["compute_s"] - others < SLOW_MIN_GAP_S:
            continue
        index = (gpus or {}).get(rank)
        where = f" (GPU {index})" if index is not None else ""
        evidence = [
            Evidence(f"rank {rank} compute per step", f"{mine['compute_s'] * 1000:.1f} ms "
                     f"(median of {mine['steps']} steps)", "event file"),
            Evidence("other ranks' median compute per step", f"{others * 1000:.1f} ms",
                     "event files"),
            Evidence("other ranks' wait for the gradient all-reduce", ", ".join(
                f"rank {r}: {s['sync_s'] * 1000:.1f} ms" for r, s in sorted(judged.items())
                if r != rank), "event files (median per step)"),
            *_gpu_state(view, index)]
        found.append(Finding(
            C.SLOW_RANK, f"Rank {rank}{where} computes {mine['compute_s'] / others:.1f}x "
            "slower than the other ranks: every all-reduce waits for it", tuple(evidence),
            (Step("Watch its clocks, throttle reasons and other processes during a job.",
                  command="nvidia-smi -q -d PERFORMANCE,CLOCK,TEMPERATURE"
                  + (f" -i {index}" if index is not None else "")),),
            affects=(f"rank:{rank}",) + ((f"gpu:{index}",) if index is not None else ())))
    return found


SYNC_BN_NOTE = ("slow ranks not judged: with --sync-bn, SyncBatchNorm gathers every rank's "
                "statistics in the forward pass, so each rank's compute includes its wait "
                "for the slowest; run without --sync-bn to find a slow rank")


def performance(ranks: list[RankState], measured: dict[str, Any], run_dir: Path,
                texts: list[str], environ: dict[str, str], nccl_run: bool,
                view: FactsView | None, nnodes: int, sync_bn: bool = False
                ) -> tuple[dict[str, Any], list[Finding]]:
    """The ``nccl`` and ``compute_split`` parts of the smoke data, and the findings.

    ``sync_bn``: SyncBatchNorm's collectives run inside the forward pass, where the split
    counts them as compute; a slow rank's peers then look as slow as it, so no rank is
    judged (and the data says why).
    """
    found: list[Finding] = []
    split = compute_split(ranks)
    data: dict[str, Any] = {"compute_split": {str(r): v for r, v in sorted(split.items())},
                            "nccl": None, "compute_split_note": None, "host_copy": None}
    nccl: NcclTransports | None = None
    if nccl_run:
        files = nccl_log_files(run_dir, environ)
        nccl = read_transports(files, texts)
        user = environ.get("NCCL_DEBUG")
        data["nccl"] = {**nccl.to_dict(),
                        "debug": (f"the user's NCCL_DEBUG={user}" if user else
                                  "ddp-doctor (NCCL_DEBUG=INFO into the run directory)"),
                        "files": [os.path.basename(str(f)) for f in files],
                        "expected": None}
    gpus = rank_gpus(ranks, nccl, view)
    if nccl is not None and view is not None:
        found += transport_findings(nccl, view, gpus)
        path = expected_path(view, sorted(set(gpus.values())), nnodes)
        if path is not None and data["nccl"] is not None:
            data["nccl"]["expected"] = {"gbps": round(path.gbps, 3), "link": path.link,
                                        "source": path.source, "far_below": B.FAR_BELOW}
        found += bandwidth_findings(measured, path)
    copies, slow_copies = copy_rates(ranks, view, gpus)
    if copies:
        data["host_copy"] = copies
        found += slow_copies
    if sync_bn and len(split) > 1:
        data["compute_split_note"] = SYNC_BN_NOTE
    else:
        found += slow_rank_findings(split, view, gpus)
    return data, found
