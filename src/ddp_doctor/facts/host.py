"""Host facts through psutil: CPU, RAM, swap, /dev/shm, disk, limits.

/dev/shm matters more than its size suggests: NCCL puts its intra-node transport
buffers there and DataLoader workers pass every batch through it, and Docker gives a
container only 64 MB unless told otherwise
(https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html).

The rendezvous port: torchrun's master listens on MASTER_PORT, 29500 unless told otherwise
(``torch/distributed/run.py`` ``--master-port`` default), and a second job or a stale rank
still holding it makes the new one fail with "Address already in use". The probe looks at
the listening TCP sockets (``psutil.net_connections``, the pid where the OS shows it) and,
when those cannot be read, tries to bind the port on this host; it never goes on the
network.
"""

from __future__ import annotations

import contextlib
import os
import socket
from typing import Any, Callable

from ddp_doctor.facts.seam import Env
from ddp_doctor.facts.shapes import DiskUsage, HostFact, NofileLimit, RendezvousPort

SHM_PATH = "/dev/shm"
DEFAULT_MASTER_PORT = 29500


def _disk(psutil: Any, path: str) -> DiskUsage | None:
    try:
        usage = psutil.disk_usage(path)
    except OSError:
        return None
    return {"path": path, "total": usage.total, "free": usage.free, "used": usage.used}


def _cgroup_memory_limit(env: Env) -> int | None:
    """The container's memory cap (cgroup v2, then v1); None when unlimited."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        text = (env.read_text(path) or "").strip()
        if text.isdigit():
            value = int(text)
            return value if value < 1 << 60 else None  # v1 reports "unlimited" as ~2^63
    return None


def bind_test(port: int) -> bool | None:
    """True when PORT is taken on this host (bind fails with EADDRINUSE), None if unknown."""
    for family, address in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                sock.bind((address, port))
        except OSError as exc:
            if exc.errno == 98:  # EADDRINUSE
                return True
            if family == socket.AF_INET:
                return None
    return False


def _master_port(environ: dict[str, str]) -> tuple[int, str]:
    text = (environ.get("MASTER_PORT") or "").strip()
    if text.isdigit() and 0 < int(text) < 65536:
        return int(text), "MASTER_PORT"
    return DEFAULT_MASTER_PORT, "torchrun default"


def rendezvous_port(env: Env, bind: Callable[[int], bool | None] = bind_test) -> RendezvousPort:
    """Whether the rendezvous port is already listening, and by which process if visible."""
    port, source = _master_port(env.environ())
    psutil = env.psutil()
    info: RendezvousPort = {"port": port, "source": source, "in_use": None, "pid": None,
                            "process": None, "method": None, "error": None}
    try:
        conns = psutil.net_connections(kind="tcp")
    except Exception as exc:  # AccessDenied on some systems (macOS), missing in old psutil
        info["error"] = f"net_connections: {type(exc).__name__}: {exc}"
    else:
        info["method"] = "psutil.net_connections"
        info["in_use"] = False
        for conn in conns:
            laddr = getattr(conn, "laddr", None)
            if conn.status == "LISTEN" and laddr and laddr[1] == port:
                info["in_use"] = True
                info["pid"] = conn.pid
                if conn.pid:
                    with contextlib.suppress(Exception):  # gone, or another user's
                        info["process"] = psutil.Process(conn.pid).name()
                break
        return info
    info["method"] = "bind test"
    info["in_use"] = bind(port)
    return info


def probe_host(env: Env, workdir: str | None = None) -> HostFact:
    psutil = env.psutil()
    vm = psutil.virtual_memory()
    swap = psutil.swap_memory()
    nofile: NofileLimit | None = None
    try:
        soft, hard = psutil.Process().rlimit(psutil.RLIMIT_NOFILE)
        nofile = {"soft": soft, "hard": hard}
    except (AttributeError, OSError):
        pass
    shm_mounted = env.exists(SHM_PATH)
    return {
        "cpu_logical": psutil.cpu_count(logical=True),
        "cpu_physical": psutil.cpu_count(logical=False),
        "cpu_affinity": len(psutil.Process().cpu_affinity())
        if hasattr(psutil.Process(), "cpu_affinity")
        else None,
        "memory_total": vm.total,
        "memory_available": vm.available,
        "swap_total": swap.total,
        "cgroup_memory_limit": _cgroup_memory_limit(env),
        "shm": _disk(psutil, SHM_PATH) if shm_mounted else {"path": SHM_PATH, "missing": True},
        "disk": _disk(psutil, workdir or os.getcwd()),
        "nofile_limit": nofile,
        "rendezvous_port": rendezvous_port(env),
    }
