"""Host checks: the machine around the GPUs.

/dev/shm: NCCL keeps its intra-node transport buffers in /dev/shm segments and
DataLoader workers hand every batch to the main process through it. Docker gives a
container 64 MB unless started with ``--ipc=host`` or ``--shm-size`` (moby/moby#29492),
and NCCL then fails with "unhandled system error" / "Error while creating shared memory
segment", DataLoader workers with "Bus error". NVIDIA recommends ``--shm-size=1g``
(https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html#sharing-data);
DeepSpeed's environment report warns below 512 MB (deepspeed/env_report.py).

RAM, CPU cores and disk: sized by the rules of thumb in ``ddp_doctor/facts/sizing.py``
(sources there). Open files: DataLoader workers hand tensors to the main process through file
descriptors by default on Linux (``file_descriptor`` sharing strategy,
https://docs.pytorch.org/docs/stable/multiprocessing.html), and a low ``ulimit -n`` ends
in "received 0 items of ancdata" or "Too many open files" (pytorch/pytorch#973). The
rendezvous port: torchrun's master listens on ``--master-port`` / MASTER_PORT, 29500 by
default (``torch/distributed/run.py``); a second job or a stale rank on it fails the new
one with "Address already in use"
(https://docs.pytorch.org/docs/stable/elastic/run.html for ``--standalone``).
"""

from __future__ import annotations

from collections.abc import Iterator

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.facts.shapes import Container
from ddp_doctor.facts.sizing import WORKER_BYTES
from ddp_doctor.facts.view import FactsView
from ddp_doctor.model import Evidence, Finding, Severity, Step
from ddp_doctor.registry import Summary, check
from ddp_doctor.wording import count

from ._util import GIB, MIB, human_bytes, workers_phrase

SHM_ERROR_BELOW = 512 * MIB
SHM_WARN_BELOW = 1 * GIB
SHM_FREE_WARN_BELOW = 256 * MIB

NCCL_SHM_TROUBLESHOOTING = (
    "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html"
)

SHM_TOO_SMALL = declare(
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


def shm_steps(container: Container) -> list[Step]:
    """Ways to enlarge /dev/shm, the one for this kind of machine first."""
    docker = Step("Docker: share the host's IPC namespace, or give the container a larger "
                  "/dev/shm.", command="docker run --ipc=host ...   # or: --shm-size=16g",
                  url=NCCL_SHM_TROUBLESHOOTING)
    kubernetes = Step(
        "Kubernetes: mount a memory-backed emptyDir at /dev/shm. In the pod spec add "
        "`volumes: [{name: dshm, emptyDir: {medium: Memory, sizeLimit: 16Gi}}]` and, in the "
        "training container, `volumeMounts: [{name: dshm, mountPath: /dev/shm}]`.",
        url="https://kubernetes.io/docs/concepts/storage/volumes/#emptydir",
    )
    host = Step("Bare metal or VM: remount /dev/shm larger (lasts until reboot; set it in "
                "/etc/fstab to keep it).", command="sudo mount -o remount,size=16G /dev/shm")
    workers = Step("Until then, fewer DataLoader workers lowers the pressure: "
                   "DataLoader(num_workers=0) in your script, or `workers=0` for Ultralytics "
                   "(`yolo train ... workers=0`).")
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
def shared_memory(facts: FactsView) -> Iterator[Finding | Summary]:
    shm = facts.host().get("shm") or {}
    container = facts.container()
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


PYTORCH_MULTIPROCESSING = "https://docs.pytorch.org/docs/stable/multiprocessing.html"
TORCHRUN_DOCS = "https://docs.pytorch.org/docs/stable/elastic/run.html"

RAM_TOO_SMALL = declare(
    id="HST002",
    category=Category.HOST_OUT_OF_MEMORY,
    summary="Host RAM is small for the planned GPU processes and DataLoader workers",
    what=(
        "The RAM this job may use (the machine's, or the container's cgroup limit when lower) "
        "is below a rule-of-thumb estimate: about 2 GiB per GPU process, a quarter of each "
        "GPU's memory for staging checkpoints, and 0.5 GiB per DataLoader worker."
    ),
    why=(
        "When host RAM runs out the kernel's OOM killer ends a rank with SIGKILL: torchrun "
        "reports 'exitcode: -9' and the other ranks are torn down."
    ),
    fix=(
        "Use fewer DataLoader workers (--workers), fewer GPUs per host, or a machine or "
        "container with more memory; in a container raise its memory limit."
    ),
    severity=Severity.WARNING,
    docs_url="https://docs.pytorch.org/docs/stable/generated/torch.load.html",
)

CPU_STARVED = declare(
    id="HST003",
    # Slow input: the job runs, at less than the GPUs' speed.
    category=Category.PERFORMANCE_DEGRADED,
    summary="Too few CPU cores for the GPU processes and their DataLoader workers",
    what=(
        "Fewer than 2 CPU cores per GPU process, or more DataLoader worker processes than "
        "cores."
    ),
    why=(
        "Each GPU process needs a core to launch kernels and its DataLoader workers need "
        "cores to decode data; starved, the GPUs wait on input and oversubscribed workers "
        "also multiply host memory use."
    ),
    fix="Lower --workers to the cores per GPU minus one, and keep OMP_NUM_THREADS at 1.",
    severity=Severity.WARNING,
    docs_url=TORCHRUN_DOCS,
)

DISK_LOW = declare(
    id="HST004",
    # A full disk fails the checkpoint write ("No space left on device"), which is neither
    # host RAM (host_out_of_memory) nor any other category: the contract's "unknown".
    category=Category.UNKNOWN,
    summary="Little disk space left in the working directory for checkpoints",
    what=(
        "The working directory's filesystem has under 10 GiB free (a warning), or less than "
        "two checkpoints of a model that fills the largest GPU could take: 1.5 × its memory "
        "(an info, as the model's real size is not known)."
    ),
    why=(
        "Training writes checkpoints (last and best, with optimizer state) and logs there; "
        "a full disk ends the run at the first save, often hours in."
    ),
    fix="Free space, or point the run's output directory at a larger filesystem.",
    severity=Severity.WARNING,
)

NOFILE_LOW = declare(
    id="HST005",
    category=Category.NCCL_SHARED_MEMORY,
    summary="The open-files limit is low for DataLoader workers sharing tensors",
    what=(
        "The soft RLIMIT_NOFILE (`ulimit -n`) is below 4096 while DataLoader workers are "
        "planned."
    ),
    why=(
        "On Linux, workers pass each shared tensor to the main process as a file descriptor "
        "(the 'file_descriptor' sharing strategy). With many tensors in flight the limit is "
        "reached: 'RuntimeError: received 0 items of ancdata' or 'OSError: [Errno 24] Too "
        "many open files'."
    ),
    fix=(
        "Raise the limit (`ulimit -n 65536` in the launching shell, or limits.conf / "
        "`docker run --ulimit nofile=65536:65536`), or call "
        "torch.multiprocessing.set_sharing_strategy('file_system') in the script."
    ),
    severity=Severity.WARNING,
    docs_url=PYTORCH_MULTIPROCESSING,
)

PORT_IN_USE = declare(
    id="HST006",
    category=Category.RENDEZVOUS_PORT_IN_USE,
    summary="The rendezvous port (MASTER_PORT, default 29500) is already taken",
    what="A process on this host already listens on the port torchrun's rendezvous will use.",
    why=(
        "The new job's store cannot bind it and fails with 'Address already in use' "
        "(EADDRINUSE), or worse, its ranks join the other job's rendezvous."
    ),
    fix=(
        "Stop the stale process, or launch on another port: `--master_port 29501`, or "
        "`--standalone` (`--rdzv-endpoint localhost:0`) to let torchrun pick a free one."
    ),
    docs_url=TORCHRUN_DOCS,
)


def _wslconfig_processors(facts: FactsView) -> int | None:
    """[wsl2] processors= of a .wslconfig when this is WSL and one sets it."""
    wsl = facts.wsl()
    if not (facts.is_wsl() or wsl.get("is_wsl")):
        return None
    return next((c["processors"] for c in wsl.get("wslconfig") or [] if c.get("processors")),
                None)



@check(
    id="host.memory",
    title="Host RAM",
    area="host",
    requires=("host",),
    codes=(RAM_TOO_SMALL,),
)
def host_memory(facts: FactsView) -> Iterator[Finding | Summary]:
    need = facts.ram_needed()
    ram, ram_source = facts.effective_ram()
    if need.ranks == 0:
        yield Summary(f"{human_bytes(ram)} RAM; no GPU to size it against")
        return
    if facts.is_wsl():
        yield Summary(f"{human_bytes(ram)} in the WSL VM; judged by the WSL check "
                      f"(.wslconfig sets it)")
        return
    if ram >= need.total:
        yield Summary(f"{human_bytes(ram)} RAM for {need.ranks} GPU process(es); about "
                      f"{human_bytes(need.total)} needed")
        return
    workers = need.workers
    fewer = max(0, workers - int((need.total - ram) // (WORKER_BYTES * need.ranks)) - 1)
    yield Finding(
        code=RAM_TOO_SMALL,
        title=f"{human_bytes(ram)} of host RAM for {need.ranks} GPU process(es) with "
              f"{workers_phrase(workers, need.workers_planned)}; about "
              f"{human_bytes(need.total)} needed",
        evidence=(
            Evidence("RAM for this job", human_bytes(ram), ram_source),
            Evidence("GPU processes", str(need.ranks), "--gpus, else the usable GPUs"),
            Evidence("GPU memory (largest)", human_bytes(need.gpu_memory), "NVML / torch"),
            Evidence("DataLoader workers per process", str(workers),
                     "--workers" if need.workers_planned
                     else "default min(cores per GPU, 8) as Ultralytics uses"),
            Evidence("estimated need", human_bytes(need.total),
                     "2 GiB + GPU memory/4 + 0.5 GiB per worker, per process"),
        ),
        remediation=(
            Step(f"Use fewer DataLoader workers per process (e.g. --workers {fewer}); each "
                 f"is a separate process with its own memory."),
            Step("In a container, raise its memory limit.",
                 command="docker run --memory=64g ...   # Kubernetes: resources.limits.memory"),
            Step("In the script, load checkpoints straight to the GPU so no CPU copy is kept: "
                 "torch.load(path, map_location=f'cuda:{local_rank}')."),
            Step("After an OOM kill, confirm it in the kernel log.",
                 command="sudo dmesg -T | grep -i -E 'out of memory|killed process'"),
        ),
    )


def _workers_advice(workers: int) -> str:
    """The HST003 step: how many DataLoader workers fit, said for none, one and several."""
    if workers == 0:
        return ("Load data in each GPU process itself, with no DataLoader workers "
                "(--workers 0), and give each process one OpenMP thread.")
    return (f"Give each GPU process at most {count(workers, 'DataLoader worker')} "
            f"(--workers {workers}) and one OpenMP thread.")


@check(
    id="host.cpu",
    title="CPU cores",
    area="host",
    requires=("host",),
    codes=(CPU_STARVED,),
)
def host_cpu(facts: FactsView) -> Iterator[Finding | Summary]:
    ranks = facts.planned_ranks()
    cores = facts.cpu_cores()
    if ranks == 0:
        yield Summary(f"{cores} CPU cores; no GPU planned")
        return
    capped = _wslconfig_processors(facts)
    if capped is not None:
        yield Summary(f"{cores} CPU cores in the WSL VM (.wslconfig processors={capped}); "
                      f"judged by the WSL check")
        return
    workers, planned = facts.workers_per_rank(ranks)
    per_gpu = cores / ranks
    suggestion = max(0, cores // ranks - 1)
    evidence = (
        Evidence("CPU cores usable", str(cores), "sched_getaffinity (psutil cpu_affinity)"),
        Evidence("GPU processes", str(ranks), "--gpus, else the usable GPUs"),
        Evidence("DataLoader workers per process", str(workers),
                 "--workers" if planned else "default"),
    )
    steps = (
        Step(_workers_advice(suggestion), command="export OMP_NUM_THREADS=1"),
    ) + (() if facts.is_wsl() else (
        Step("In a container or Slurm job, ask for more CPUs.",
             command="docker run --cpus=16 ...   # Slurm: #SBATCH --cpus-per-task=16"),
    ))
    if per_gpu < 2:
        yield Finding(
            code=CPU_STARVED,
            title=f"{count(cores, 'CPU core')} for {count(ranks, 'GPU process')}: "
                  f"{per_gpu:.1f} per GPU, fewer than 2",
            evidence=evidence, remediation=steps)
        return
    if planned and ranks * (workers + 1) > cores:
        yield Finding(
            code=CPU_STARVED,
            title=f"{count(ranks, 'GPU process')} with "
                  f"{count(workers, 'DataLoader worker')} each need "
                  f"{ranks * (workers + 1)} processes on {count(cores, 'CPU core')}",
            evidence=evidence, remediation=steps)
        return
    yield Summary(f"{cores} CPU cores, {per_gpu:.0f} per GPU process")


DISK_WARN_BELOW = 10 * GIB
WORST_CHECKPOINTS = 1.5  # two checkpoints of 0.75 × GPU memory each


@check(
    id="host.disk",
    title="Disk space",
    area="host",
    requires=("host",),
    codes=(DISK_LOW,),
)
def host_disk(facts: FactsView) -> Iterator[Finding | Summary]:
    disk = facts.host().get("disk")
    if not disk:
        yield Summary("working directory's filesystem not readable")
        return
    need = facts.ram_needed()
    free = int(disk.get("free") or 0)
    # Nothing says how large the user's model is, so two thresholds. Under 10 GiB even a
    # small job's checkpoints, logs and dataset caches are at risk: a warning. Under the
    # worst case, an info: two checkpoints (last, best) of the largest model DDP can train
    # on the GPU. Mixed-precision Adam holds 16 bytes per parameter on the GPU, of which
    # a checkpoint saves 12 (fp32 weights and both moments): at most 0.75 × GPU memory
    # each. (ZeRO, https://arxiv.org/abs/1910.02054, section 3.1.) A warning there, as
    # before, called a healthy H200 box with 64 GiB free short of 280 GiB.
    worst = WORST_CHECKPOINTS * need.gpu_memory
    if free >= max(DISK_WARN_BELOW, worst):
        yield Summary(f"{human_bytes(free)} free in {disk.get('path')}")
        return
    small = free < DISK_WARN_BELOW
    title = (f"Only {human_bytes(free)} free in {disk.get('path')}; a training run needs at "
             f"least {human_bytes(DISK_WARN_BELOW)} for checkpoints, logs and caches"
             if small else
             f"{human_bytes(free)} free in {disk.get('path')}: enough for a small model, "
             f"short of the {human_bytes(worst)} that two checkpoints of a model filling "
             f"the {human_bytes(need.gpu_memory)} GPU could take")
    yield Finding(
        code=DISK_LOW,
        title=title,
        severity=Severity.WARNING if small else Severity.INFO,
        evidence=(
            Evidence("free", human_bytes(free), f"statvfs({disk.get('path')})"),
            Evidence("size", human_bytes(disk.get("total")), f"statvfs({disk.get('path')})"),
            Evidence("GPU memory (largest)", human_bytes(need.gpu_memory), "NVML / torch"),
            Evidence("largest checkpoint pair", human_bytes(worst),
                     "2 × 0.75 × GPU memory: fp32 weights and Adam moments (ZeRO, 3.1)"),
        ),
        remediation=(
            Step("See what takes the space.",
                 command=f"du -xh --max-depth=1 {disk.get('path')} | sort -h | tail -20"),
            Step("Remove old runs or caches, e.g. pip's and torch hub's.",
                 command=f"{facts.target_pip()} cache purge; "
                         f"rm -rf ~/.cache/torch/hub/checkpoints"),
            Step("Or write checkpoints to a larger filesystem (the trainer's --project/--save-dir "
                 "option), checking it first.", command="df -h"),
        ),
    )


NOFILE_WARN_BELOW = 4096


@check(
    id="host.nofile",
    title="Open-files limit",
    area="host",
    requires=("host",),
    codes=(NOFILE_LOW,),
)
def host_nofile(facts: FactsView) -> Iterator[Finding | Summary]:
    limit = facts.host().get("nofile_limit")
    if not limit:
        yield Summary("open-files limit not readable on this platform")
        return
    soft, hard = limit.get("soft"), limit.get("hard")
    workers = facts.plan().get("workers")
    if soft is None or soft >= NOFILE_WARN_BELOW or not workers:
        yield Summary(f"ulimit -n {soft} (hard {hard})")
        return
    target = 65536 if hard is None or hard >= 65536 else hard
    steps = [Step(f"Raise the soft limit in the shell that launches training (the hard limit is "
                  f"{hard}).", command=f"ulimit -n {target}")]
    if hard is not None and hard < 65536:
        steps.append(Step("The hard limit is low too: raise it for your user (log in again "
                          "afterwards), or for a container at start.",
                          command="echo \"$USER - nofile 65536\" | "
                                  "sudo tee -a /etc/security/limits.conf"))
    steps.append(Step("Or let workers share tensors through /dev/shm files instead of file "
                      "descriptors: put torch.multiprocessing.set_sharing_strategy("
                      "'file_system') at the top of the training script.",
                      url=PYTORCH_MULTIPROCESSING))
    yield Finding(
        code=NOFILE_LOW,
        title=f"ulimit -n is {soft} with {workers} DataLoader workers per process planned; "
              f"workers can run out of file descriptors",
        evidence=(
            Evidence("open-files limit (soft/hard)", f"{soft}/{hard}",
                     "getrlimit(RLIMIT_NOFILE)"),
            Evidence("DataLoader workers per process", str(workers), "--workers"),
        ),
        remediation=tuple(steps),
    )


@check(
    id="host.port",
    title="Rendezvous port",
    area="host",
    requires=("host",),
    codes=(PORT_IN_USE,),
)
def host_port(facts: FactsView) -> Iterator[Finding | Summary]:
    info = facts.host().get("rendezvous_port")
    if not info:
        yield Summary("not checked")
        return
    port = info.get("port")
    if info.get("in_use") is None:
        yield Summary(f"port {port}: could not tell ({info.get('error') or 'unknown'})")
        return
    if not info["in_use"]:
        yield Summary(f"port {port} ({info.get('source')}) is free")
        return
    pid, name = info.get("pid"), info.get("process")
    holder = f" by {name or 'a process'} (pid {pid})" if pid else ""
    kill = (Step("If it is a leftover of a finished or crashed job, stop it.",
                 command=f"kill {pid}   # still there after a minute: kill -9 {pid}")
            if pid else
            Step("If it is a leftover of a finished or crashed job, stop it (the pid is in "
                 "the last column of `ss -ltnp`; use sudo to see other users' processes).",
                 command=f"sudo fuser -k {port}/tcp"))
    other = 29501 if port != 29501 else 29502
    nproc = max(facts.planned_ranks(), 1)
    from_env = info.get("source") == "MASTER_PORT"
    yield Finding(
        code=PORT_IN_USE,
        title=f"Port {port} ({'MASTER_PORT' if from_env else 'torchrun default'}) is already "
              f"in use{holder}",
        evidence=(
            Evidence("rendezvous port", str(port),
                     "MASTER_PORT" if from_env else "torchrun's --master-port default"),
            Evidence("listening", f"yes{holder}", info.get("method") or ""),
        ),
        remediation=(
            Step("See which process holds the port.", command=f"ss -ltnp 'sport = :{port}'"),
            kill,
            Step("Or start this job on another port.",
                 command=(f"export MASTER_PORT={other}" if from_env else
                          f"{facts.target_python()} -m torch.distributed.run "
                          f"--master_port {other} "
                          f"--nproc_per_node {nproc} train.py")),
            Step("On a single machine, let torchrun pick a free port itself.",
                 command=f"{facts.target_python()} -m torch.distributed.run --standalone "
                         f"--nproc_per_node {nproc} train.py", url=TORCHRUN_DOCS),
        ),
    )
