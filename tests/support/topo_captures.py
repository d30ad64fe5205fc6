"""``nvidia-smi topo -m`` captures of real machines, parsed and served as NVML answers.

`nvidia-smi topo -m` prints, per GPU pair, what NVML's topology and NVLink queries say:
"NV<k>" for k bonded NVLinks, else the PCIe common ancestor (PIX/PXB/PHB/NODE/SYS).
``TopoNVML`` extends the captured-output ``FakeNVML`` with those queries, so the real
``collect_topology`` runs against the wiring of real machines (captures in
tests/fixtures/captures, sources in SOURCES.md).

What the matrix cannot show, and how the fake fills it in:
- the PCIe level under an NVLink pair: NODE on one NUMA node, SYS across (what the same
  machines' NIC rows show for devices on each socket);
- the remote end of each NVLink: when a GPU's links add up to more than a GPU has (18),
  they go to NVSwitches (HGX/DGX boards); otherwise they go straight to the peer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from tests.support.smi_captures import FakeGpu, FakeNVML, NVMLError_NotSupported, capture

NVLINK_MAX_LINKS = 18
LEVELS = {"PIX": 10, "PXB": 20, "PHB": 30, "NODE": 40, "SYS": 50}
_GPU = re.compile(r"^GPU(\d+)$")


@dataclass
class Topo:
    gpus: list[str]  # row names: GPU0, GPU1, ...
    cells: list[list[str]]  # GPU x GPU cells, "X" on the diagonal
    cpu_affinity: list[str | None]
    numa: list[int | None]
    nics: list[str]  # the NIC columns as the matrix names them


def parse_topo(text: str) -> Topo:
    """The GPU rows of a `nvidia-smi topo -m` matrix (tab- or space-separated)."""
    lines = [line for line in text.splitlines() if line.strip()]
    header = re.split(r"\s{2,}|\t+", lines[0].strip())
    columns = [c for c in header if c]
    gpu_cols = [c for c in columns if _GPU.match(c)]
    other = [c for c in columns if not _GPU.match(c)]
    nics = [c for c in other if c not in ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")]
    gpus, cells, affinity, numa = [], [], [], []
    for line in lines[1:]:
        if line.startswith("Legend"):
            break
        parts = [p for p in re.split(r"\s+", line.strip()) if p]
        if not parts or not _GPU.match(parts[0]):
            continue
        gpus.append(parts[0])
        row = parts[1:1 + len(gpu_cols)]
        cells.append(row)
        rest = parts[1 + len(gpu_cols) + len(nics):]
        affinity.append(rest[0] if rest else None)
        numa.append(int(rest[1]) if len(rest) > 1 and rest[1].isdigit() else None)
    return Topo(gpus, cells, affinity, numa, nics)


def topo_capture(name: str) -> Topo:
    return parse_topo(capture(name))


class TopoNVML(FakeNVML):
    """``FakeNVML`` that also answers the topology and NVLink queries from a topo matrix."""

    def __init__(self, system: dict[str, str], gpus: list[FakeGpu], topo: Topo,
                 **kwargs: Any) -> None:
        super().__init__(system, gpus, **kwargs)
        assert len(topo.cells) == len(gpus), "topo matrix and GPU list disagree"
        self.topo = topo
        self._links = [self._links_of(i) for i in range(len(gpus))]

    def _index(self, h: FakeGpu) -> int:
        return next(i for i, g in enumerate(self.gpus) if g is h)

    def _bus(self, i: int) -> str:
        return self._get(self.gpus[i], ("PCI", "Bus Id"), ("Bus Id",))

    def _links_of(self, i: int) -> list[tuple[str, int]]:
        """(remote bus id, remote device type) per link: 0 = GPU, 2 = NVSwitch."""
        counts = {j: int(c[2:]) for j, c in enumerate(self.topo.cells[i]) if c.startswith("NV")}
        if not counts:
            return []
        if sum(counts.values()) > NVLINK_MAX_LINKS:
            return [(f"00000000:{0xE0 + k:02X}:00.0", 2) for k in range(max(counts.values()))]
        return [(self._bus(j), 0) for j, n in sorted(counts.items()) for _ in range(n)]

    def nvmlDeviceGetTopologyCommonAncestor(self, h1: FakeGpu, h2: FakeGpu) -> int:
        self._need_init("topology")
        i, j = self._index(h1), self._index(h2)
        cell = self.topo.cells[i][j]
        if cell in LEVELS:
            return LEVELS[cell]
        same_node = self.topo.numa[i] is not None and self.topo.numa[i] == self.topo.numa[j]
        return LEVELS["NODE" if same_node else "SYS"]

    def nvmlDeviceGetNvLinkState(self, h: FakeGpu, link: int) -> int:
        self._need_init("nvlink state")
        if link >= len(self._links[self._index(h)]):
            raise NVMLError_NotSupported()
        return 1

    def nvmlDeviceGetNvLinkRemotePciInfo_v2(self, h: FakeGpu, link: int) -> SimpleNamespace:
        self._need_init("nvlink remote pci")
        return SimpleNamespace(busId=self._str(self._links[self._index(h)][link][0]))

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h: FakeGpu, link: int) -> int:
        self._need_init("nvlink remote type")
        return self._links[self._index(h)][link][1]

    def nvmlDeviceGetMemoryAffinity(self, h: FakeGpu, node_set_size: int,
                                    scope: int) -> list[int]:
        self._need_init("memory affinity")
        node = self.topo.numa[self._index(h)]
        if node is None:  # older topo -m output has no NUMA column
            raise NVMLError_NotSupported()
        return [1 << node]


def with_topology(fake: FakeNVML, topo: Topo) -> TopoNVML:
    """The same machine as FAKE, now also answering topology queries from TOPO."""
    return TopoNVML(fake.system, fake.gpus, topo)
