"""Launch the Ultralytics driver in the diagnosed interpreter, supervise it, judge it.

The driver runs under the same supervision as the builtin smoke job: its own session, a
unique tag on its command line, the wall-clock deadline, and every process it or
Ultralytics started (its DDP launcher and ranks) ended on the way out
(``ddp_doctor.process``).
Ultralytics is kept offline (YOLO_OFFLINE) with its settings in the run directory
(YOLO_CONFIG_DIR), so nothing is fetched and the user's settings file is not touched.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ddp_doctor.model import Evidence, Finding, Status, Step, status_of
from ddp_doctor.process.signals import StopRequest, stop_signals_raise
from ddp_doctor.process.tree import ProcessTree
from ddp_doctor.smoke import codes as C
from ddp_doctor.smoke.device import resolve_device
from ddp_doctor.smoke.launch import (
    TORCHRUN_LOGS,
    SmokeOptions,
    new_tag,
    torchrun_log_dir,
    without_rendezvous,
)
from ddp_doctor.smoke.monitor import Outcome, supervise
from ddp_doctor.smoke.progress import ProgressSink
from ddp_doctor.smoke.result import SmokeResult, base_data
from ddp_doctor.smoke.ultralytics.judge import UltraRun, judge

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "driver.py"
# Measured on a CPU: the box loss of the first epochs rises before it falls; 6 epochs of
# 32 images per rank at 64 px bring it clearly below the first epoch's (about 1.3 s each).
EPOCHS = 6
IMGSZ = 64
# Synthetic training images per rank: each rank then takes the same number of optimizer
# steps (32 / batch 8 x 6 epochs = 24) on 1 GPU or 8. A fixed 32-image set gave 8 GPUs one
# step an epoch (6 in all), too few for the box loss to turn down.
TRAIN_IMAGES_PER_RANK = 32


def optimizer_steps_per_rank(train_images: int, world: int, batch: int, epochs: int) -> int:
    """Steps each rank takes: its shard of the set (DistributedSampler), in whole and last
    partial batches (Ultralytics' loader keeps the last one), once per epoch."""
    shard = -(-train_images // max(1, world))
    return -(-shard // batch) * epochs


class DeviceChoiceError(ValueError):
    """CUDA_VISIBLE_DEVICES names GPUs in a form Ultralytics cannot be handed."""


def ultralytics_devices(visible: str | None, nproc: int,
                        index_of_uuid: Callable[[str], int | None] | None = None
                        ) -> tuple[str, bool]:
    """The ``device=`` string that trains on the first ``nproc`` GPUs this process sees,
    and whether it is in NVML's (PCI bus) order.

    Ultralytics writes its ``device=`` string into CUDA_VISIBLE_DEVICES
    (``select_device`` in ultralytics/utils/torch_utils.py), replacing the user's: under
    ``CUDA_VISIBLE_DEVICES=2,3`` a plain ``0,1`` trains on physical GPUs 0 and 1, perhaps
    someone else's. So the entries the user made visible are handed on as they are.
    Ultralytics also lower-cases the string, and a GPU UUID (``GPU-...``) is matched by
    CUDA with its prefix as written; UUIDs are therefore turned into NVML indices (PCI bus
    order: the caller sets CUDA_DEVICE_ORDER=PCI_BUS_ID). MIG instances cannot train with
    DDP across instances (NCCL does not support it), and are refused.
    """
    if visible is None or not visible.strip():
        return ",".join(str(i) for i in range(nproc)), False
    entries = [e.strip() for e in visible.split(",") if e.strip()][:nproc]
    if all(e.isdigit() for e in entries):
        return ",".join(entries), False
    indices = []
    for entry in entries:
        if entry.isdigit() or entry.upper().startswith("MIG-") or index_of_uuid is None:
            raise DeviceChoiceError(entry)
        index = index_of_uuid(entry)
        if index is None:
            raise DeviceChoiceError(entry)
        indices.append(str(index))
    return ",".join(indices), True


def nvml_index_of_uuid(uuid: str) -> int | None:
    """The NVML index (PCI bus order) of the GPU with this UUID, None when unknown."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByUUID(uuid)))
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, an unknown UUID, an old NVML: not translatable
        return None


def driver_command(options: SmokeOptions, run_dir: Path, device: str, nproc: int,
                   tag: str, devices: str | None = None) -> list[str]:
    """The driver's command line: GPU entries make Ultralytics launch its own DDP."""
    if devices is None:
        devices = "cpu" if device == "cpu" else ",".join(str(i) for i in range(nproc))
    workers = options.workers if options.workers is not None else (1 if device == "cuda"
                                                                    else 0)
    return [options.python, str(DRIVER), "--out", str(run_dir), "--device", devices,
            "--epochs", str(EPOCHS), "--imgsz", str(IMGSZ), "--batch", str(options.batch),
            "--workers", str(workers), "--train-images",
            str(TRAIN_IMAGES_PER_RANK * max(1, nproc)), "--tag", tag]


def driver_env(run_dir: Path, pci_order: bool = False) -> dict[str, str]:
    """Offline, settings in the run directory, and the rank hook importable by the ranks;
    ``pci_order``: the device string holds NVML indices (``ultralytics_devices``)."""
    # Ultralytics reads RANK at import: an inherited one (the doctor run inside a torchrun
    # or Slurm step) would make the driver act as a DDP rank instead of launching its own.
    env = without_rendezvous(dict(os.environ))
    env.update(YOLO_OFFLINE="1", YOLO_CONFIG_DIR=str(run_dir / "config"),
               DDP_DOCTOR_ULTRA_RANKS=str(run_dir / "ranks"), PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH")) if p)
    if pci_order:
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    env["PET_LOG_DIR"] = str(torchrun_log_dir(run_dir))  # Ultralytics' DDP launches torchrun
    return env


def read_run(run_dir: Path, run: UltraRun) -> UltraRun:
    """Fill ``run`` from the files the driver and Ultralytics wrote under ``run_dir``."""
    try:
        lines = (run_dir / "events.jsonl").read_text(encoding="utf-8").splitlines()
    except OSError:
        lines = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            run.events.append(event)
    csv_path = run_dir / "run" / "results.csv"
    run.results_csv = csv_path.read_text(encoding="utf-8") if csv_path.exists() else None
    run.weights = (run_dir / "run" / "weights" / "last.pt").is_file()
    ranks = run_dir / "ranks"
    run.ranks_started = len(list(ranks.glob("rank*"))) if ranks.is_dir() else 0
    run.output = "\n".join(_read(run_dir / n) for n in ("driver.stderr", "driver.stdout"))
    return run


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def run_ultralytics(options: SmokeOptions, progress: ProgressSink | None = None) -> SmokeResult:
    """One Ultralytics training run on this node (all GPUs through its DDP, or the CPU)."""
    resolved = resolve_device(options)
    if isinstance(resolved, Finding):
        data = base_data(options, options.device, options.nproc or 0, 0)
        data["trainer"] = "ultralytics"
        return SmokeResult(data, [resolved])
    device, nproc = resolved
    nproc = 1 if device == "cpu" else nproc  # Ultralytics trains the CPU in one process
    data = base_data(options, device, nproc, nproc)
    # On GPUs Ultralytics starts its ranks with torch.distributed.run; the CPU is one process.
    data.update(trainer="ultralytics", launcher="none" if device == "cpu" else "torchrun",
                imgsz=IMGSZ, steps=EPOCHS, backend=None if device == "cpu" else "nccl",
                mode="single" if device == "cpu" else "ddp", measurements=None)
    own_dir = options.run_dir is None
    run_dir = Path(options.run_dir or tempfile.mkdtemp(prefix="ddp-doctor-smoke-"))
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "ranks").mkdir(exist_ok=True)
    tag = new_tag()
    pci_order = False
    devices = None
    if device == "cuda":
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        try:
            devices, pci_order = ultralytics_devices(visible, nproc, nvml_index_of_uuid)
        except DeviceChoiceError as exc:
            if own_dir:
                shutil.rmtree(run_dir, ignore_errors=True)
            return SmokeResult(data, [_device_choice_finding(str(visible), str(exc))])
    cmd = driver_command(options, run_dir, device, nproc, tag, devices)
    data["command"] = " ".join(cmd)
    wall, stall, _ = options.deadlines()
    if progress is not None:
        progress.note(f"training Ultralytics YOLO for {EPOCHS} epochs on "
                      f"{'the CPU' if device == 'cpu' else f'{nproc} GPU(s)'}")
    with stop_signals_raise() as request:
        try:
            outcome = _launch(cmd, driver_env(run_dir, pci_order), run_dir, tag, wall, stall,
                              request)
        except BaseException:
            if own_dir:
                shutil.rmtree(run_dir, ignore_errors=True)
            raise
        finally:
            shutil.rmtree(run_dir / TORCHRUN_LOGS, ignore_errors=True)
    if isinstance(outcome, OSError):
        if own_dir:  # nothing ran: nothing to read, and the result names no directory
            shutil.rmtree(run_dir, ignore_errors=True)
        finding = Finding(C.LAUNCH_FAILED, f"The Ultralytics driver could not start: "
                          f"{outcome.strerror or outcome}",
                          (Evidence("command", data["command"], ""),))
        return SmokeResult(data, [finding])
    run = read_run(run_dir, UltraRun(options.python, device, nproc, EPOCHS,
                                     returncode=outcome.returncode,
                                     stopped_by=outcome.stopped_by, wall_s=outcome.wall_s))
    findings, measured = judge(run)
    data.update(ultralytics=measured, steps_done=measured["epochs_done"],
                ok=status_of(findings) is not Status.FAIL, wall_s=round(outcome.wall_s, 3),
                exit_code=outcome.returncode, stopped_by=outcome.stopped_by,
                run_dir=str(run_dir))
    box = [v for v in measured["box_loss"] if v is not None]
    if box:
        data.update(loss_first=box[0], loss_last=box[-1], loss_judged=len(box) >= 2)
    kept = None
    if data["ok"] and own_dir:
        if options.keep_run_dir:
            kept = str(run_dir)
        else:
            shutil.rmtree(run_dir, ignore_errors=True)
        data["run_dir"] = None
    return SmokeResult(data, findings, kept_run_dir=kept)


def _device_choice_finding(visible: str, entry: str) -> Finding:
    return Finding(
        C.LAUNCH_FAILED, f"Ultralytics cannot be pointed at the GPU {entry!r} of "
        "CUDA_VISIBLE_DEVICES", (Evidence("CUDA_VISIBLE_DEVICES", visible, "environment"),),
        (Step("Name the GPUs by index (nvidia-smi -L lists them); Ultralytics rewrites "
              "CUDA_VISIBLE_DEVICES from its device= string and lower-cases it.",
              command="CUDA_VISIBLE_DEVICES=0,1 ddp-doctor smoke --trainer ultralytics"),
         Step("MIG instances cannot train one DDP job across instances; train on whole "
              "GPUs.", url="https://docs.nvidia.com/datacenter/tesla/mig-user-guide/")))


def _launch(cmd: list[str], env: dict[str, str], run_dir: Path, tag: str, wall: float,
            stall: float, request: StopRequest | None = None) -> Outcome | OSError:
    """Start the driver and wait for it; everything it started is ended on the way out
    (with the signal the doctor was sent, in ``request``, forwarded first)."""
    tree: ProcessTree | None = None
    started = time.monotonic()
    try:
        try:
            with open(run_dir / "driver.stdout", "wb") as out, \
                    open(run_dir / "driver.stderr", "wb") as err:
                tree = ProcessTree.start(cmd, tag, env, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=err, cwd=str(run_dir))
        except OSError as exc:
            return exc
        # No per-rank event files: Ultralytics' ranks report through results.csv, so only
        # the wall-clock deadline applies (a stall cannot be told from a slow epoch here).
        outcome = supervise(tree, [], started, wall, stall)
    finally:
        if tree is not None:
            tree.stop(request=request)
    if outcome.returncode is None:
        outcome.returncode = tree.proc.returncode
    return outcome



def doctor_note(packages: object, python: str) -> str | None:
    """The line `doctor` prints when Ultralytics is installed in the diagnosed interpreter.

    ``packages`` is the interpreter probe's ``python.packages`` fact (name -> copies).
    """
    copies = packages.get("ultralytics") if isinstance(packages, dict) else None
    if not isinstance(copies, list) or not copies:
        return None
    version = next((str(c.get("version")) for c in copies
                    if isinstance(c, dict) and c.get("version")), "")
    return (f"Ultralytics {version} is installed: `ddp-doctor smoke --trainer ultralytics "
            f"--python {python}` trains it through its own DDP path").replace("  ", " ")
