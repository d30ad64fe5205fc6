"""Which device the smoke job trains on, and with how many ranks: asked of torch itself.

The diagnosed interpreter's torch is asked once per interpreter within one ``run_smoke``
(in a child process, under a deadline) how many GPUs it can use; ``resolve_device`` turns
that and the options into the device and this node's rank count, or into the finding that
says why the job cannot train as asked. ``cpu_fallback_reason`` says, in words a user can
act on, why torch saw no GPU when ``--device auto`` fell back to the CPU.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ddp_doctor.facts.seam import run_with_deadline
from ddp_doctor.model import Evidence, Finding, Step
from ddp_doctor.smoke import codes as C
from ddp_doctor.smoke.launch import SmokeOptions
from ddp_doctor.wording import count

_PROBE = ("import json, torch; ok = torch.cuda.is_available(); print(json.dumps({'cuda': ok, "
          "'gpus': torch.cuda.device_count() if ok else 0, 'torch': torch.__version__, "
          "'cuda_build': torch.version.cuda}))")
# What a loaded NVIDIA driver leaves behind: the kernel module's version file and control
# node natively, the paravirtual GPU device under WSL2.
_DRIVER_MARKERS = ("/proc/driver/nvidia/version", "/dev/nvidiactl", "/dev/dxg")
_probed: dict[str, dict[str, Any] | Finding] = {}  # per interpreter, within one run_smoke


def forget() -> None:
    """Forget every interpreter's answer: a new run_smoke asks again."""
    _probed.clear()


def _probe(options: SmokeOptions) -> dict[str, Any] | Finding:
    """What the interpreter's torch sees; asked once per interpreter within a run_smoke."""
    if options.python not in _probed:
        _probed[options.python] = _ask_torch(options)
    return _probed[options.python]


def _ask_torch(options: SmokeOptions) -> dict[str, Any] | Finding:
    result = run_with_deadline([options.python, "-c", _PROBE], timeout=90)
    if result.ok:
        try:
            answer = json.loads(result.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            answer = None
        if isinstance(answer, dict):
            return answer
    return Finding(C.LAUNCH_FAILED, f"torch cannot be imported by {options.python}",
                   (Evidence("import torch", result.describe_failure(), options.python),),
                   (Step("Install torch in the interpreter you train with, or point the "
                         "doctor at it with --python.",
                         url="https://pytorch.org/get-started/locally/"),))


def resolve_device(options: SmokeOptions) -> tuple[str, int] | Finding:
    """The device and process count for this node: as given, else one rank per GPU or 2 CPU."""
    if options.device == "cpu":
        return "cpu", 1 if options.mode == "dp" else (options.nproc or 2)
    probe = _probe(options)
    if isinstance(probe, Finding):
        return probe
    gpus = int(probe.get("gpus") or 0)
    if options.device == "auto" and gpus == 0:
        return "cpu", 1 if options.mode == "dp" else (options.nproc or 2)
    nproc = 1 if options.mode == "dp" else (options.nproc or gpus)
    # gloo may put several ranks on one GPU (NCCL refuses two ranks on one device): the
    # explicit way to prove the multi-rank CUDA paths where fewer GPUs than ranks exist.
    shared = options.backend == "gloo" and options.mode == "ddp"
    if gpus == 0 or (options.mode == "ddp" and nproc > gpus and not shared):
        title = (f"The smoke job was asked to train on CUDA but {options.python} sees no "
                 "usable GPU" if gpus == 0 else
                 f"The smoke job needs {count(nproc, 'GPU')} but {options.python} sees only "
                 f"{gpus} usable")
        return Finding(C.NO_GPU, title, (Evidence("torch.cuda.device_count()", str(gpus),
                                                  "smoke probe"),),
                       (Step("See why GPUs are not usable.", command="ddp-doctor check"),
                        Step("Or run the smoke job on the CPU.",
                             command="ddp-doctor smoke --device cpu"),
                        *((Step("Or let the ranks share the GPUs over gloo (NCCL across "
                                "GPUs is then not proven).",
                                command=f"ddp-doctor smoke --nproc {nproc} --backend gloo"),)
                          if gpus else ())))
    return "cuda", nproc


def shared_gpus(options: SmokeOptions, device: str, nproc: int) -> int | None:
    """How many GPUs this node's ranks share when there are fewer than ranks (gloo)."""
    if device != "cuda" or options.mode != "ddp":
        return None
    probe = _probe(options)
    gpus = int(probe.get("gpus") or 0) if isinstance(probe, dict) else 0
    return gpus if 0 < gpus < nproc else None


def cpu_fallback_reason(probe: dict[str, Any], environ: dict[str, str]) -> str:
    """Why torch saw no usable GPU, in the words a user can act on."""
    version = probe.get("torch") or "?"
    if not probe.get("cuda_build"):
        return f"torch {version} is a CPU-only build: it carries no CUDA runtime"
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1", "none", "NoDevFiles"):
        return f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU from the job"
    if not any(os.path.exists(marker) for marker in _DRIVER_MARKERS):
        return (f"no NVIDIA driver is loaded ({', '.join(_DRIVER_MARKERS)} are all missing), "
                f"so torch {version} (CUDA {probe['cuda_build']}) finds no GPU")
    return (f"torch {version} (CUDA {probe['cuda_build']}) sees no usable CUDA device: "
            "torch.cuda.is_available() is False although a driver is loaded")


def not_proven(options: SmokeOptions, data: dict[str, Any]) -> Finding:
    """The warning that a run wanted GPUs, found none and trained on the CPU instead."""
    probe = _probe(options)
    why = (cpu_fallback_reason(probe, dict(os.environ)) if isinstance(probe, dict)
           else "torch could not be asked")
    ranks = data.get("ranks") or 0
    return Finding(
        C.GPU_NOT_PROVEN, "GPU training not proven: no usable GPU, so the smoke job ran on "
        "the CPU", (
            Evidence("asked for", "--device auto: the GPUs when torch can use them",
                     "smoke options"),
            Evidence("ran on", f"the CPU with gloo, {count(ranks, 'rank')}",
                     "smoke job"),
            Evidence("why no GPU", why, f"{options.python} -c 'import torch; ...'")),
        (Step("See the cause: the checks name it (driver, torch build, visible devices).",
              command="ddp-doctor check"),
         Step("Once the GPUs are usable, prove GPU training; --device cuda fails instead of "
              "falling back to the CPU.", command="ddp-doctor smoke --device cuda"),
         Step("If the CPU was what you wanted, say so and this warning goes away.",
              command="ddp-doctor smoke --device cpu")))
