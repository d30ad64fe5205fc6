"""What sits between the GPUs and between machines: the IOMMU, InfiniBand/RoCE ports, NICs.

These decide which NCCL transports can work. An IOMMU in translated mode turns on PCIe
ACS, which redirects GPU peer-to-peer traffic through the CPU root complex: the first
collective then hangs or crawls (NCCL troubleshooting, "PCI Access Control Services").
InfiniBand ports that are down, or a ``NCCL_SOCKET_IFNAME`` naming an interface that is
not there, leave NCCL without a network path between nodes.

All reads go through the ``Env`` seam (files under /proc and /sys, psutil), in-process:
nothing here touches the driver.

Sources:
- https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html
  (ACS/IOMMU; "iommu=pt")
- Kernel parameters intel_iommu=, amd_iommu=, iommu=, iommu.passthrough=:
  https://www.kernel.org/doc/html/latest/admin-guide/kernel-parameters.html
- /sys/class/infiniband/<dev>/ports/<n>/{state,rate,link_layer}: Linux
  Documentation/ABI/stable/sysfs-class-infiniband
- psutil.net_if_addrs / net_if_stats: https://psutil.readthedocs.io/en/latest/#network
"""

from __future__ import annotations

import socket
from typing import Any

from ddp_doctor.facts.seam import Env

IB_ROOT = "/sys/class/infiniband"
IOMMU_GROUPS = "/sys/kernel/iommu_groups"
_IOMMU_PREFIXES = ("intel_iommu=", "amd_iommu=", "iommu=", "iommu.passthrough=",
                   "iommu.strict=")
_ADDRESS_FAMILIES = {socket.AF_INET: "ipv4", socket.AF_INET6: "ipv6"}


def probe_iommu(env: Env) -> dict[str, Any]:
    """IOMMU flags from the kernel command line and whether it made any groups.

    ``enabled``: the kernel set up IOMMU groups (or was told ``intel_iommu=on``).
    ``passthrough``: DMA is not translated for host devices (``iommu=pt`` or
    ``iommu.passthrough=1``), the setting NCCL's guide suggests to keep P2P working.
    """
    cmdline = (env.read_text("/proc/cmdline") or "").split()
    flags = [arg for arg in cmdline if arg.startswith(_IOMMU_PREFIXES)]
    groups = len(env.listdir(IOMMU_GROUPS))
    off = any(f in ("intel_iommu=off", "amd_iommu=off", "iommu=off") for f in flags)
    enabled = not off and (groups > 0 or "intel_iommu=on" in flags)
    passthrough = "iommu=pt" in flags or "iommu.passthrough=1" in flags
    return {"cmdline_flags": flags, "groups": groups, "enabled": enabled,
            "passthrough": passthrough, "cmdline_read": bool(cmdline)}


def _first_line(env: Env, path: str) -> str | None:
    text = env.read_text(path)
    return text.strip().splitlines()[0].strip() if text and text.strip() else None


def probe_infiniband(env: Env) -> list[dict[str, Any]]:
    """Every InfiniBand/RoCE port: device, port number, state ("4: ACTIVE"), rate, link layer."""
    ports = []
    for dev in env.listdir(IB_ROOT):
        for port in env.listdir(f"{IB_ROOT}/{dev}/ports"):
            base = f"{IB_ROOT}/{dev}/ports/{port}"
            state = _first_line(env, f"{base}/state")
            ports.append({
                "device": dev,
                "port": int(port) if port.isdigit() else port,
                "state": state,
                "active": bool(state and state.upper().endswith("ACTIVE")),
                "rate": _first_line(env, f"{base}/rate"),
                "link_layer": _first_line(env, f"{base}/link_layer"),
            })
    return ports


def probe_interfaces(env: Env) -> list[dict[str, Any]]:
    """Network interfaces with their IP addresses, up state and speed (psutil)."""
    psutil = env.psutil()
    addrs = psutil.net_if_addrs()
    stats = psutil.net_if_stats()
    out = []
    for name in sorted(set(addrs) | set(stats)):
        stat = stats.get(name)
        out.append({
            "name": name,
            "up": bool(stat.isup) if stat is not None else None,
            "speed_mbps": (stat.speed or None) if stat is not None else None,
            "mtu": stat.mtu if stat is not None else None,
            "addresses": [
                {"family": _ADDRESS_FAMILIES[a.family], "address": a.address}
                for a in addrs.get(name, []) if a.family in _ADDRESS_FAMILIES
            ],
        })
    return out


def probe_interconnect(env: Env) -> dict[str, Any]:
    """The ``interconnect`` fact. Each part fails alone: its key holds None and an error."""
    value: dict[str, Any] = {"errors": {}}
    for key, fn in (("iommu", probe_iommu), ("infiniband", probe_infiniband),
                    ("interfaces", probe_interfaces)):
        try:
            value[key] = fn(env)
        except Exception as exc:
            value[key] = None
            value["errors"][key] = f"{type(exc).__name__}: {exc}"
    return value
