"""NCCL: is it there, what the NCCL_* variables change, and can the GPUs talk to each other.

/dev/shm, which NCCL's SHM transport lives in, is checked by host.shm (HST001).

Sources:
- NCCL environment variables (NCCL_P2P_DISABLE, NCCL_P2P_LEVEL, NCCL_SHM_DISABLE,
  NCCL_IB_DISABLE, NCCL_SOCKET_IFNAME prefix/^/= syntax, NCCL_DEBUG):
  https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html
- PCIe P2P through an IOMMU/ACS hangs or crawls; test with NCCL_P2P_DISABLE=1, fix with
  iommu=pt or ACS off: https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html
  and NVIDIA/nccl#199 ("not hanging actually, it is just running at a very low speed").
- No NCCL in Windows and macOS builds of torch ("Distributed package doesn't have NCCL
  built in"): https://docs.pytorch.org/docs/stable/distributed.html#backends
- nccl-tests all_reduce_perf: https://github.com/NVIDIA/nccl-tests (building it needs nvcc
  and NCCL's headers: `make CUDA_HOME=... NCCL_HOME=...`, which pip-only installs lack, so
  the steps measure with torch itself: ``torch.distributed.run --no-python`` runs any
  command once per rank, https://docs.pytorch.org/docs/stable/elastic/run.html; bus
  bandwidth = algorithm bandwidth x 2(n-1)/n for all_reduce, as nccl-tests'
  doc/PERFORMANCE.md defines it)
- The P2P data test (a patterned buffer copied between every pair of GPUs, checked and
  timed by the interpreter probe) is judged against the pair's link: NVLink count x 25 GB/s,
  or the slower of the two GPUs' PCIe links (knowledge/links.py); "far below" is under a
  quarter of that, where P2P redirected through the CPU by ACS ends up.
- IOMMU passthrough on the kernel command line: GRUB_CMDLINE_LINUX + update-grub on
  Debian/Ubuntu; `grubby --update-kernel=ALL --args=...` on RHEL-family systems, which
  adds the argument to every boot entry (grubby(8), https://github.com/rhboot/grubby)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Callable

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.facts.shapes import P2pCopy, PcieLink, Topology
from ddp_doctor.facts.view import FactsView
from ddp_doctor.knowledge.links import NVLINK_GBPS_PER_LINK, SLOW_FRACTION, pcie_gbps
from ddp_doctor.model import Evidence, Finding, Severity, Step
from ddp_doctor.registry import Summary, check
from ddp_doctor.wording import count, human_bytes

from ._util import install_steps

NCCL_ENV_DOCS = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"
NCCL_TROUBLE = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html"
# One all_reduce of 256 MiB per rank, timed over 20 rounds: needs only torch, not nvcc.
ALL_REDUCE_CODE = (
    "import os,time,torch,torch.distributed as d; d.init_process_group('nccl'); "
    "r=int(os.environ['LOCAL_RANK']); torch.cuda.set_device(r); "
    "x=torch.ones(2**26,device='cuda'); n=d.get_world_size(); d.all_reduce(x); "
    "torch.cuda.synchronize(); t=time.time(); [d.all_reduce(x) for _ in range(20)]; "
    "torch.cuda.synchronize(); s=time.time()-t; print(f'rank {r}: all_reduce of 256 MiB, "
    "bus bandwidth {20*x.numel()*4*2*(n-1)/n/s/1e9:.1f} GB/s'); d.destroy_process_group()"
)
NCCL_TESTS_NOTE = ("With the CUDA toolkit and NCCL's headers installed, NVIDIA's nccl-tests "
                   "measure more finely: git clone https://github.com/NVIDIA/nccl-tests && cd "
                   "nccl-tests && make CUDA_HOME=/usr/local/cuda NCCL_HOME=<nccl dir> && "
                   "./build/all_reduce_perf -b 8 -e 256M -f 2 -g <GPUs>.")
TRUTHY = {"1", "true", "yes", "on"}

NCCL_MISSING = declare(
    id="NCC001",
    category=Category.NCCL_UNAVAILABLE,
    summary="This PyTorch build has no NCCL",
    what="torch.distributed.is_nccl_available() is False (or torch.distributed is missing).",
    why=("init_process_group('nccl') fails with \"Distributed package doesn't have NCCL "
         "built in\": multi-GPU DDP cannot use the NCCL backend."),
    fix=("Use the gloo backend on this platform, or train on Linux / WSL2 with a Linux CUDA "
         "build of torch, which ships NCCL."),
    docs_url="https://docs.pytorch.org/docs/stable/distributed.html#backends",
)
P2P_DISABLED = declare(
    id="NCC002",
    category=Category.NCCL_P2P,
    summary="NCCL peer-to-peer transport is switched off by the environment",
    what="NCCL_P2P_DISABLE=1 (or NCCL_P2P_LEVEL=LOC) stops NCCL from using NVLink or PCIe P2P.",
    why=("Traffic between GPUs then goes through host shared memory: correct but much slower, "
         "and on NVLink machines a waste of the fastest link."),
    fix="Unset it unless a P2P hang was proven on this machine (then fix the IOMMU/ACS instead).",
    severity=Severity.WARNING,
    docs_url=NCCL_ENV_DOCS,
)
SHM_DISABLED = declare(
    id="NCC003",
    category=Category.NCCL_SHARED_MEMORY,
    summary="NCCL shared-memory transport is switched off",
    what="NCCL_SHM_DISABLE=1 stops NCCL from passing data between processes via /dev/shm.",
    why="Where GPUs have no P2P path, NCCL falls back to sockets: much slower, or no path.",
    fix="Unset NCCL_SHM_DISABLE and give the container enough /dev/shm instead.",
    severity=Severity.WARNING,
    docs_url=NCCL_ENV_DOCS,
)
IB_DISABLED = declare(
    id="NCC004",
    category=Category.NCCL_NETWORK,
    summary="InfiniBand is present but NCCL_IB_DISABLE=1",
    what="The machine has active InfiniBand/RoCE ports and NCCL is told not to use them.",
    why="Multi-node traffic then goes over TCP sockets, many times slower than the IB fabric.",
    fix="Unset NCCL_IB_DISABLE.",
    severity=Severity.WARNING,
    docs_url=NCCL_ENV_DOCS,
)
IFNAME_MISSING = declare(
    id="NCC005",
    category=Category.NCCL_NETWORK,
    summary="NCCL_SOCKET_IFNAME names no usable interface",
    what="No network interface that is up matches NCCL_SOCKET_IFNAME.",
    why=("NCCL cannot bootstrap: init_process_group fails with 'no socket interface found' or "
         "hangs until the timeout."),
    fix="Set NCCL_SOCKET_IFNAME to an interface that is up (see `ip -br addr`), or unset it.",
    docs_url=NCCL_ENV_DOCS,
)
DEBUG_ON = declare(
    id="NCC006",
    # Not a fault: verbose logging on every rank slows the job and buries real errors.
    category=Category.PERFORMANCE_DEGRADED,
    summary="NCCL debug logging is left on",
    what="NCCL_DEBUG=INFO or TRACE makes every rank print NCCL's setup and (TRACE) each call.",
    why="Logs grow large and real errors drown; keep it for diagnosing, then switch it off.",
    fix="unset NCCL_DEBUG (or NCCL_DEBUG=WARN to print only the reason of a failure).",
    severity=Severity.INFO,
    docs_url=NCCL_ENV_DOCS,
)
NVLINK_NO_P2P = declare(
    id="NCC007",
    category=Category.NCCL_P2P,
    summary="GPUs joined by NVLink report no peer-to-peer access",
    what="torch.cuda.can_device_access_peer is False for a pair that NVML shows on NVLink.",
    why=("NCCL then routes that pair through host memory, or fails; on NVSwitch boards this "
         "usually means the Fabric Manager is not running or the NVLinks are down."),
    fix=("Check the links (`nvidia-smi nvlink --status`), the fabric manager on NVSwitch "
         "systems, and Xid 74 NVLink errors in the kernel log."),
    docs_url=NCCL_TROUBLE,
)
IOMMU_P2P = declare(
    id="NCC008",
    category=Category.NCCL_P2P,
    summary="PCIe P2P is enabled with the IOMMU translating: the known NCCL hang",
    what=("CUDA reports P2P between GPUs that talk over PCIe while the IOMMU is on (not in "
          "passthrough): PCIe ACS then redirects P2P traffic through the CPU."),
    why=("The first NCCL collective (often DDP's initial broadcast) hangs or runs at a "
         "fraction of PCIe speed (NVIDIA/nccl#199)."),
    fix=("Test with NCCL_P2P_DISABLE=1; if that helps, boot with `iommu=pt` (or disable "
         "the IOMMU / ACS in the BIOS), or keep NCCL_P2P_DISABLE=1."),
    severity=Severity.WARNING,
    docs_url=NCCL_TROUBLE,
)
IB_DOWN = declare(
    id="NCC009",
    category=Category.NCCL_NETWORK,
    summary="InfiniBand/RoCE ports are down",
    what="The machine has InfiniBand/RoCE ports and none of them is ACTIVE.",
    why=("Multi-node NCCL either fails to connect over IB or falls back to slow TCP sockets."),
    fix="Check the cable and subnet manager (`ibstat`), or set NCCL_IB_DISABLE=1 for "
        "single-node jobs.",
    severity=Severity.WARNING,
    docs_url=NCCL_TROUBLE,
)
P2P_PROBE_HUNG = declare(
    id="NCC010",
    category=Category.NCCL_P2P,
    summary="Asking CUDA for peer access hung",
    what="torch.cuda.can_device_access_peer did not answer before the probe's deadline.",
    why="A P2P query that hangs points at a wedged driver or PCIe path; NCCL will hang too.",
    fix="Look for Xid errors in the kernel log, reset the GPUs or reboot; test with "
        "NCCL_P2P_DISABLE=1.",
    docs_url=NCCL_TROUBLE,
)


def _on(value: str | None) -> bool:
    return (value or "").strip().lower() in TRUTHY


def _topology(facts: FactsView) -> Topology:
    nvml = facts.nvml()
    topo = nvml.get("topology") if nvml.get("initialized") else None
    return topo if topo and topo.get("link") else {}


def _has_nvlink(topo: Topology) -> bool:
    return any(n for row in topo.get("nvlinks") or [] for n in row or [] if n)


def all_reduce_test(facts: FactsView, n: int) -> str:
    """A shell command timing NCCL all_reduce over N GPUs with the diagnosed torch."""
    python = facts.target_python()
    return (f"{python} -m torch.distributed.run --standalone --nproc_per_node {n} --no-python "
            f"{python} -c \"{ALL_REDUCE_CODE}\"")


_RPM_LIKE = frozenset({"fedora", "rhel", "centos", "rocky", "almalinux", "ol", "amzn"})


def _iommu_pt_command(facts: FactsView) -> str:
    """Add iommu=pt to the kernel command line the distribution's way, then reboot."""
    if facts.distro_id() in _RPM_LIKE:
        return "sudo grubby --update-kernel=ALL --args=iommu=pt && sudo reboot"
    return ("sudo sed -i 's/^GRUB_CMDLINE_LINUX=\"/&iommu=pt /' /etc/default/grub && "
            "sudo update-grub && sudo reboot")


@check(
    id="nccl.available",
    title="NCCL in this PyTorch",
    area="nccl",
    requires=("torch",),
    codes=(NCCL_MISSING,),
    blocked_by=("torch.import", "torch.cuda_build"),
)
def nccl_available(facts: FactsView) -> Iterator[Finding | Summary]:
    torch = facts.torch()
    dist = torch.get("distributed") or {}
    version = facts.nccl_version()
    if not facts.torch_build().get("cuda"):
        yield Summary("not a CUDA build of torch: NCCL is not expected")
        return
    if dist.get("available") and dist.get("nccl_available"):
        yield Summary(f"NCCL {version or '(version unknown)'}")
        return
    if "distributed" not in torch:  # facts from a pasted report: not recorded
        yield Summary("torch.distributed and NCCL not reported")
        return
    system = facts.os().get("system") or ""
    reason = ("torch.distributed is not available" if not dist.get("available")
              else "torch.distributed.is_nccl_available() is False")
    steps = [Step("Use the gloo backend, which every build has.",
                  command=f"{facts.target_python()} -c \"import torch.distributed as d; "
                          f"print(d.is_gloo_available())\"  # then init_process_group('gloo')")]
    if system in ("Windows", "Darwin"):
        steps.append(Step("For NCCL, train under Linux or WSL2 with a Linux CUDA build of "
                          "torch.", command="wsl --install -d Ubuntu",
                          url="https://docs.nvidia.com/cuda/wsl-user-guide/index.html"))
    else:
        # An official Linux CUDA wheel bundles NCCL (nvidia-nccl-cu*): install one this
        # driver runs, with torchvision/torchaudio of the same build.
        steps += install_steps(facts, "torch torchvision torchaudio")
    yield Finding(
        code=NCCL_MISSING,
        title=f"This PyTorch build has no NCCL ({reason}"
              f"{' on ' + system if system else ''}): multi-GPU DDP cannot use 'nccl'",
        evidence=(Evidence("torch.distributed", str(dist), "torch probe"),
                  Evidence("NCCL version", str(version), "torch.cuda.nccl.version()")),
        remediation=tuple(steps),
    )


def _ifname_matches(spec: str, names: list[str]) -> list[str]:
    """Interfaces NCCL would consider for SPEC: prefixes, '=' exact, '^' exclusion."""
    spec = spec.strip()
    exclude = spec.startswith("^")
    spec = spec.lstrip("^")
    exact = spec.startswith("=")
    spec = spec.lstrip("=")
    parts = [p for p in spec.split(",") if p]

    def hit(name: str) -> bool:
        return any(name == p if exact else name.startswith(p) for p in parts)

    return [n for n in names if hit(n) != exclude]


@check(
    id="nccl.env",
    title="NCCL environment variables",
    area="nccl",
    requires=("env_vars",),
    codes=(P2P_DISABLED, SHM_DISABLED, IB_DISABLED, IFNAME_MISSING, DEBUG_ON),
)
def nccl_env(facts: FactsView) -> Iterator[Finding | Summary]:
    env = facts.env_vars()
    nccl = {k: v for k, v in sorted(env.items()) if k.startswith("NCCL_")}
    inter = facts.interconnect()
    topo = _topology(facts)
    level = (env.get("NCCL_P2P_LEVEL") or "").strip().upper()
    if _on(env.get("NCCL_P2P_DISABLE")) or level in ("LOC", "0"):
        what = "NCCL_P2P_DISABLE=1" if _on(env.get("NCCL_P2P_DISABLE")) else \
            f"NCCL_P2P_LEVEL={level}"
        nvlink = _has_nvlink(topo)
        yield Finding(
            code=P2P_DISABLED,
            title=f"{what} turns off GPU peer-to-peer"
                  + (": this machine's NVLinks go unused" if nvlink else
                     " (traffic goes through host memory)"),
            severity=Severity.WARNING if nvlink else Severity.INFO,
            evidence=(Evidence(what.split("=")[0], what.split("=")[1], "environment"),
                      Evidence("GPU links", _topology_summary(topo) or "unknown",
                               "NVML topology")),
            remediation=(
                Step("Unset it, then confirm the first all-reduce completes quickly.",
                     command="unset NCCL_P2P_DISABLE NCCL_P2P_LEVEL"),
                Step("Measure all_reduce bandwidth as it is now, then again after `unset "
                     "NCCL_P2P_DISABLE NCCL_P2P_LEVEL`. " + NCCL_TESTS_NOTE,
                     command=all_reduce_test(facts, 2)),
            ),
        )
    if _on(env.get("NCCL_SHM_DISABLE")):
        yield Finding(
            code=SHM_DISABLED,
            title="NCCL_SHM_DISABLE=1 turns off NCCL's shared-memory transport",
            evidence=(Evidence("NCCL_SHM_DISABLE", env["NCCL_SHM_DISABLE"], "environment"),),
            remediation=(Step("Unset it.", command="unset NCCL_SHM_DISABLE"),
                         Step("If it was set for a small /dev/shm, enlarge /dev/shm instead "
                              "(see HST001).", command="df -h /dev/shm")),
        )
    active_ib = [p for p in inter.get("infiniband") or [] if p.get("active")]
    if _on(env.get("NCCL_IB_DISABLE")) and active_ib:
        yield Finding(
            code=IB_DISABLED,
            title=f"NCCL_IB_DISABLE=1 while {len(active_ib)} InfiniBand/RoCE port"
                  f"{'s are' if len(active_ib) > 1 else ' is'} active: multi-node traffic "
                  f"falls back to TCP",
            evidence=tuple(Evidence(f"{p['device']} port {p['port']}",
                                    f"{p.get('state')}, {p.get('rate')}, {p.get('link_layer')}",
                                    "/sys/class/infiniband") for p in active_ib),
            remediation=(Step("Unset it.", command="unset NCCL_IB_DISABLE"),
                         Step("Confirm NCCL picks IB (look for 'NET/IB : Using').",
                              command="NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET "
                                      f"{facts.target_python()} -m torch.distributed.run "
                                      f"--nproc_per_node 2 your_script.py 2>&1 | grep NET/")),
        )
    ifname = env.get("NCCL_SOCKET_IFNAME")
    interfaces = inter.get("interfaces")
    if ifname and interfaces is not None:
        up = [i["name"] for i in interfaces if i.get("up")]
        if not _ifname_matches(ifname, up):
            listing = ", ".join(f"{i['name']} ({'up' if i.get('up') else 'down'})"
                                for i in interfaces)
            candidates = [n for n in up if n != "lo" and not n.startswith(("docker", "virbr"))]
            yield Finding(
                code=IFNAME_MISSING,
                title=f"NCCL_SOCKET_IFNAME={ifname} matches no interface that is up "
                      f"(up: {', '.join(up) or 'none'})",
                evidence=(Evidence("NCCL_SOCKET_IFNAME", ifname, "environment"),
                          Evidence("interfaces", listing or "none", "psutil.net_if_stats")),
                remediation=(
                    Step("List interfaces and their addresses.", command="ip -br addr"),
                    Step("Point NCCL at an interface that is up and reaches the other nodes.",
                         command="export NCCL_SOCKET_IFNAME="
                                 + (candidates[0] if candidates else "eth0")),
                ),
            )
    debug = (env.get("NCCL_DEBUG") or "").strip().upper()
    if debug in ("INFO", "TRACE"):
        yield Finding(
            code=DEBUG_ON,
            title=f"NCCL_DEBUG={debug} is set: every rank prints NCCL's setup"
                  + (" and every call" if debug == "TRACE" else ""),
            evidence=(Evidence("NCCL_DEBUG", env["NCCL_DEBUG"], "environment"),),
            remediation=(Step("Switch it off when not diagnosing (WARN still prints the reason "
                              "of a failure).", command="export NCCL_DEBUG=WARN"),),
        )
    yield Summary(", ".join(f"{k}={v}" for k, v in nccl.items()) or "no NCCL_* variables set")


def _topology_summary(topo: Topology) -> str:
    link = topo.get("link") or []
    counts: dict[str, int] = {}
    for i, row in enumerate(link):
        for j, cell in enumerate(row or []):
            if j > i and cell:
                counts[cell] = counts.get(cell, 0) + 1
    return ", ".join(f"{n} pair{'s' if n > 1 else ''} {word}"
                     for word, n in sorted(counts.items()))


def _cuda_to_nvml(facts: FactsView, n: int) -> list[int] | None:
    """NVML index of each CUDA device, by PCI bus number (identity when it cannot tell)."""
    nvml_gpus = facts.reachable_gpus()
    devices = facts.cuda_devices()
    buses: dict[int, int] = {}
    for g in nvml_gpus:
        try:
            buses[int((g.get("pci_bus_id") or "").split(":")[-2], 16)] = g["index"]
        except (IndexError, KeyError, ValueError):
            continue
    mapped = [buses.get(bus) if bus is not None else None
              for bus in (d.get("pci_bus_id") for d in devices)]
    if len(mapped) == n and None not in mapped and len(buses) == len(nvml_gpus):
        return [m for m in mapped if m is not None]
    return list(range(n)) if n == len(nvml_gpus) and not facts.env_var(
        "CUDA_VISIBLE_DEVICES") else None


@check(
    id="nccl.p2p",
    title="GPU peer-to-peer and topology",
    area="nccl",
    requires=("nvml",),
    codes=(NVLINK_NO_P2P, IOMMU_P2P, P2P_PROBE_HUNG),
    blocked_by=("driver.present",),
)
def nccl_p2p(facts: FactsView) -> Iterator[Finding | Summary]:
    topo = _topology(facts)
    nvml_gpus = facts.reachable_gpus()
    if len(nvml_gpus) < 2:
        yield Summary("single GPU: no peer-to-peer needed" if nvml_gpus else "no GPU")
        return
    summary = _topology_summary(topo) or "topology unknown"
    p2p = facts.torch_cuda().get("p2p") or None
    if p2p and p2p.get("timed_out"):
        yield Finding(
            code=P2P_PROBE_HUNG,
            title="torch.cuda.can_device_access_peer hung: the P2P query never answered",
            evidence=(Evidence("P2P probe", p2p.get("error") or "timed out", "torch probe"),),
            remediation=(Step("Look for Xid errors.", command="sudo dmesg -T | grep -i xid"),
                         Step("Try NCCL without P2P.", command="export NCCL_P2P_DISABLE=1")),
        )
    matrix = (p2p or {}).get("matrix")
    if not matrix or not topo:
        yield Summary(summary)
        return
    to_nvml = _cuda_to_nvml(facts, len(matrix))
    if to_nvml is None:
        yield Summary(summary + "; P2P matrix not matched to NVML GPUs")
        return
    nvlinks, pcie = topo.get("nvlinks") or [], topo.get("pcie") or []
    broken, pcie_p2p = [], []
    for a, row in enumerate(matrix):
        for b, ok in enumerate(row):
            if b <= a or ok is None:
                continue
            i, j = to_nvml[a], to_nvml[b]
            links = nvlinks[i][j] if i < len(nvlinks) and j < len(nvlinks[i]) else None
            if links and ok is False:
                broken.append((a, b, i, j, links))
            elif not links and ok is True:
                pcie_p2p.append((a, b, pcie[i][j] if pcie else None))
    if broken:
        pairs = ", ".join(f"cuda:{a}-cuda:{b} (NV{n})" for a, b, _, _, n in broken)
        yield Finding(
            code=NVLINK_NO_P2P,
            title=f"{len(broken)} GPU pair{'s' if len(broken) > 1 else ''} joined by NVLink "
                  f"report no peer access: {pairs}",
            evidence=(Evidence("can_device_access_peer False", pairs, "torch probe"),
                      Evidence("NVML topology", summary, "nvmlDeviceGetNvLinkState")),
            remediation=(
                Step("Check the NVLinks.", command="nvidia-smi nvlink --status"),
                Step("On NVSwitch (HGX/DGX) systems, the fabric manager must run.",
                     command="systemctl status nvidia-fabricmanager"),
                Step("Look for NVLink Xid 74 errors.", command="sudo dmesg -T | grep -i xid"),
                Step("Measure all_reduce bandwidth across the GPUs. " + NCCL_TESTS_NOTE,
                     command=all_reduce_test(facts, len(matrix))),
            ),
            affects=tuple(sorted({f"gpu:{i}" for _, _, i, _, _ in broken}
                                 | {f"gpu:{j}" for _, _, _, j, _ in broken})),
        )
    iommu = facts.interconnect().get("iommu") or {}
    p2p_off = _on(facts.env_var("NCCL_P2P_DISABLE"))
    if pcie_p2p and iommu.get("enabled") and not iommu.get("passthrough") and not p2p_off \
            and not facts.is_wsl():
        pairs = ", ".join(f"cuda:{a}-cuda:{b} ({lvl or 'PCIe'})" for a, b, lvl in pcie_p2p)
        yield Finding(
            code=IOMMU_P2P,
            title=f"IOMMU is on ({iommu.get('groups')} groups, no iommu=pt) and "
                  f"{len(pcie_p2p)} GPU pair{'s use' if len(pcie_p2p) > 1 else ' uses'} PCIe "
                  f"P2P: NCCL's first collective may hang",
            evidence=(Evidence("kernel command line", " ".join(iommu.get("cmdline_flags") or [])
                               or "(no iommu flags)", "/proc/cmdline"),
                      Evidence("IOMMU groups", str(iommu.get("groups")),
                               "/sys/kernel/iommu_groups"),
                      Evidence("PCIe P2P pairs", pairs, "torch.cuda.can_device_access_peer")),
            remediation=(
                Step("Test: if all_reduce finishes (or the job runs) with P2P off but hangs or "
                     "crawls without, the PCIe path is the problem.",
                     command="NCCL_P2P_DISABLE=1 " + all_reduce_test(facts, len(matrix))),
                Step("Keep NCCL on NVLink only (or off P2P) until fixed.",
                     command="export NCCL_P2P_DISABLE=1"),
                Step("Fix: IOMMU passthrough on the kernel command line (GRUB_CMDLINE_LINUX), "
                     "then reboot; or disable VT-d/IOMMU or ACS in the BIOS.",
                     command=_iommu_pt_command(facts), url=NCCL_TROUBLE),
                Step("Look at ACS on the PCIe bridges (ReqRedir+ CmpltRedir+ = redirected).",
                     command="sudo lspci -vvv | grep -i acsctl"),
            ),
        )
    yield Summary(summary)


@check(
    id="nccl.network",
    title="InfiniBand / RoCE",
    area="nccl",
    requires=("interconnect",),
    codes=(IB_DOWN,),
)
def nccl_network(facts: FactsView) -> Iterator[Finding | Summary]:
    ports = facts.interconnect().get("infiniband") or []
    if not ports:
        yield Summary("no InfiniBand/RoCE devices")
        return
    active = [p for p in ports if p.get("active")]
    if not active:
        yield Finding(
            code=IB_DOWN,
            title=(f"All {len(ports)} InfiniBand/RoCE ports are down: multi-node NCCL cannot "
                   f"use them" if len(ports) > 1 else "The only InfiniBand/RoCE port is down: "
                   "multi-node NCCL cannot use it"),
            evidence=tuple(Evidence(f"{p['device']} port {p['port']}", str(p.get("state")),
                                    "/sys/class/infiniband") for p in ports),
            remediation=(Step("Show port and link state.", command="ibstat"),
                         Step("For single-node jobs, keep NCCL off IB.",
                              command="export NCCL_IB_DISABLE=1")),
        )
        return
    rates = sorted({p.get("rate") or "?" for p in active})
    yield Summary(f"{len(active)} of {len(ports)} ports active ({', '.join(rates)})")


# ---------------------------------------------------------------- the P2P data test

P2P_COPY_FAILED = declare(
    id="NCC011",
    category=Category.NCCL_P2P,
    summary="Copying data between two GPUs hung or corrupted it",
    what=(
        "The interpreter probe copied a patterned 64 MiB buffer from every GPU to every other "
        "one and checked each word: for at least one pair the copy never finished within the "
        "deadline, or the data that arrived was not the data sent."
    ),
    why=(
        "NCCL moves gradients over the same path: DDP's first broadcast or all-reduce hangs "
        "until the watchdog kills it, or training silently goes wrong. PCIe P2P redirected "
        "through an IOMMU (ACS) is the usual cause; a failing link or GPU the other."
    ),
    fix=(
        "Test with NCCL_P2P_DISABLE=1; if that helps, boot with iommu=pt (or disable the "
        "IOMMU / ACS in the BIOS), or keep P2P off for that pair's level with NCCL_P2P_LEVEL."
    ),
    docs_url=NCCL_TROUBLE,
)
P2P_COPY_SLOW = declare(
    id="NCC012",
    category=Category.PERFORMANCE_DEGRADED,
    summary="Copies between two GPUs run far below their link's speed",
    what=(
        "The probe timed copies between every pair of GPUs: at least one pair moved data at "
        "under a quarter of what its link (NVLink, or the two GPUs' PCIe links) carries."
    ),
    why=(
        "NCCL's traffic between those GPUs crawls the same way, and DDP waits for the slowest "
        "pair at every all-reduce. Through an IOMMU that redirects P2P via the CPU (ACS), "
        "PCIe P2P runs at a fraction of its speed."
    ),
    fix=(
        "Compare all_reduce bandwidth with and without NCCL_P2P_DISABLE=1; fix the IOMMU "
        "(iommu=pt) or ACS, check NVLink health, or set NCCL_P2P_LEVEL to avoid the slow path."
    ),
    severity=Severity.WARNING,
    docs_url=NCCL_TROUBLE,
)


@dataclass(frozen=True)
class PairVerdict:
    """What one recorded pair of the P2P data test says, judged against its link."""

    src: int
    dst: int
    problem: str | None  # "hung", "corrupt", "slow", "error", or None (fine)
    text: str  # "GPU 2 -> GPU 5: copy hung after 15 s"
    expected_gbps: float | None
    link: str


def pair_expectation(nvlinks: int | None, links: list[PcieLink | None]) -> tuple[
        float | None, str]:
    """The GB/s a copy between two GPUs should approach, and the link it would use."""
    if nvlinks:
        return nvlinks * NVLINK_GBPS_PER_LINK, f"NV{nvlinks}"
    rates = [pcie_gbps((link or {}).get("gen_max"), (link or {}).get("width_max"))
             for link in links]
    if rates and all(r is not None for r in rates):
        slowest = min(r for r in rates if r is not None)
        worst = min(links, key=lambda link: pcie_gbps((link or {}).get("gen_max"),
                                                      (link or {}).get("width_max")) or 0)
        return slowest, f"PCIe Gen{(worst or {}).get('gen_max')} x{(worst or {}).get('width_max')}"
    return None, "link unknown"


def judge_pairs(copy: P2pCopy, expect: Callable[[int, int], tuple[float | None, str]]) -> list[
        PairVerdict]:
    """Each recorded pair's verdict; ``expect(src, dst)`` gives its link's rate and name."""
    verdicts = []
    for pair in copy.get("pairs") or []:
        src, dst = int(pair.get("src") or 0), int(pair.get("dst") or 0)
        rate, link = expect(src, dst)
        head = f"GPU {src} -> GPU {dst}"
        gbps = pair.get("gbps")
        if pair.get("timed_out"):
            problem, text = "hung", f"{head}: {pair.get('error') or 'copy hung'}"
        elif pair.get("corrupt"):
            problem, text = "corrupt", f"{head}: data corrupted ({pair.get('error')})"
        elif not pair.get("ok"):
            problem, text = "error", f"{head}: {pair.get('error') or 'failed'}"
        elif gbps is not None and rate and gbps < SLOW_FRACTION * rate:
            problem, text = "slow", (f"{head}: {gbps:.1f} GB/s over {link} "
                                     f"(expected about {rate:.0f} GB/s)")
        else:
            problem, text = None, f"{head}: {gbps} GB/s"
        verdicts.append(PairVerdict(src, dst, problem, text, rate, link))
    return verdicts


def _pair_steps(facts: FactsView, n: int) -> tuple[Step, ...]:
    """The IOMMU/ACS and NCCL_P2P_* advice of NCC008, for a pair the data test caught."""
    return (
        Step("Test: if all_reduce finishes (or the job runs) with P2P off but hangs or crawls "
             "without, the P2P path is the problem.",
             command="NCCL_P2P_DISABLE=1 " + all_reduce_test(facts, n)),
        Step("Keep NCCL off the bad path until fixed: P2P off entirely, or P2P only within "
             "a PCIe switch (NCCL_P2P_LEVEL=PXB) or over NVLink (NCCL_P2P_LEVEL=NVL).",
             command="export NCCL_P2P_DISABLE=1", url=NCCL_ENV_DOCS),
        Step("Fix: IOMMU passthrough on the kernel command line, then reboot; or disable "
             "VT-d/IOMMU or ACS in the BIOS.", command=_iommu_pt_command(facts),
             url=NCCL_TROUBLE),
        Step("Look at ACS on the PCIe bridges (ReqRedir+ CmpltRedir+ = redirected).",
             command="sudo lspci -vvv | grep -i acsctl"),
        Step("Look for Xid errors (74: NVLink; 79: fallen off the bus).",
             command="sudo dmesg -T | grep -i xid"),
    )


@check(
    id="nccl.p2p_data",
    title="GPU-to-GPU copies",
    area="nccl",
    requires=("torch",),
    codes=(P2P_COPY_FAILED, P2P_COPY_SLOW),
    blocked_by=("torch.import", "torch.cuda_build"),
)
def nccl_p2p_data(facts: FactsView) -> Iterator[Finding | Summary]:
    copy = facts.torch_cuda().get("p2p_copy")
    n = len(facts.cuda_devices()) or int(facts.torch_cuda().get("device_count") or 0)
    if not copy:
        yield Summary("fewer than 2 CUDA devices: no GPU pairs to copy between" if n < 2 else
                      "no P2P data test recorded (fewer than 2 GPUs passed their test, or a "
                      "snapshot from an older version)")
        return
    to_nvml = _cuda_to_nvml(facts, n) if n else None
    topo = _topology(facts)
    nvml_gpus = {g.get("index"): g for g in facts.reachable_gpus()}

    def expect(src: int, dst: int) -> tuple[float | None, str]:
        if to_nvml is None or src >= len(to_nvml) or dst >= len(to_nvml):
            return None, "link unknown"
        i, j = to_nvml[src], to_nvml[dst]
        nvlinks = topo.get("nvlinks") or []
        links = nvlinks[i][j] if i < len(nvlinks) and j < len(nvlinks[i]) else None
        return pair_expectation(links, [(nvml_gpus.get(i) or {}).get("pcie"),
                                        (nvml_gpus.get(j) or {}).get("pcie")])

    verdicts = judge_pairs(copy, expect)
    size = human_bytes(copy.get("bytes"))
    failed = [v for v in verdicts if v.problem in ("hung", "corrupt", "error")]
    slow = [v for v in verdicts if v.problem == "slow"]
    not_run = copy.get("not_run") or []
    gpus = sorted({f"gpu:{g}" for v in failed + slow for g in (v.src, v.dst)})
    if failed:
        evidence = [Evidence("pair", v.text, "P2P data test (torch probe)") for v in failed]
        if not_run:
            evidence.append(Evidence("not run", f"{count(len(not_run), 'pair')} after: "
                                     f"{copy.get('stopped')}", "P2P data test"))
        first = failed[0]
        more = f" (and {count(len(failed) - 1, 'more pair')})" if len(failed) > 1 else ""
        yield Finding(code=P2P_COPY_FAILED, title=f"{first.text}{more}",
                      evidence=tuple(evidence), remediation=_pair_steps(facts, n or 2),
                      affects=tuple(gpus))
    if slow:
        slowest = min(slow, key=lambda v: (next(
            (p.get("gbps") for p in copy.get("pairs") or []
             if p.get("src") == v.src and p.get("dst") == v.dst), 0) or 0))
        more = f" (and {count(len(slow) - 1, 'more pair')})" if len(slow) > 1 else ""
        yield Finding(code=P2P_COPY_SLOW, title=f"{slowest.text}{more}",
                      evidence=tuple(Evidence("pair", v.text, "P2P data test (torch probe)")
                                     for v in slow),
                      remediation=_pair_steps(facts, n or 2), affects=tuple(gpus))
    rates = [float(p.get("gbps") or 0) for p in copy.get("pairs") or []
             if p.get("ok") and p.get("gbps")]
    span = (f", {min(rates):.1f}-{max(rates):.1f} GB/s" if rates else "")
    yield Summary(f"{count(len(verdicts), 'pair')} copied {size} x{copy.get('repeats')}{span}"
                  + (f"; {count(len(not_run), 'pair')} not run ({copy.get('stopped')})"
                     if not_run else ""))
