"""One rank of the smoke-training job, run the way users run DDP.

Under torchrun (``python -m torch.distributed.run ... -m ddp_doctor.train_smoke.worker``)
each process reads RANK/LOCAL_RANK/WORLD_SIZE from its environment; with ``--spawn N`` the
same program starts N local ranks itself through ``torch.multiprocessing.spawn`` (their
numbers agreed with the other nodes first: ``spawn_layout.py``); with ``--mode dp`` one
process drives every visible GPU through ``nn.DataParallel``, on ``--batch`` images per GPU
so that its images per second compare with DDP's.

Each phase (init_process_group, nodes (in a multi-node job: every node's summary, gathered
once), barrier, the checked all-reduce and its bandwidth, data, model, train, checksum,
destroy_process_group) is bracketed in the rank's own JSON-lines event file
(``events.py``), so the supervisor can judge the run and locate a hang without reading
stdout. Each step records the rank's own loss and the loss averaged over every rank of the
job, so every node judges the same curve. Only torch and the standard library are
imported: this file runs in the user's training interpreter, which need not have
ddp-doctor's dependencies.

Test hook: ``DDP_DOCTOR_SMOKE_FAULT=KIND:RANK:STEP`` makes one rank misbehave at a step so
the supervisor's fault handling can be tested with the real job: ``kill`` (SIGKILL
itself), ``hang`` (stop making progress), ``nccl`` (exit with an NCCL error text); and
``slow:RANK:MS`` makes one rank sleep MS milliseconds inside every step's forward pass, the
way a slower GPU would take longer to compute (a slow-rank test).

Each step records the rank's own work apart from its wait for the others (``timing.py``):
``compute_s`` runs from the step's start to the moment the rank's last gradient bucket was
handed to the all-reduce (DDP's communication hook), ``sync_s`` from then until backward
returned with every bucket reduced, i.e. the all-reduce plus the wait for slower peers.
"""

from __future__ import annotations

import argparse
import faulthandler
import hashlib
import os
import signal
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler

from . import compat, flight, spawn_layout
from .collectives import checked_all_reduce, measure_all_reduce, measure_host_copies
from .data import SyntheticDetection, collate
from .detector import build_model, build_optimizer, parameter_fingerprint
from .events import EventWriter, event_path, stacks_path, stderr_path
from .loss import DetectionLoss
from .nodeinfo import exchange_nodes
from .timing import SyncTimer, pci_bus_id

NUM_CLASSES = 4
# A small fixed data set seen again and again: a working setup must memorise it, so the
# loss falls clearly within a few dozen steps (the verdict's "loss fell" criterion).
BATCHES_PER_EPOCH = 4
FAULT_ENV = "DDP_DOCTOR_SMOKE_FAULT"
NCCL_FAULT_TEXT = (
    "torch.distributed.DistBackendError: NCCL error in: "
    "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error "
    "(run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n"
    "ncclSystemError: System call (e.g. socket, malloc) or external library call failed "
    "or device error.\nLast error:\nError while creating shared memory segment "
    "/dev/shm/nccl-Xq2m1T (size 9637888)"
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="ddp_doctor.train_smoke.worker")
    p.add_argument("--run-dir", required=True)
    p.add_argument("--tag", default="", help="unique run tag (lets the supervisor find us)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--backend", choices=("nccl", "gloo"), default=None,
                   help="process-group backend (default: nccl on cuda, gloo on cpu)")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=8, help="images per rank per step")
    p.add_argument("--imgsz", type=int, default=128)
    p.add_argument("--model", choices=("n", "s", "m"), default="n")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--mode", choices=("ddp", "dp"), default="ddp")
    p.add_argument("--sync-bn", action="store_true")
    p.add_argument("--amp", choices=("auto", "on", "off"), default="auto")
    p.add_argument("--pg-timeout", type=float, default=60.0)
    p.add_argument("--ar-bytes", type=int, default=0, help="bandwidth buffer (0: by device)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--spawn", type=int, default=0, help="start N local ranks (spawn launcher)")
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--master-addr", default="127.0.0.1")
    p.add_argument("--master-port", type=int, default=29500)
    p.add_argument("--exchange-nodes", action="store_true",
                   help="gather every node's summary once after init (multi-node jobs)")
    return p.parse_args(argv)


def _fault(rank: int) -> tuple[str, int] | None:
    spec = os.environ.get(FAULT_ENV, "")
    parts = spec.split(":")
    if len(parts) == 3 and parts[1].isdigit() and int(parts[1]) == rank and parts[2].isdigit():
        return parts[0], int(parts[2])
    return None


def _apply_fault(kind: str) -> None:
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif kind == "hang":
        while True:
            time.sleep(60)
    elif kind == "nccl":
        raise RuntimeError(NCCL_FAULT_TEXT)


def _redirect_stderr(path: str) -> None:
    """Send this rank's stderr (Python tracebacks and native NCCL/CUDA logs) to its file."""
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 2)
    os.close(fd)


def _dump_stacks_on_sigusr1(path: str) -> None:
    """On SIGUSR1 write every thread's stack to ``path`` and go on.

    The supervisor asks a hung rank for its stack this way when py-spy cannot read it (no
    ptrace permission): faulthandler's handler runs in C, so it answers even while the rank
    waits inside a collective.
    """
    if hasattr(signal, "SIGUSR1"):
        handle = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives with the rank
        faulthandler.register(signal.SIGUSR1, file=handle, all_threads=True)


def _batches(loader: DataLoader, sampler: DistributedSampler | None) -> Iterator[Any]:
    epoch = 0
    while True:
        if sampler is not None:
            sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


def _node_rank(args: argparse.Namespace) -> int:
    """This node's rank: torchrun's GROUP_RANK, else the --node-rank of the spawn launcher."""
    group = os.environ.get("GROUP_RANK", "")
    return int(group) if group.isdigit() else args.node_rank


def _mean_over_ranks(loss: torch.Tensor, world: int) -> float:
    """The step's loss averaged over every rank of the job (all nodes).

    Each node's supervisor sees only its own ranks' event files; judging this value
    instead of the local losses gives every node the same loss curve, hence the same
    verdict with the same figures.
    """
    total = loss.detach().float().reshape(1).clone()
    dist.all_reduce(total)
    return float(total.item()) / world


def _use_amp(args: argparse.Namespace, device: torch.device) -> bool:
    return device.type == "cuda" and args.amp != "off"


def gpu_index(local_rank: int, gpus: int) -> int:
    """The GPU of a local rank: its own, or (--backend gloo, more ranks than GPUs) shared
    round-robin, so two ranks on one GPU both train there."""
    return local_rank % gpus if gpus > 0 else local_rank


def replicas(args: argparse.Namespace, device: torch.device) -> int:
    """How many GPUs one process trains on: all visible ones under --mode dp, else 1."""
    if args.mode == "dp" and device.type == "cuda":
        return max(1, torch.cuda.device_count())
    return 1


def images_per_step(batch: int, replica_count: int) -> int:
    """One process's images per step: ``--batch`` per GPU it drives.

    DataParallel splits one batch over its GPUs; handing it ``batch`` images in all would
    give each GPU batch/N (1 image on 8 GPUs), and an images/s nobody could compare with
    DDP's ``batch`` per GPU.
    """
    return batch * max(1, replica_count)


def run_rank(args: argparse.Namespace, rank: int, local_rank: int, world: int,
             local_world: int = 1, store: Any = None) -> None:
    """Everything one rank does, phase by phase, each phase recorded in its event file.

    ``store``: the spawn launcher's multi-node store the rank joins the group through
    (``spawn_layout.job_store``); None to meet through the environment (torchrun, or
    MASTER_ADDR/MASTER_PORT set by the launcher).
    """
    _redirect_stderr(stderr_path(args.run_dir, local_rank))
    _dump_stacks_on_sigusr1(stacks_path(args.run_dir, local_rank))
    # Torch's Flight Recorder on (before init_process_group), its dump written on request.
    flight.start(args.run_dir)
    ev = EventWriter(event_path(args.run_dir, local_rank), rank)
    distributed = args.mode == "ddp"
    if args.device == "cuda":
        index = gpu_index(local_rank, torch.cuda.device_count())
        torch.cuda.set_device(index)
        device = torch.device("cuda", index)
    else:
        device = torch.device("cpu")
    fault = _fault(rank)
    gpus_per_process = replicas(args, device)
    batch = images_per_step(args.batch, gpus_per_process)
    ev.emit("info", "startup", time.monotonic(), None, time.time(), None, pid=os.getpid(),
            local_rank=local_rank, world_size=world, local_world_size=local_world,
            node_rank=_node_rank(args), device=str(device), mode=args.mode,
            replicas=gpus_per_process, batch_per_step=batch,
            torch=torch.__version__, pci_bus_id=pci_bus_id(device),
            gpu_name=torch.cuda.get_device_name(device) if device.type == "cuda" else None)

    if distributed:
        backend = args.backend or ("nccl" if device.type == "cuda" else "gloo")
        with ev.phase("init_process_group", backend=backend):
            meet = {"store": store} if store is not None else {}
            dist.init_process_group(backend, rank=rank, world_size=world,
                                    timeout=timedelta(seconds=args.pg_timeout),
                                    **meet, **compat.init_kwargs(device, backend))
        if args.exchange_nodes:
            with ev.phase("nodes") as out:
                nodes = exchange_nodes(local_rank, _node_rank(args), device, local_world)
                out["node_count"] = len(nodes)
                if local_rank == 0:  # one copy per node is enough for its supervisor
                    out["nodes"] = nodes
        with ev.phase("barrier"):
            compat.barrier(device)
        with ev.phase("all_reduce_check") as out:
            out.update(checked_all_reduce(device))
        with ev.phase("all_reduce_bandwidth") as out:
            nbytes = args.ar_bytes or (64 << 20 if device.type == "cuda" else 4 << 20)
            out.update(measure_all_reduce(device, nbytes))
            if device.type == "cuda":  # the buffer's peak, kept apart from training's
                out["peak_mem_bytes"] = torch.cuda.max_memory_allocated(device)

    if device.type == "cuda":
        with ev.phase("host_copy") as out:
            out.update(measure_host_copies(device))

    with ev.phase("data", workers=args.workers) as out:
        dataset = SyntheticDetection(batch * world * BATCHES_PER_EPOCH, args.imgsz,
                                     num_classes=NUM_CLASSES, seed=args.seed)
        sampler = (DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True,
                                      seed=args.seed, drop_last=True) if distributed else None)
        loader = DataLoader(dataset, batch_size=batch, sampler=sampler,
                            shuffle=False, num_workers=args.workers, collate_fn=collate,
                            pin_memory=device.type == "cuda", drop_last=True,
                            persistent_workers=args.workers > 0)
        batches = _batches(loader, sampler)
        first = next(batches)  # starts the workers: /dev/shm and start-up are exercised
        out["samples_per_rank"] = len(sampler) if sampler is not None else len(dataset)

    with ev.phase("model", size=args.model, sync_bn=args.sync_bn) as out:
        torch.manual_seed(args.seed)
        net = build_model(args.model, num_classes=NUM_CLASSES).to(device)
        if distributed and args.sync_bn:
            net = nn.SyncBatchNorm.convert_sync_batchnorm(net)
        if distributed:
            model: nn.Module = nn.parallel.DistributedDataParallel(
                net, device_ids=[device.index] if device.type == "cuda" else None)
        elif device.type == "cuda" and torch.cuda.device_count() > 1:
            model = nn.DataParallel(net)
        else:
            model = net
        timer = SyncTimer(device)
        if distributed:
            timer.attach(model)
        loss_fn = DetectionLoss(net, NUM_CLASSES)
        optimizer = build_optimizer(net)
        out["parameters"] = sum(p.numel() for p in net.parameters())

    amp = _use_amp(args, device)
    scaler = compat.grad_scaler(amp)
    if device.type == "cuda":  # the peak of training, not of the 64 MiB bandwidth buffer
        torch.cuda.reset_peak_memory_stats(device)
    with ev.phase("train", steps=args.steps, amp=amp) as out:
        model.train()
        batch = first
        for step in range(1, args.steps + 1):
            t0, w0 = time.monotonic(), time.time()
            timer.start(t0)
            if batch is None:
                batch = next(batches)
            images, targets = batch
            batch = None
            images = images.to(device, non_blocking=True)
            targets = targets.to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=torch.float16, enabled=amp):
                preds = model(images)
                if fault and fault[0] == "slow":
                    time.sleep(fault[1] / 1000)  # a slower GPU: more time before backward
                loss, _parts = loss_fn(preds, targets)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            split = timer.stop()
            scaler.step(optimizer)
            scaler.update()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            # Every rank joins the loss's all-reduce before a fault strikes, so a faulty
            # rank is still the one behind, not its peers waiting in this collective.
            job = {"loss_all": _mean_over_ranks(loss, world)} if distributed else {}
            if fault and fault[0] != "slow" and fault[1] == step:
                _apply_fault(fault[0])
            ev.step(step, t0, w0, loss=float(loss.detach()), images=int(images.shape[0]), **job,
                    **split)
        out["peak_mem_bytes"] = (torch.cuda.max_memory_allocated(device)
                                 if device.type == "cuda" else None)

    with ev.phase("checksum") as out:
        fingerprint = parameter_fingerprint(net).to(device)
        text = ",".join(str(v) for v in fingerprint.cpu().tolist())
        out["digest"] = hashlib.sha256(text.encode("ascii")).hexdigest()[:16]
        if distributed:
            gathered = [torch.zeros_like(fingerprint) for _ in range(world)]
            dist.all_gather(gathered, fingerprint)
            out["mismatched_ranks"] = [r for r, g in enumerate(gathered)
                                       if not torch.equal(g, gathered[0])]
        else:
            out["mismatched_ranks"] = []
        out["in_sync"] = not out["mismatched_ranks"]

    if distributed:
        with ev.phase("destroy_process_group"):
            dist.destroy_process_group()
    ev.emit("done", "done", time.monotonic(), time.monotonic(), time.time(), time.time())
    ev.close()


def _spawned(local_rank: int, args: argparse.Namespace,
             layout: spawn_layout.SpawnLayout) -> None:
    rank = layout.first_rank + local_rank
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(local_rank), WORLD_SIZE=str(layout.world),
                      LOCAL_WORLD_SIZE=str(args.spawn), GROUP_RANK=str(args.node_rank))
    store = (spawn_layout.job_store(args.master_addr, args.master_port, args.pg_timeout)
             if args.nnodes > 1 else None)
    run_rank(args, rank, local_rank, layout.world, args.spawn, store)


def spawn_environment(args: argparse.Namespace) -> dict[str, str]:
    """The rendezvous the spawned ranks use: the one given on the command line.

    Set, not defaulted: an inherited MASTER_ADDR/MASTER_PORT (a Slurm batch script, a
    Kubeflow pod) would otherwise send the ranks somewhere the doctor never checked.
    """
    return {"MASTER_ADDR": args.master_addr, "MASTER_PORT": str(args.master_port)}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.mode == "dp":
        run_rank(args, 0, 0, 1)
    elif args.spawn:
        import torch.multiprocessing as mp

        os.environ.update(spawn_environment(args))
        store = None
        if args.nnodes > 1:
            layout, store = spawn_layout.agree_on_counts(
                args.master_addr, args.master_port, args.nnodes, args.node_rank, args.spawn,
                args.pg_timeout)
        else:
            layout = spawn_layout.single_node(args.spawn)
        mp.spawn(_spawned, args=(args, layout), nprocs=args.spawn, join=True)
        del store  # node 0's store served every rank until they all exited
    else:
        env = os.environ
        local_world = env.get("LOCAL_WORLD_SIZE", "")
        run_rank(args, int(env["RANK"]), int(env.get("LOCAL_RANK", "0")),
                 int(env["WORLD_SIZE"]), int(local_world) if local_world.isdigit() else 1)


if __name__ == "__main__":
    main()
