"""Which transport NCCL really used: read from its INFO output (NCCL_DEBUG=INFO).

NCCL prints one line per channel and peer when it connects a ring or tree, naming the
transport it chose, for example (real lines, see tests/fixtures/nccl/SOURCES.md)::

    host:1936469:1936515 [2] NCCL INFO Channel 00 : 2[2] -> 3[3] via SHM/direct/direct
    host:4015540:4015653 [1] NCCL INFO Channel 00/0 : 1[1] -> 3[1] [receive] via NET/IB/2/GDRDMA
    host:33347:33367 [7] NCCL INFO Channel 15/0 : 7[7] -> 4[4] via P2P/direct pointer

``rank[cudaDev]`` in NCCL 2.12 and later, ``rank[busId]`` before. The transport is the
first word after ``via``: P2P (NVLink or PCIe peer-to-peer, through CUDA IPC, cuMem or a
direct pointer within one process), SHM (through host memory) or NET (a NIC: IB or
Socket, across nodes). The ``comm ... rank R nranks N cudaDev C nvmlDev M busId B`` line
ties each rank to its GPU; "NVLS multicast support is available" and CollNet lines tell
which collective offloads were offered.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

_PREFIX = re.compile(r"^(?:\[\d+\]\s+)?(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+)\s+\[\d+\]\s+"
                     r"NCCL INFO\s+(?P<text>.*)$")
_CHANNEL = re.compile(r"Channel\s+(?P<ch>\d+)(?:/\d+)?\s*:\s*(?P<src>\d+)\[(?P<sdev>[0-9a-fA-F]+)\]"
                      r"\s*->\s*(?P<dst>\d+)\[(?P<ddev>[0-9a-fA-F]+)\]"
                      r"(?:\s*\[(?P<dir>send|receive)\])?\s+via\s+(?P<via>.+?)\s*$")
_COMM = re.compile(r"\brank (?P<rank>\d+) n[Rr]anks (?P<nranks>\d+) cudaDev (?P<cuda>\d+)"
                   r"(?: nvmlDev (?P<nvml>\d+))? busId (?P<bus>[0-9a-fA-F]+)")
_NVLS_ON = re.compile(r"NVLS multicast support is available")
_NVLS_CHANNELS = re.compile(r"(\d+) nvls channels")
_COLLNET = re.compile(r"\bCollNet\b|\bcollnet\b", re.IGNORECASE)
_NETWORK = re.compile(r"Using network (\S+)")


def transport_kind(via: str) -> str:
    """The transport and its mechanism, shortened: P2P/IPC, P2P/CUMEM, SHM, NET/IB, NET/Socket."""
    parts = via.split("/")
    head = parts[0]
    if head == "P2P" and len(parts) > 1:
        return "P2P/" + parts[1].split()[0].replace("direct", "direct pointer")
    if head == "NET" and len(parts) > 1:
        return "NET/" + parts[1]
    return head


@dataclass
class PairTransport:
    """One direction between two ranks: the transports seen and on how many channels."""

    src: int
    dst: int
    transports: dict[str, int] = field(default_factory=dict)  # kind -> channels
    hosts: set[str] = field(default_factory=set)  # which host logged it

    @property
    def cross_node(self) -> bool:
        return any(k.startswith("NET") for k in self.transports)

    def to_dict(self) -> dict[str, Any]:
        return {"from": self.src, "to": self.dst,
                "transports": dict(sorted(self.transports.items())), "cross_node": self.cross_node}


@dataclass
class NcclTransports:
    """What NCCL's INFO output said about the job's connections."""

    pairs: dict[tuple[int, int], PairTransport] = field(default_factory=dict)
    gpus: dict[int, dict[str, Any]] = field(default_factory=dict)  # rank -> cudaDev, nvml, bus
    hosts: set[str] = field(default_factory=set)
    network: str | None = None  # "Socket", "IB", "IBext_v8"
    nvls: bool | None = None  # True: offered; False: "0 nvls channels"; None: not said
    collnet: bool = False
    lines: int = 0  # channel lines read

    def to_dict(self) -> dict[str, Any]:
        return {"pairs": [self.pairs[k].to_dict() for k in sorted(self.pairs)],
                "gpus": {str(r): self.gpus[r] for r in sorted(self.gpus)},
                "network": self.network, "nvls": self.nvls, "collnet": self.collnet,
                "channel_lines": self.lines}


def parse_nccl_info(lines: Iterable[str], into: NcclTransports | None = None) -> NcclTransports:
    """Every transport line of NCCL INFO output (several files may be read into one result)."""
    out = into or NcclTransports()
    for raw in lines:
        line = raw.rstrip("\n")
        prefix = _PREFIX.match(line)
        text = prefix.group("text") if prefix else line
        host = prefix.group("host") if prefix else None
        if host:
            out.hosts.add(host)
        channel = _CHANNEL.search(text)
        if channel:
            key = (int(channel.group("src")), int(channel.group("dst")))
            pair = out.pairs.setdefault(key, PairTransport(*key))
            kind = transport_kind(channel.group("via"))
            pair.transports[kind] = pair.transports.get(kind, 0) + 1
            if host:
                pair.hosts.add(host)
            out.lines += 1
            continue
        comm = _COMM.search(text)
        if comm:
            rank = int(comm.group("rank"))
            out.gpus[rank] = {"cuda_dev": int(comm.group("cuda")),
                              "nvml_dev": (int(comm.group("nvml")) if comm.group("nvml")
                                           else None),
                              "bus_id": comm.group("bus"), "host": host}
            continue
        if _NVLS_ON.search(text):
            out.nvls = True
        elif (m := _NVLS_CHANNELS.search(text)) is not None:
            if int(m.group(1)) == 0 and out.nvls is None:
                out.nvls = False
            elif int(m.group(1)) > 0:
                out.nvls = True
        if (net := _NETWORK.search(text)) is not None:
            out.network = net.group(1)
        if _COLLNET.search(text) and "Failed" not in text and "set by environment" not in text:
            out.collnet = True
    return out
