"""What a pasted log says about the paths NCCL's data took: the transport NCCL chose on each
host, and nccl-tests' own verdict on a run.

Read, not guessed: the per-host transport lines and the nccl-tests runs are collected while
scanning (``node_lines.NodeLines``: ``transports``, and ``nccl_runs`` as
``textfacts.nccl_tests`` reads them); this module only judges them, host by host, so one
host's paste counts as much as a multi-node log.

- TCP sockets on a host whose NCCL listed (or failed to open) InfiniBand/RoCE HCAs: NCCL
  chooses NET/IB when it can open a device (net_ib.cc; "Using network IB"), and NET/Socket
  otherwise, so sockets next to a listed mlx5 device mean the HCA could not be used (no
  rdma-core in the container, the device not passed in, NCCL_IB_DISABLE=1). Traffic then
  runs over TCP at a fraction of the fabric's rate
  (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html).
- "NET/IB : GPU Direct RDMA Disabled for HCA N 'dev'": ncclIbGetProperties prints it when
  neither the nv_peer_mem nor the nvidia_peermem kernel module is loaded
  (src/transport/net_ib.cc of https://github.com/NVIDIA/nccl); every transfer is then staged
  through host memory. NCCL also turns GDR off by distance (NCCL_NET_GDR_LEVEL, printed
  differently), which is a choice and not judged here.
- nccl-tests checks every result it computes; "#wrong" above 0 or "Out of bounds values :
  N FAILED" means collectives returned wrong data (src/common.cu of
  https://github.com/NVIDIA/nccl-tests). Within one host that is the GPU-to-GPU path (PCIe
  P2P behind ACS/IOMMU is NVIDIA's first suspect, troubleshooting.html "PCI Access Control
  Services"); across hosts it is the network path.
- busbw under the published floor of the same machine kind, at a comparable message size
  and GPU count (``knowledge.floors``): the health check that operator takes such a node
  out of service by.
"""

from __future__ import annotations

import re
from typing import Any

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.diagnose.node_lines import UNNAMED, NodeLines
from ddp_doctor.diagnose.relations import Declared
from ddp_doctor.knowledge.floors import comparable_allreduce, floor_for
from ddp_doctor.logrules.rule import Explains
from ddp_doctor.model import Evidence, Finding, Severity, Step
from ddp_doctor.nodes import codes as node_codes  # a module: its codes stay the nodes'

NCCL_TROUBLE = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html"
NCCL_TESTS = "https://github.com/NVIDIA/nccl-tests"

SOCKETS_WITH_IB = declare(
    "DIAG020", Category.PERFORMANCE_DEGRADED,
    "NCCL used TCP sockets on a host whose InfiniBand/RoCE HCA it saw",
    what="The log shows NCCL naming an InfiniBand/RoCE device (mlx5_0 ...) on a host and then "
         "choosing NET/Socket there: the HCA was listed but could not be used.",
    why="All inter-node traffic of that host goes over TCP at a fraction of the fabric's "
        "rate; multi-node training is many times slower than the hardware allows.",
    fix="Make the HCA usable to NCCL: in a container pass --device /dev/infiniband (or the "
        "RDMA device plugin) and install rdma-core (libibverbs1, ibverbs-providers); unset "
        "NCCL_IB_DISABLE; check `ibv_devinfo` inside the job's environment.",
    severity=Severity.WARNING, docs_url=NCCL_TROUBLE)

GDR_OFF = declare(
    "DIAG021", Category.PERFORMANCE_DEGRADED,
    "GPU Direct RDMA is disabled: the peer-memory kernel module is not loaded",
    what="NCCL printed \"NET/IB : GPU Direct RDMA Disabled for HCA\": it found neither the "
         "nv_peer_mem nor the nvidia_peermem module, so the NIC cannot read GPU memory.",
    why="Every inter-node transfer is staged through host memory; large-message bandwidth "
        "drops well below the network's rate.",
    fix="Load the module on every node (`sudo modprobe nvidia_peermem`, and make it load at "
        "boot); it ships with the NVIDIA driver and needs MLNX_OFED/rdma-core installed "
        "before the driver.",
    severity=Severity.WARNING, docs_url=NCCL_TROUBLE)

WRONG_RESULTS = declare(
    "DIAG022", Category.NCCL_P2P,
    "nccl-tests found wrong results in its collectives",
    what="An nccl-tests run reported wrong elements (\"#wrong\" above 0, or \"Out of bounds "
         "values : N FAILED\"): data arrived corrupted on the path between GPUs.",
    why="Training on this path silently corrupts gradients, or hangs; no setting of the job "
        "fixes it.",
    fix="Within one node: check PCIe ACS and the IOMMU (`sudo lspci -vvv | grep ACSCtl`, boot "
        "with iommu=pt), retry with NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1 to find the "
        "transport at fault, then test each GPU pair; across nodes, the NIC, switch and "
        "GPU Direct RDMA settings of that path.",
    docs_url=NCCL_TROUBLE)

WRONG_RESULTS_NET = declare(
    "DIAG023", Category.NCCL_NETWORK,
    "nccl-tests found wrong results across nodes",
    what="An nccl-tests run across hosts reported wrong elements (\"#wrong\" above 0, or \"Out "
         "of bounds values : N FAILED\"): data was corrupted on the network path.",
    why="Training across these nodes silently corrupts gradients, or hangs.",
    fix="Run the same test within each node to clear the GPUs, then check the network path: "
        "NIC firmware and drivers, switch features in the path (in-network reduction, MTU), "
        "NCCL_NET_GDR_LEVEL / GPU Direct RDMA, and ACS on the PCIe path to the NIC.",
    docs_url=NCCL_TROUBLE)

BUSBW_BELOW_FLOOR = declare(
    "DIAG024", Category.PERFORMANCE_DEGRADED,
    "nccl-tests bus bandwidth is below the published floor for this machine kind",
    what="The all-reduce bus bandwidth of an nccl-tests run, at a message size and GPU count "
         "comparable to an operator's published health check for the same GPUs, is below "
         "that check's minimum.",
    why="That operator takes a node measuring less out of service: a link, GPU or setting "
        "on the path is not performing.",
    fix="Compare with NCCL_DEBUG=INFO which transports were used (P2P/NVLink, NVLS, NET/IB), "
        "check NVLink and PCIe links (`nvidia-smi nvlink --status`; the link generation and "
        "width under GPU Link Info in `nvidia-smi -q`) and the GPUs' clocks; rerun to rule "
        "out other load.",
    severity=Severity.WARNING, docs_url=NCCL_TESTS)


# NCCL picks its socket interfaces itself when NCCL_SOCKET_IFNAME is unset (misc/socket.cc,
# ncclFindInterfaces: ib* first, then anything but docker* and lo): a container's veth pair,
# a libvirt or Docker bridge (virbr*, br-*) or a CNI device is taken like a real NIC, and a
# peer on another host cannot reach its address, so connections to it hang or fail
# (NVIDIA/nccl#697; Oneflow-Inc/libai#415, fixed by NCCL_SOCKET_IFNAME=bond0).
VIRTUAL_INTERFACE_NAME = r"(?:veth|virbr|br-|docker|cni|flannel|cali|vxlan)"
"""How a virtual interface's name starts; diagnose/context.py finds one in NCCL's INFO
lines with it too."""
VIRTUAL_INTERFACE = re.compile(f"^{VIRTUAL_INTERFACE_NAME}")
VIRTUAL_SOCKET_IF = declare(
    "DIAG026", Category.NCCL_NETWORK,
    "NCCL's sockets use a virtual network interface (veth, bridge, docker) beside the real one",
    what="NCCL's socket transport or bootstrap lists a virtual interface: a container's veth "
         "pair, a Docker or libvirt bridge, a CNI device. NCCL chose it itself "
         "(NCCL_SOCKET_IFNAME unset): only ib*, docker* and lo are ruled in or out by name.",
    why="Other hosts cannot reach that interface's address, so NCCL's connections through it "
        "hang or fail while a single-node job still works.",
    fix="Name the interface the hosts share (NCCL_SOCKET_IFNAME=bond0, eth0, ...) or exclude "
        "the virtual ones (NCCL_SOCKET_IFNAME=^docker,veth,virbr,br-,lo), on every node.",
    severity=Severity.WARNING, docs_url=NCCL_TROUBLE)


CAUSES: tuple[Declared, ...] = (
    Declared(node_codes.NCCL_DIFFERS.id, Explains(
        (WRONG_RESULTS_NET.id,),
        reason="NCCL's wire protocol is only kept within one version, so hosts running "
               "different NCCL versions can exchange data each reads differently: nccl-tests' "
               "wrong results across those hosts are the version mismatch, not the network "
               "path (NCCL release notes; NVIDIA/nccl troubleshooting.html).")),
)
"""The codes that explain these findings when the same log shows both (``Explains``)."""
CODES = (SOCKETS_WITH_IB, GDR_OFF, WRONG_RESULTS, WRONG_RESULTS_NET, BUSBW_BELOW_FLOOR,
         VIRTUAL_SOCKET_IF, node_codes.NCCL_DIFFERS)
"""The codes these findings and their declared causes use, for the relations' check."""


def _host(name: str) -> str:
    return name or "the host whose lines were pasted without their prefix"


def transport_findings(nodes: NodeLines) -> list[Finding]:
    """TCP sockets beside a listed HCA, and GPU Direct RDMA switched off, per host."""
    found: list[Finding] = []
    sockets = [(h, t) for h, t in nodes.transports.items()
               if t.get("hcas") and t.get("network") == "Socket"]
    if sockets:
        found.append(Finding(
            SOCKETS_WITH_IB,
            "NCCL used TCP sockets although it saw InfiniBand/RoCE devices on "
            + ", ".join(_host(h) for h, _ in sockets),
            (*(Evidence(f"{_host(h)}: HCAs named", ", ".join(t["hcas"]),
                        "NCCL INFO/WARN NET/IB lines") for h, t in sockets),
             Evidence("network chosen", "Socket", "NCCL INFO 'Using network' / channels")),
            (Step("See whether InfiniBand was switched off or another network chosen.",
                  command="env | grep -E '^NCCL_(IB_|NET|SOCKET_IFNAME)'"),
             Step("Check that the job's environment can open the HCA.",
                  command="ibv_devinfo"),
             Step("In a container: pass --device /dev/infiniband and install rdma-core "
                  "(libibverbs1, ibverbs-providers)."))))
    gdr = [(h, t) for h, t in nodes.transports.items()
           if t.get("gdr_off") and t.get("network", "IB") != "Socket"]
    if gdr:
        found.append(Finding(
            GDR_OFF,
            "GPU Direct RDMA is disabled on " + ", ".join(_host(h) for h, _ in gdr)
            + ": NCCL stages every network transfer through host memory",
            tuple(Evidence(f"{_host(h)}: HCAs without GPU Direct RDMA",
                           ", ".join(t["gdr_off"]), "NCCL INFO NET/IB") for h, t in gdr),
            (Step("Is the peer-memory module loaded?",
                  command="lsmod | grep -E 'nvidia_peermem|nv_peer_mem'"),
             Step("Load it (and add it to /etc/modules-load.d/ to survive reboots).",
                  command="sudo modprobe nvidia_peermem"))))
    virtual = [(h, names) for h, t in nodes.transports.items() if (names := _virtual_in_use(t))]
    if virtual:
        # Only between hosts does NCCL's socket transport carry data: from one host's lines
        # alone (a single-node job lists the same interfaces and works) it is context.
        alone = len(nodes.transports) < 2 and len(nodes.hosts) < 2
        found.append(Finding(
            VIRTUAL_SOCKET_IF,
            "NCCL's sockets use a virtual interface on " + ", ".join(_host(h) for h, _ in virtual)
            + ": " + ", ".join(dict.fromkeys(n for _, names in virtual for n in names)),
            tuple(Evidence(f"{_host(h)}: virtual interface", ", ".join(names),
                           "NCCL INFO NET/Socket / Bootstrap : Using") for h, names in virtual),
            (Step("List the interfaces and the address each host reaches the others by.",
                  command="ip -brief addr"),
             Step("Name the shared interface for NCCL (and Gloo) on every node.",
                  command="NCCL_SOCKET_IFNAME=bond0 GLOO_SOCKET_IFNAME=bond0 torchrun ..."),
             Step("Or exclude the virtual ones by prefix.",
                  command="NCCL_SOCKET_IFNAME=^docker,veth,virbr,br-,lo torchrun ...")),
            severity=Severity.INFO if alone else None))
    return found


def _virtual_in_use(net: dict[str, Any]) -> list[str]:
    """The virtual interfaces one host's NCCL uses: in its socket list beside another, or as
    its bootstrap's; none where docker0 is all it has (NCCL names docker last on purpose, so
    such a host runs alone)."""
    sockets, bootstrap = net.get("socket_ifs", []), net.get("bootstrap_if", "")
    names = [name for name in (*sockets, bootstrap) if VIRTUAL_INTERFACE.match(name)]
    if len(sockets) > 1 or (bootstrap and not bootstrap.startswith("docker")):
        return names
    return []


def _wrong(run: dict[str, Any]) -> tuple[int, list[int]]:
    """Wrong elements counted in the table (0 when it shows no counts) and at which sizes."""
    if not run.get("wrong_is_count"):
        return 0, []
    total, sizes = 0, []
    for row in run.get("rows") or []:
        wrong = [w for w in (row.get("wrong_oop"), row.get("wrong_ip")) if w]
        if wrong:
            total += int(sum(wrong))
            sizes.append(row["bytes"])
    return total, sizes


def nccl_tests_findings(nodes: NodeLines) -> list[Finding]:
    """Wrong results, and bus bandwidth under a comparable published floor, per run."""
    found: list[Finding] = []
    for run in nodes.nccl_runs:
        wrong, sizes = _wrong(run)
        hosts = run.get("hosts") or []
        if wrong or run.get("failed"):
            evidence = [Evidence("first line", str(run.get("header", "")), "nccl-tests")]
            if sizes:
                evidence.append(Evidence("#wrong", f"{wrong} wrong elements at "
                                         f"{len(sizes)} sizes ({sizes[0]} B and up)",
                                         "nccl-tests results table"))
            if run.get("failed"):
                evidence.append(Evidence("out of bounds values",
                                         f"{run.get('out_of_bounds')} FAILED", "nccl-tests"))
            if hosts:
                evidence.append(Evidence("hosts", ", ".join(hosts), "nccl-tests device list"))
            across = len(hosts) > 1
            found.append(Finding(
                WRONG_RESULTS_NET if across else WRONG_RESULTS,
                "nccl-tests reported wrong results"
                + (f" across {len(hosts)} hosts" if across else ""),
                tuple(evidence),
                (Step("Rerun with only the network, then only shared memory, to find the "
                      "transport at fault.",
                      command="NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 ./build/all_reduce_perf "
                              "-b 8 -e 128M -f 2 -g 2"),
                 Step("Check PCIe ACS on the bridges between the GPUs (and NIC).",
                      command="sudo lspci -vvv | grep -i acsctl"))))
        found += _below_floor(run)
    return found


def _below_floor(run: dict[str, Any]) -> list[Finding]:
    ranks = run.get("ranks") or []
    rows = [r for r in run.get("rows") or [] if r.get("busbw_oop") is not None]
    if not ranks or not rows or len({r["model"] for r in ranks}) != 1:
        return []
    floor = floor_for(ranks[0]["model"], "allreduce_busbw")
    largest = max(rows, key=lambda r: r["bytes"])
    test = str(run.get("test") or "")
    if (floor is None or (test and test != "all_reduce_perf")
            or not comparable_allreduce(floor, len(ranks), largest["bytes"])):
        return []
    busbw = max(v for v in (largest.get("busbw_oop"), largest.get("busbw_ip"))
                if v is not None)
    if busbw >= floor.gbps:
        return []
    return [Finding(
        BUSBW_BELOW_FLOOR,
        f"All-reduce bus bandwidth {busbw:g} GB/s is below the {floor.gbps:g} GB/s "
        f"floor of {floor.system}",
        (Evidence("measured busbw", f"{busbw:g} GB/s at {largest['bytes']} B on "
                  f"{len(ranks)} GPUs ({ranks[0]['model']})", "nccl-tests results table"),
         Evidence("floor", floor.label, floor.source)),
        (Step("Show the transports NCCL used.",
              command="NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH ./build/all_reduce_perf "
                      "-b 8G -e 8G -g 8"),
         Step("Check the GPUs' links and clocks.",
              command="nvidia-smi nvlink --status; nvidia-smi -q -d PERFORMANCE; "
                      "nvidia-smi --query-gpu=index,pcie.link.gen.current,pcie.link.gen.max,"
                      "pcie.link.width.current,pcie.link.width.max --format=csv")))]


__all__ = ["BUSBW_BELOW_FLOOR", "GDR_OFF", "SOCKETS_WITH_IB", "UNNAMED", "WRONG_RESULTS",
           "WRONG_RESULTS_NET", "nccl_tests_findings", "transport_findings"]
