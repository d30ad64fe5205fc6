"""How the smoke job is started: options, ports, multi-node values and the command line.

The job is launched the way users launch DDP (``python -m torch.distributed.run``), in
the interpreter being diagnosed, so it proves that *their* environment trains. The worker
package is put on PYTHONPATH through a small shim directory, so that interpreter needs
torch but not ddp-doctor itself.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from ddp_doctor.usage import Limit

WORKER_MODULE = "ddp_doctor.train_smoke.worker"


@dataclass(frozen=True)
class SmokeOptions:
    """Everything one smoke run needs; ``None`` means "choose for this machine"."""

    device: str = "auto"  # auto | cuda | cpu
    nproc: int | None = None  # processes on this node (one per GPU by default, 2 on CPU)
    steps: int = 30
    batch: int = 8  # images per process and step
    imgsz: int = 128
    model: str = "n"
    workers: int | None = None  # DataLoader workers per process
    launcher: str = "torchrun"  # torchrun | spawn
    mode: str = "ddp"  # ddp | dp
    # auto: NCCL on GPUs, gloo on the CPU; gloo on GPUs lets ranks share a GPU.
    backend: str = "auto"  # auto | nccl | gloo
    sync_bn: bool = False
    amp: bool = True
    scaling: bool = False
    timeout: float = 180.0  # wall-clock deadline of one run
    stall_timeout: float | None = None  # no event from a rank for this long = hang
    pg_timeout: float | None = None  # init_process_group(timeout=...)
    nnodes: int | None = None
    node_rank: int | None = None
    master_addr: str | None = None
    master_port: int | None = None
    python: str = field(default_factory=lambda: sys.executable)
    run_dir: str | None = None  # where rank files go (a fresh temporary one by default)
    # Keep a passed run's temporary directory too (for --bundle); the caller removes it.
    keep_run_dir: bool = False
    # builtin: our own YOLO (train_smoke/); ultralytics: the Ultralytics package installed
    # in the diagnosed interpreter, through its own DDP path.
    trainer: str = "builtin"
    # A multi-node run gathers every node's summary once after init, to compare the nodes
    # inside the job; off only to measure what the exchange costs (bench/node_exchange.py).
    node_exchange: bool = True

    def deadlines(self) -> tuple[float, float, float]:
        """(wall, stall, process-group) deadlines: stall < process group < wall.

        The stall deadline is shortest so a hang is located by the supervisor (it knows
        which rank fell behind) rather than reported by the rank that waits for it. The
        process-group timeout is a backstop inside the ranks; it is derived to sit between
        the two (a value given outside that range is moved into it). It counts from the
        start of each collective, not of the run, so it does not promise that ranks report
        before the wall-clock deadline; it only makes a rank stuck in one collective give
        up on its own in most cases. ``check_options`` refuses a stall deadline that is not
        shorter than the wall-clock one.
        """
        wall = self.timeout
        stall = self.stall_timeout or min(45.0, wall / 3)
        pg = self.pg_timeout or max(stall + 5.0, min(wall * 0.75, stall * 2))
        pg = min(pg, wall - 1.0)
        if not stall < pg < wall:
            pg = (stall + wall) / 2
        return wall, stall, pg


class OptionsError(ValueError):
    """Smoke options that cannot work (reported as a usage error, exit code 2)."""


# What the detector needs (train_smoke/detector.py STRIDES; a test keeps them equal). The
# image must divide by the largest stride, and the coarsest level needs at least 2 x 2
# cells so targets can be assigned there.
MODEL_STRIDES = (8, 16, 32)
MIN_IMGSZ = 2 * max(MODEL_STRIDES)
# BatchNorm in training needs more than one value per channel, and its statistics are
# meaningless on one image; 2 images per process is the least that trains.
MIN_BATCH = 2
MIN_STALL_S = 10.0  # building the model alone takes several seconds on a CPU
MIN_TIMEOUT_S = 20.0

# Every numeric option of `ddp-doctor smoke`, keyed by its SmokeOptions field: the CLI
# parses the typed text with these, and check_options judges SmokeOptions built in code
# with the same bounds and words. (--imgsz has its own rule below: a multiple of a stride.)
LIMITS: dict[str, Limit] = {
    "nproc": Limit("--nproc", 1),
    "steps": Limit("--steps", 2),
    "batch": Limit("--batch-per-process", MIN_BATCH,
                   why=" (BatchNorm in training needs more than one image per process)"),
    "imgsz": Limit("--imgsz", MIN_IMGSZ),
    "workers": Limit("--workers", 0),
    "timeout": Limit("--timeout", MIN_TIMEOUT_S, whole=False, unit=" s"),
    "stall_timeout": Limit("--stall-timeout", MIN_STALL_S, whole=False, unit=" s",
                           why=" (building the model alone can take several seconds)"),
    "nnodes": Limit("--nnodes", 1),
    "node_rank": Limit("--node-rank", 0),
    "master_port": Limit("--master-port", 1, 65535),
}
CHOICES: dict[str, tuple[str, ...]] = {
    "device": ("auto", "cuda", "cpu"),
    "model": ("n", "s", "m"),
    "launcher": ("torchrun", "spawn"),
    "mode": ("ddp", "dp"),
    "backend": ("auto", "nccl", "gloo"),
    "trainer": ("builtin", "ultralytics"),
}


def _nearest_imgsz(imgsz: int) -> str:
    stride = max(MODEL_STRIDES)
    below = max(MIN_IMGSZ, imgsz // stride * stride)
    above = max(MIN_IMGSZ, -(-imgsz // stride) * stride)
    return str(above) if below == above else f"{below} or {above}"


def check_options(options: SmokeOptions, device: str | None = None) -> None:
    """Refuse values that cannot work, with the reason; ``device`` is the resolved one."""
    device = device or options.device
    for name, allowed in CHOICES.items():
        value = getattr(options, name)
        if value not in allowed:
            raise OptionsError(f"--{name} {value!r}: choose one of {', '.join(allowed)}")
    for name, limit in LIMITS.items():
        value = getattr(options, name)
        problem = None if value is None or name == "imgsz" else limit.problem(value)
        if problem is not None:
            raise OptionsError(problem)
    stride = max(MODEL_STRIDES)
    if options.imgsz < MIN_IMGSZ or options.imgsz % stride:
        raise OptionsError(f"--imgsz {options.imgsz}: must be a multiple of {stride} (the "
                           f"model's largest stride) and {MIN_IMGSZ} or more; use "
                           f"{_nearest_imgsz(options.imgsz)}")
    if options.stall_timeout is not None and options.stall_timeout >= options.timeout:
        raise OptionsError(f"--stall-timeout {options.stall_timeout:g} must be shorter "
                           f"than --timeout {options.timeout:g} (a hang is detected "
                           "before the wall-clock deadline)")
    if options.trainer == "ultralytics":
        builtin_only = [name for name, used in (
            ("--scaling", options.scaling), ("--mode dp", options.mode == "dp"),
            ("--sync-bn", options.sync_bn), ("--launcher spawn", options.launcher == "spawn"),
            ("--backend", options.backend != "auto"),
            ("--nnodes", (options.nnodes or 1) > 1)) if used]
        if builtin_only:
            raise OptionsError(f"{', '.join(builtin_only)}: only for --trainer builtin "
                               "(Ultralytics starts its own DDP ranks on this node)")
    if options.backend == "nccl" and device == "cpu":
        raise OptionsError("--backend nccl needs CUDA (NCCL runs on GPUs only); use "
                           "--backend gloo or leave it out on the CPU")
    if options.backend != "auto" and options.mode == "dp":
        raise OptionsError("--backend needs --mode ddp (DataParallel runs in one process, "
                           "without a process group)")
    if options.sync_bn and options.mode == "dp":
        raise OptionsError("--sync-bn needs --mode ddp (SyncBatchNorm syncs statistics "
                           "across DDP processes)")
    if options.sync_bn and device == "cpu":
        raise OptionsError("--sync-bn needs CUDA (SyncBatchNorm only works on GPU modules); "
                           "leave it out on the CPU or use --device cuda")


@dataclass(frozen=True)
class NodeLayout:
    """Where this node sits in the job: node count, its rank, and the rendezvous address."""

    nnodes: int
    node_rank: int
    master_addr: str
    master_port: int | None  # None: pick a free one (single node only)


def new_tag() -> str:
    """A unique tag for one run: on the worker's command line (the ranks name their files
    with it) and, through ``ProcessTree.start``, in every process's environment, where
    ``ddp_doctor.process`` finds what is left of the run."""
    from ddp_doctor.process.tag import new_tag as process_tag  # psutil: not at CLI start

    return process_tag("ddp-doctor-smoke")


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on now: bind port 0 and let the kernel choose."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_in_use(port: int, host: str = "0.0.0.0") -> bool:
    """True when binding ``port`` fails with EADDRINUSE (what rank 0's store would meet)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def expand_first_host(nodelist: str) -> str:
    """The first host of a Slurm node list, for the simple forms ``a,b`` and ``n[01-04,7]``.

    ``scontrol show hostnames`` is used instead when it exists (it knows every form).
    """
    if shutil.which("scontrol"):
        try:
            out = subprocess.run(["scontrol", "show", "hostnames", nodelist],
                                 capture_output=True, text=True, timeout=10, check=False)
            hosts = out.stdout.split()
            if out.returncode == 0 and hosts:
                return hosts[0]
        except (OSError, subprocess.SubprocessError):
            pass
    head = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if head is None:
        return nodelist
    prefix, ranges = head.group(1), head.group(2)
    if not ranges:
        return prefix
    first = ranges.split(",")[0].split("-")[0]
    return prefix + first


def in_slurm_step(environ: dict[str, str]) -> bool:
    """True inside an ``srun`` step, where every node runs its own copy of the doctor."""
    return "SLURM_JOB_ID" in environ and ("SLURM_STEP_ID" in environ
                                          or "SLURM_PROCID" in environ)


def _expand_tasks_per_node(text: str) -> list[int]:
    """Slurm's compressed per-node task counts, "2(x3),1" -> [2, 2, 2, 1] ([] if unreadable).

    The format of SLURM_STEP_TASKS_PER_NODE and SLURM_TASKS_PER_NODE
    (https://slurm.schedmd.com/srun.html, "OUTPUT ENVIRONMENT VARIABLES").
    """
    counts: list[int] = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if match is None:
            return []
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def slurm_tasks_on_this_node(environ: dict[str, str]) -> int:
    """How many copies of this command srun started on this node (1 when not told)."""
    counts = _expand_tasks_per_node(environ.get("SLURM_STEP_TASKS_PER_NODE", ""))
    node = environ.get("SLURM_NODEID", "")
    if counts and node.isdigit() and int(node) < len(counts):
        return counts[int(node)]
    per_node = environ.get("SLURM_NTASKS_PER_NODE", "")
    if per_node.isdigit():
        return int(per_node)
    local = environ.get("SLURM_LOCALID", "")
    return int(local) + 1 if local.isdigit() else 1


def node_layout(options: SmokeOptions, environ: dict[str, str]) -> NodeLayout:
    """The node values: options first, then Slurm's or torchrun's environment, then 1 node.

    Slurm's values are used inside an ``srun`` step (SLURM_STEP_ID or SLURM_PROCID set),
    or when ``--nnodes`` > 1 asks for a multi-node job inside a Slurm allocation; each
    missing value is then filled on its own. A plain run in an ``salloc`` shell stays on
    this node. Every node must agree on the port without talking to each other, so under
    Slurm it is derived from the job id (MASTER_PORT wins when set). Outside Slurm, the
    values torchrun itself would take from the environment (PET_NNODES, PET_NODE_RANK,
    PET_MASTER_ADDR, PET_MASTER_PORT: a pod or job script that configures torchrun that
    way, https://pytorch.org/docs/stable/elastic/run.html) lay out the nodes the same way;
    the children never see them (``without_rendezvous``), so the doctor honours them here.
    An elastic range (``PET_NNODES=1:4``) is not a layout and is left alone. Raises
    OptionsError for a layout that cannot rendezvous.
    """
    nnodes, node_rank = options.nnodes, options.node_rank
    addr, port = options.master_addr, options.master_port
    slurm = "SLURM_JOB_ID" in environ and (
        in_slurm_step(environ) or (nnodes is not None and nnodes > 1))
    if slurm and in_slurm_step(environ) and slurm_tasks_on_this_node(environ) > 1:
        # Every copy would claim this node's rank and start its own ranks on its GPUs.
        tasks = slurm_tasks_on_this_node(environ)
        raise OptionsError(f"srun started {tasks} copies of ddp-doctor on this node, and "
                           "each would claim the same node rank; the doctor starts the "
                           "node's ranks itself: run one per node (srun --ntasks-per-node=1 "
                           "ddp-doctor smoke ...)")
    if slurm:
        if nnodes is None and environ.get("SLURM_NNODES", "").isdigit():
            nnodes = int(environ["SLURM_NNODES"])
        if node_rank is None and environ.get("SLURM_NODEID", "").isdigit():
            node_rank = int(environ["SLURM_NODEID"])
    elif nnodes is None and environ.get("PET_NNODES", "").isdigit():
        nnodes = int(environ["PET_NNODES"])
        if node_rank is None and environ.get("PET_NODE_RANK", "").isdigit():
            node_rank = int(environ["PET_NODE_RANK"])
    nnodes = nnodes or 1
    if nnodes > 1:
        addr = addr or environ.get("PET_MASTER_ADDR") or environ.get("MASTER_ADDR") or None
        for name in ("PET_MASTER_PORT", "MASTER_PORT"):
            if port is None and environ.get(name, "").isdigit():
                port = int(environ[name])
        if slurm and addr is None:
            nodelist = environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_JOB_NODELIST")
            addr = expand_first_host(nodelist) if nodelist else None
        if slurm and port is None and environ["SLURM_JOB_ID"].isdigit():
            port = 20000 + int(environ["SLURM_JOB_ID"]) % 20000
    node_rank = node_rank or 0
    if node_rank >= nnodes:
        raise OptionsError(f"--node-rank {node_rank}: must be less than --nnodes ({nnodes}); "
                           f"node ranks run from 0 to {nnodes - 1}")
    if nnodes > 1:
        missing = [name for name, value in (("--master-addr", addr), ("--master-port", port))
                   if value is None]
        if missing:
            raise OptionsError(f"--nnodes {nnodes} needs {' and '.join(missing)} (the address "
                               "of node rank 0 and a port, the same on every node)")
    return NodeLayout(nnodes=nnodes, node_rank=node_rank,
                      master_addr=addr or "127.0.0.1", master_port=port)


def shim_dir(run_dir: Path) -> Path:
    """A directory that makes ``ddp_doctor.train_smoke`` importable in any interpreter.

    The worker package imports torch and the standard library only, so linking it under
    an empty ``ddp_doctor`` package is all the target interpreter needs.
    """
    # train_smoke/ installs as this package (package-dir), a mapping mypy cannot follow.
    from ddp_doctor import train_smoke as package  # type: ignore[attr-defined]

    if package.__file__ is None:
        raise RuntimeError("ddp_doctor.train_smoke is not installed as files on disk")
    root = run_dir / "pkg"
    (root / "ddp_doctor").mkdir(parents=True, exist_ok=True)
    (root / "ddp_doctor" / "__init__.py").write_text('"""Shim for the smoke job."""\n')
    link = root / "ddp_doctor" / "train_smoke"
    if not link.exists():
        link.symlink_to(Path(package.__file__).resolve().parent, target_is_directory=True)
    return root


def backend_for(options: SmokeOptions, device: str) -> str | None:
    """The process group's backend: as asked, else NCCL on GPUs and gloo on the CPU."""
    if options.mode == "dp":
        return None
    if options.backend != "auto":
        return options.backend
    return "nccl" if device == "cuda" else "gloo"


def worker_args(options: SmokeOptions, run_dir: Path, tag: str, device: str, workers: int,
                pg_timeout: float, exchange_nodes: bool = False) -> list[str]:
    args = ["--run-dir", str(run_dir), "--tag", tag, "--device", device,
            "--backend", backend_for(options, device) or "gloo",
            "--steps", str(options.steps), "--batch", str(options.batch),
            "--imgsz", str(options.imgsz), "--model", options.model,
            "--workers", str(workers), "--mode", options.mode,
            "--amp", "on" if options.amp else "off", "--pg-timeout", f"{pg_timeout:g}"]
    return (args + (["--sync-bn"] if options.sync_bn else [])
            + (["--exchange-nodes"] if exchange_nodes else []))


def launch_command(options: SmokeOptions, layout: NodeLayout, port: int, nproc: int,
                   wargs: list[str]) -> list[str]:
    """The command line, as a user would type it for this launcher and mode."""
    py = options.python
    if options.mode == "dp":
        return [py, "-m", WORKER_MODULE, *wargs]
    if options.launcher == "spawn":
        return [py, "-m", WORKER_MODULE, *wargs, "--spawn", str(nproc),
                "--nnodes", str(layout.nnodes), "--node-rank", str(layout.node_rank),
                "--master-addr", layout.master_addr, "--master-port", str(port)]
    return [py, "-m", "torch.distributed.run", "--nnodes", str(layout.nnodes),
            "--node_rank", str(layout.node_rank), "--nproc_per_node", str(nproc),
            "--master_addr", layout.master_addr, "--master_port", str(port),
            "--max_restarts", "0", "-m", WORKER_MODULE, *wargs]


NCCL_LOG_PATTERN = "nccl.%h.%p.log"


def nccl_debug_env(environ: dict[str, str], run_dir: Path) -> dict[str, str]:
    """NCCL's INFO output to one file per rank in the run directory, off the console.

    Only when the user has not set NCCL_DEBUG: their own setting (and wherever they send
    it) is left alone, and the transports are then read from where it went. NCCL expands
    %h to the host name and %p to the process id. INIT carries the channel and peer lines
    ("via P2P/IPC"), GRAPH the rings and trees, ENV the NCCL_* variables it obeyed.
    """
    if environ.get("NCCL_DEBUG"):
        return {}
    return {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,GRAPH,ENV",
            "NCCL_DEBUG_FILE": str(run_dir / NCCL_LOG_PATTERN)}


# What a launcher or a cluster leaves in the shell the doctor runs in, and which would steer
# the job's launcher or ranks to another rendezvous than the one the doctor chose and
# checked: torchrun's per-process values (RANK, WORLD_SIZE, ... and TORCHELASTIC_*, e.g.
# TORCHELASTIC_USE_AGENT_STORE, which makes rank 0 a client of a store that is not there),
# MASTER_ADDR/MASTER_PORT (a Slurm batch script, a Kubeflow PyTorchJob pod), and PET_*,
# from which torchrun takes any option not given on its command line (Kubeflow's elastic
# jobs set PET_RDZV_BACKEND and PET_RDZV_ENDPOINT:
# https://pytorch.org/docs/stable/elastic/run.html, "environment variables").
RENDEZVOUS_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                        "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME",
                        "MASTER_ADDR", "MASTER_PORT")
RENDEZVOUS_PREFIXES = ("TORCHELASTIC_", "PET_")


def without_rendezvous(environ: dict[str, str]) -> dict[str, str]:
    """``environ`` less the inherited rendezvous variables (``RENDEZVOUS_VARIABLES``)."""
    return {k: v for k, v in environ.items()
            if k not in RENDEZVOUS_VARIABLES and not k.startswith(RENDEZVOUS_PREFIXES)}


def child_env(shim: Path, nproc: int, nccl_run_dir: Path | None = None) -> dict[str, str]:
    """The ranks' environment: the user's without inherited rendezvous values, plus the
    shim and sane CPU thread counts; with ``nccl_run_dir`` (an NCCL run), NCCL's INFO
    output into files there."""
    env = without_rendezvous(dict(os.environ))
    if nccl_run_dir is not None:
        env.update(nccl_debug_env(env, nccl_run_dir))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(shim), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    # torchrun sets 1 thread per rank when unset; give the cores out evenly instead.
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // max(1, nproc))))
    return env


TORCHRUN_LOGS = "torchelastic"


def torchrun_log_dir(run_dir: Path) -> Path:
    """torchrun's log directory for the job, inside the run directory; the caller removes it
    at the end.

    Without ``--log-dir``, torchrun makes a log directory under TMPDIR for every launch
    (``tempfile.mkdtemp(prefix="torchelastic_")`` in ``DefaultLogsSpecs``,
    https://github.com/pytorch/pytorch/blob/main/torch/distributed/elastic/multiprocessing/api.py)
    and never removes it, so each run left one in the user's /tmp. It is given as
    ``PET_LOG_DIR``, the environment form of ``--log-dir`` (torchrun reads every unset option
    from ``PET_<OPTION>``), so that the torchrun Ultralytics starts takes it too. TMPDIR
    itself stays the user's: moving the ranks' TMPDIR into the run directory made the
    DataLoader workers' socket paths (``pymp-*/listener-*``) longer than AF_UNIX allows (108
    bytes) under a deep TMPDIR.
    """
    path = run_dir / TORCHRUN_LOGS
    path.mkdir(parents=True, exist_ok=True)
    return path


def with_nproc(options: SmokeOptions, nproc: int, device: str) -> SmokeOptions:
    """The same job on ``nproc`` ranks of an already resolved device (for --scaling)."""
    return replace(options, nproc=nproc, device=device, scaling=False)
