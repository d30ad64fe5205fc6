"""How the GPUs are wired to each other, as NVML reports it (what `nvidia-smi topo -m` shows).

NCCL picks its transport per GPU pair from this wiring: NVLink when there is one, PCIe
peer-to-peer when the pair sits under a PCIe switch (PIX/PXB), through the host bridge or
across CPU sockets (PHB/NODE/SYS) otherwise. The checks need it to tell "no P2P between two
NVLink-connected GPUs" (broken) from "no P2P between two consumer cards on PCIe" (normal).

Runs inside the NVML child process (``ddp_doctor.facts.nvml``), so a wedged driver is
bounded by that child's deadline.

Sources:
- nvmlDeviceGetTopologyCommonAncestor and nvmlGpuTopologyLevel_t (INTERNAL=0, SINGLE=10,
  MULTIPLE=20, HOSTBRIDGE=30, NODE=40, SYSTEM=50):
  https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceQueries.html and
  https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceEnumvs.html
- NvLink queries (nvmlDeviceGetNvLinkState, nvmlDeviceGetNvLinkRemotePciInfo_v2,
  nvmlDeviceGetNvLinkRemoteDeviceType): https://docs.nvidia.com/deploy/nvml-api/group__NvLink.html
- The words PIX/PXB/PHB/NODE/SYS/NV# are the legend of `nvidia-smi topo -m`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # runs in the NVML child process: shapes are for the type checker only
    from ddp_doctor.facts.shapes import Topology

# nvmlGpuTopologyLevel_t -> the word `nvidia-smi topo -m` prints for it. INTERNAL is two
# GPUs on one board (e.g. a K80), joined by the board's own PCIe switch: PIX.
TOPOLOGY_WORDS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
# NVML_NVLINK_MAX_LINKS: 6 (Volta), 12 (Ampere), 18 (Hopper/Blackwell). Links past a GPU's
# last one answer "not supported" or "invalid argument", which ends the scan.
NVLINK_MAX_LINKS = 18
# nvmlIntNvLinkDeviceType_t (nvml.h): GPU=0x00, IBMNPU=0x01, SWITCH=0x02, UNKNOWN=0xFF.
NVLINK_REMOTE_SWITCH = 2


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _bus(bus_id: str) -> str:
    """'00000000:1B:00.0' and '0000:1b:00.0' name the same device: compare on bus:dev.fn."""
    return bus_id.strip().lower().split(":", 1)[-1] if bus_id.count(":") == 2 else bus_id.lower()


def _query(nvml: Any, name: str, *args: Any) -> Any:
    """``nvml.NAME(*args)``; None when the query fails or the bindings do not have it."""
    try:
        return getattr(nvml, name)(*args)
    except Exception:
        return None


def _try(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception:
        return None


def _links(nvml: Any, handle: Any) -> list[dict[str, Any]]:
    """Active NVLinks of one GPU: where each goes (a PCI bus id) and what is there."""
    links = []
    for link in range(NVLINK_MAX_LINKS):
        try:
            state = nvml.nvmlDeviceGetNvLinkState(handle, link)
        except Exception:
            break  # no NVLink at all, or past the GPU's last link
        if not state:
            continue
        remote = _query(nvml, "nvmlDeviceGetNvLinkRemotePciInfo_v2", handle, link)
        kind = _query(nvml, "nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
        links.append({"remote": _bus(_text(remote.busId)) if remote is not None else None,
                      "switch": kind == NVLINK_REMOTE_SWITCH})
    return links


def _nvlink_count(mine: list[dict[str, Any]], theirs: list[dict[str, Any]],
                  their_bus: str | None) -> int:
    """Links joining two GPUs: direct links to the peer, or both ends on NVSwitches.

    On an NVSwitch board every GPU's links go to the switches, and `nvidia-smi topo -m`
    shows the pair as NV<links> (NV18 on HGX H100).
    """
    direct = sum(1 for link in mine if their_bus and link["remote"] == their_bus)
    if direct:
        return direct
    mine_sw = sum(1 for link in mine if link["switch"])
    theirs_sw = sum(1 for link in theirs if link["switch"])
    return min(mine_sw, theirs_sw)


def collect_topology(nvml: Any, count: int) -> Topology:
    """Per GPU pair the PCIe common ancestor and the NVLink count; per GPU its NUMA node.

    Matrices are n x n over NVML indices with None on the diagonal and where the query
    failed. ``link`` is what `nvidia-smi topo -m` prints: "NV<k>" where NVLink joins the
    pair, else the PCIe word.
    """
    handles = [_query(nvml, "nvmlDeviceGetHandleByIndex", i) for i in range(count)]
    buses = []
    for h in handles:
        pci = _query(nvml, "nvmlDeviceGetPciInfo", h) if h is not None else None
        buses.append(_bus(_text(pci.busId)) if pci is not None else None)
    links = [_links(nvml, h) if h is not None else [] for h in handles]
    pcie: list[list[str | None]] = [[None] * count for _ in range(count)]
    nvlinks: list[list[int | None]] = [[None] * count for _ in range(count)]
    for i in range(count):
        for j in range(count):
            if i == j or handles[i] is None or handles[j] is None:
                continue
            level = _query(nvml, "nvmlDeviceGetTopologyCommonAncestor", handles[i], handles[j])
            pcie[i][j] = TOPOLOGY_WORDS.get(level) if level is not None else None
            nvlinks[i][j] = _nvlink_count(links[i], links[j], buses[j])
    link = [[(f"NV{nvlinks[i][j]}" if nvlinks[i][j] else pcie[i][j]) for j in range(count)]
            for i in range(count)]
    return {
        "link": link,
        "pcie": pcie,
        "nvlinks": nvlinks,
        "numa_affinity": [_numa_node(nvml, h) for h in handles],
        "error": None,
    }


def _numa_node(nvml: Any, handle: Any) -> int | None:
    """The CPU NUMA node closest to the GPU (the "NUMA Affinity" column of topo -m).

    nvmlDeviceGetMemoryAffinity with scope NVML_AFFINITY_SCOPE_NODE (0) returns a bitmask
    of NUMA nodes; one 64-bit word covers nodes 0-63. None when unknown or ambiguous.
    """
    if handle is None:
        return None
    mask = _try(lambda: nvml.nvmlDeviceGetMemoryAffinity(handle, 1, 0))
    if not mask:
        return None
    word = int(mask[0])
    if word == 0 or word & (word - 1):
        return None
    return word.bit_length() - 1


def safe_topology(nvml: Any, count: int) -> Topology:
    """``collect_topology``, where a failure is recorded instead of raised."""
    try:
        return collect_topology(nvml, count)
    except Exception as exc:
        return {"link": None, "pcie": None, "nvlinks": None, "numa_affinity": None,
                "error": f"{type(exc).__name__}: {_text(exc)}"}
