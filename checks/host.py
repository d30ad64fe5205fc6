"""Host checks: the machine around the GPUs.

/dev/shm: NCCL keeps its intra-node transport buffers in /dev/shm segments and
DataLoader workers hand every batch to the main process through it. Docker gives a
container 64 MB unless started with ``--ipc=host`` or ``--shm-size`` (moby/moby#29492),
and NCCL then fails with "unhandled system error" / "Error while creating shared memory
segment", DataLoader workers with "Bus error". NVIDIA recommends ``--shm-size=1g``
(https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html#sharing-data);
DeepSpeed's environment report warns below 512 MB (deepspeed/env_report.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gpu_doctor.checks._util import GIB, MIB, human_bytes

from gpu_doctor.categories import Category
from gpu_doctor.model import Code, Evidence, Finding, Severity, Step
from gpu_doctor.registry import Summary, check

SHM_ERROR_BELOW = 512 * MIB
SHM_WARN_BELOW = 1 * GIB
SHM_FREE_WARN_BELOW = 256 * MIB

NCCL_SHM_TROUBLESHOOTING = (
    "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html"
)

SHM_TOO_SMALL = Code(
    id="HST001",
    category=Category.NCCL_SHARED_MEMORY,
    summary="/dev/shm is too small for NCCL and DataLoader workers",
    what=(
        "The shared-memory filesystem /dev/shm is missing, small or nearly full. Docker "
        "and many Kubernetes setups give a container only 64 MB."
    ),
    why=(
        "NCCL puts its intra-node transport buffers in /dev/shm and DataLoader workers pass "
        "every batch through it. When it runs out, NCCL fails with 'unhandled system error' "
        "or 'Error while creating shared memory segment', and workers die with 'Bus error'."
    ),
    fix=(
        "Give the container the host's IPC namespace (`docker run --ipc=host`) or a larger "
        "/dev/shm (`--shm-size=16g`); in Kubernetes mount an emptyDir with medium: Memory at "
        "/dev/shm; on a host, remount /dev/shm larger."
    ),
    docs_url=NCCL_SHM_TROUBLESHOOTING,
)


_CONTAINER_PHRASES = {
    "docker": "a Docker container",
    "podman": "a Podman container",
    "kubernetes": "a Kubernetes pod",
    "lxc": "an LXC container",
    "containerd": "a containerd container",
}


def shm_steps(container: dict[str, Any]) -> list[Step]:
    """Ways to enlarge /dev/shm, the one for this kind of machine first."""
    docker = Step("Docker: share the host's IPC namespace, or give the container a larger "
                  "/dev/shm.", command="docker run --ipc=host ...   # or: --shm-size=16g",
                  url=NCCL_SHM_TROUBLESHOOTING)
    kubernetes = Step(
        "Kubernetes: mount a memory-backed emptyDir at /dev/shm.",
        command="volumes: [{name: dshm, emptyDir: {medium: Memory, sizeLimit: 16Gi}}]; "
                "volumeMounts: [{name: dshm, mountPath: /dev/shm}]",
    )
    host = Step("Bare metal or VM: remount /dev/shm larger (lasts until reboot; set it in "
                "/etc/fstab to keep it).", command="sudo mount -o remount,size=16G /dev/shm")
    workers = Step("Until then, fewer DataLoader workers lowers the pressure "
                   "(e.g. `--workers 0` in YOLO training).")
    kind = container.get("kind")
    if kind == "kubernetes":
        return [kubernetes, docker, workers]
    if container.get("in_container"):
        return [docker, kubernetes, workers]
    return [host, workers]


@check(
    id="host.shm",
    title="Shared memory (/dev/shm)",
    area="host",
    requires=("host", "os"),
    codes=(SHM_TOO_SMALL,),
)
def shared_memory(facts: Any) -> Iterator[Finding | Summary]:
    shm = facts["host"].get("shm") or {}
    container = facts["os"].get("container") or {}
    steps = tuple(shm_steps(container))
    where = ""
    if container.get("in_container"):
        where = " inside " + _CONTAINER_PHRASES.get(container.get("kind") or "", "a container")
    if shm.get("missing") or shm.get("total") is None:
        yield Finding(
            code=SHM_TOO_SMALL,
            title=f"/dev/shm is not mounted{where}",
            evidence=(Evidence("/dev/shm", "not found", "filesystem"),),
            remediation=steps,
        )
        return
    total, free = shm["total"], shm.get("free") or 0
    evidence = (
        Evidence("/dev/shm size", human_bytes(total), "df /dev/shm (psutil.disk_usage)"),
        Evidence("/dev/shm free", human_bytes(free), "df /dev/shm (psutil.disk_usage)"),
        Evidence("container", container.get("kind") or "none detected",
                 "; ".join(container.get("evidence") or []) or "/.dockerenv, /proc/1/cgroup"),
    )
    if total < SHM_WARN_BELOW:
        severity = Severity.ERROR if total < SHM_ERROR_BELOW else Severity.WARNING
        yield Finding(
            code=SHM_TOO_SMALL,
            title=f"/dev/shm is only {human_bytes(total)}{where}; NCCL and DataLoader workers "
                  f"need at least 1 GiB",
            severity=severity,
            evidence=evidence,
            remediation=steps,
        )
        return
    if free < SHM_FREE_WARN_BELOW:
        yield Finding(
            code=SHM_TOO_SMALL,
            title=f"/dev/shm is nearly full: {human_bytes(free)} of {human_bytes(total)} free",
            severity=Severity.WARNING,
            evidence=evidence,
            remediation=(
                Step("Look for segments left behind by crashed jobs and remove those of "
                     "processes that are gone.", command="ls -la /dev/shm/ | head -50"),
                *steps,
            ),
        )
        return
    yield Summary(f"{human_bytes(total)} ({human_bytes(free)} free)")
