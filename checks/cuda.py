"""CUDA checks: does CUDA initialise, and does every visible GPU actually compute?

``torch.cuda.is_available()`` can be False with a driver present, and True while the
first kernel fails; the torch probe runs a matmul on every GPU to tell.

Sources:
- CUDA runtime error codes (cudaErrorInsufficientDriver = 35, cudaErrorNoDevice = 100,
  cudaErrorSystemDriverMismatch = 803, cudaErrorUnknown = 999, cudaErrorDevicesUnavailable
  = 46 "all CUDA-capable devices are busy or unavailable"):
  https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html
- Error 999 / "CUDA unknown error" after suspend/resume, fixed by reloading nvidia_uvm:
  pytorch/pytorch#49081, #88639; pop-os/default-settings#64.
- Compute modes (Default, Exclusive_Process, Prohibited) and ``nvidia-smi -c``:
  https://docs.nvidia.com/deploy/nvml-api/ (nvmlComputeMode_t), ``nvidia-smi --help``.
- "no CUDA-capable device is detected" with CUDA_VISIBLE_DEVICES hiding every GPU:
  https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#env-vars
"""

from __future__ import annotations

from collections.abc import Iterator

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.facts.shapes import NvmlGpu
from ddp_doctor.facts.view import FactsView
from ddp_doctor.model import Evidence, Finding, Severity, Step
from ddp_doctor.registry import Summary, check
from ddp_doctor.wording import count

from ._util import MORE_PROBE_TIME, cuda_device_label, cuda_init_cut_short, gpu_test_results

RUNTIME_ERRORS = "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html"

CUDA_UNKNOWN_ERROR = declare(
    id="CUD001",
    category=Category.CUDA_INIT_FAILURE,
    summary="CUDA cannot initialise although the driver answers",
    what="NVML talks to the driver, but torch's CUDA initialisation fails (error 999, "
         "'CUDA unknown error', or another init error) or never returns.",
    why="torch.cuda.is_available() is False: training silently runs on the CPU or stops.",
    fix="After a suspend/resume, reload the nvidia_uvm kernel module (or reboot); otherwise "
        "follow the error text shown in the evidence.",
    docs_url=RUNTIME_ERRORS,
)
CUDA_NO_DEVICE = declare(
    id="CUD002",
    category=Category.GPU_NOT_VISIBLE,
    summary="CUDA sees no device although the driver lists GPUs",
    what="CUDA initialisation says 'no CUDA-capable device is detected' (error 100) while "
         "NVML lists GPUs: CUDA_VISIBLE_DEVICES hides them, or the container got no device "
         "nodes.",
    why="The process gets zero GPUs; every rank fails with 'invalid device ordinal'.",
    fix="Unset or correct CUDA_VISIBLE_DEVICES; in a container, pass the GPUs in.",
    docs_url="https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#env-vars",
)
CUDA_DEVICES_BUSY = declare(
    id="CUD003",
    category=Category.CUDA_INIT_FAILURE,
    summary="All CUDA devices are busy or unavailable",
    what="CUDA initialisation fails with 'all CUDA-capable devices are busy or unavailable': "
         "the GPUs are in Exclusive_Process compute mode with another process holding them, "
         "or in Prohibited mode.",
    why="No rank can create a CUDA context.",
    fix="Set the compute mode back to Default (`sudo nvidia-smi -i N -c DEFAULT`) or stop the "
        "process holding the GPU.",
    docs_url="https://docs.nvidia.com/deploy/nvml-api/",
)
CUDA_DRIVER_TOO_OLD = declare(
    id="CUD004",
    category=Category.DRIVER_TOO_OLD,
    summary="CUDA init: the driver is too old for torch's CUDA runtime",
    what="CUDA initialisation fails with 'CUDA driver version is insufficient for CUDA "
         "runtime version' (error 35).",
    why="torch's CUDA runtime needs a newer driver: no GPU can be used.",
    fix="Upgrade the NVIDIA driver, or install a torch build for an older CUDA.",
    docs_url="https://docs.nvidia.com/deploy/cuda-compatibility/",
)
CUDA_DRIVER_MISMATCH = declare(
    id="CUD005",
    category=Category.DRIVER_LIBRARY_MISMATCH,
    summary="CUDA init: the driver's user-space and kernel parts disagree",
    what="CUDA initialisation fails with 'system has unsupported display driver / cuda "
         "driver combination' (error 803): libcuda and the kernel module are from different "
         "driver versions, or a forward-compatibility libcuda is used on an unsupported GPU.",
    why="No CUDA context can be created until both parts match.",
    fix="Reboot after a driver upgrade; remove a stray cuda-compat libcuda from "
        "LD_LIBRARY_PATH.",
    docs_url="https://docs.nvidia.com/deploy/cuda-compatibility/",
)
GPU_FUNCTIONAL_FAILED = declare(
    id="CUD006",
    category=Category.CUDA_INIT_FAILURE,
    summary="A GPU fails a small matmul",
    what="The torch probe allocated two matrices on the GPU, multiplied them, synchronised "
         "and compared with the CPU; on this GPU that failed or gave wrong numbers.",
    why="Training on this GPU crashes at its first kernel or computes garbage, though "
        "torch.cuda.is_available() is True.",
    fix="Read the error: an illegal memory access or an Xid in `dmesg` points at the GPU "
        "(reset it or drain the node); wrong numbers mean faulty hardware.",
    docs_url=RUNTIME_ERRORS,
)
GPU_FUNCTIONAL_HUNG = declare(
    id="CUD007",
    category=Category.CUDA_INIT_FAILURE,
    summary="A GPU did not finish a small matmul before its deadline",
    what="The torch probe's matmul on this GPU never completed: the device or its driver "
         "is wedged.",
    why="Any job that touches this GPU hangs; with DDP every other rank then waits in the "
        "first collective until the watchdog kills the job.",
    fix="Look for Xid errors in the kernel log, stop processes on the GPU and reset it, or "
        "exclude it with CUDA_VISIBLE_DEVICES until it is repaired.",
    docs_url=RUNTIME_ERRORS,
)
COMPUTE_MODE_NOT_DEFAULT = declare(
    id="CUD008",
    category=Category.CUDA_INIT_FAILURE,
    summary="A GPU's compute mode is not Default",
    what="Exclusive_Process allows one CUDA process per GPU; Prohibited allows none.",
    why="Prohibited: every rank fails at CUDA init. Exclusive_Process: a second process on "
        "the GPU (a monitor, a DataLoader worker touching CUDA, two ranks on one GPU) fails "
        "with 'all CUDA-capable devices are busy or unavailable'.",
    fix="Set the compute mode to Default with `sudo nvidia-smi -i N -c DEFAULT`.",
    severity=Severity.WARNING,
    docs_url="https://docs.nvidia.com/deploy/nvml-api/",
)


def _compute_mode_steps(gpus: list[NvmlGpu]) -> list[Step]:
    steps = [Step(f"Set GPU {g.get('index')} ({g.get('name')}) back to the Default compute "
                  "mode.", command=f"sudo nvidia-smi -i {g.get('index')} -c DEFAULT")
             for g in gpus]
    steps.append(Step("See which processes hold the GPUs.",
                      command="nvidia-smi --query-compute-apps=pid,process_name,gpu_uuid "
                              "--format=csv"))
    return steps


def _init_unfinished(facts: FactsView, stage: str) -> Finding:
    """The probe was stopped before CUDA's initialisation finished: a wedged driver, or a
    deadline shorter than torch's and CUDA's start; timing the same call by hand tells
    which."""
    probe = facts.torch().get("probe") or {}
    nvml = facts.nvml()
    python = facts.target_python()
    return Finding(
        code=CUDA_UNKNOWN_ERROR,
        title=(f"CUDA initialisation did not finish: the torch probe was stopped in {stage}"
               if stage.startswith("cuda.") else
               f"CUDA was never initialised: the torch probe was stopped earlier, in {stage}"),
        evidence=(Evidence("torch probe", str(probe.get("failure") or "stopped"),
                           "interpreter probe"),
                  Evidence("NVML", f"driver {nvml.get('driver_version')}, "
                           f"{count(len(facts.nvml_gpus()), 'GPU')}", "nvmlInit()")),
        remediation=(
            Step("Time CUDA's start in the same interpreter: no answer within minutes means "
                 "a wedged driver.",
                 command=f'time {python} -c "import torch; torch.cuda.init(); '
                         'print(torch.cuda.device_count())"'),
            MORE_PROBE_TIME,
            Step("If it hangs, stop the GPU processes and reload the CUDA unified-memory "
                 "module, or reboot.", command="sudo rmmod nvidia_uvm && sudo modprobe nvidia_uvm"),
        ))


def _init_finding(facts: FactsView, error: str) -> Finding:
    """Map the exact init error text to its cause and fix."""
    low = error.lower()
    nvml = facts.nvml()
    gpus = facts.nvml_gpus()
    evidence = [Evidence("torch.cuda.init()", error, "interpreter probe"),
                Evidence("NVML", f"driver {nvml.get('driver_version')}, "
                         f"{count(len(gpus), 'GPU')}", "nvmlInit()")]
    if "busy or unavailable" in low:
        odd = [g for g in gpus if g.get("compute_mode") not in (None, "Default")]
        evidence += [Evidence(f"GPU {g.get('index')} compute mode", str(g.get("compute_mode")),
                              "NVML") for g in odd]
        return Finding(code=CUDA_DEVICES_BUSY,
                       title="CUDA init fails: all CUDA-capable devices are busy or unavailable",
                       evidence=tuple(evidence),
                       remediation=tuple(_compute_mode_steps(odd or gpus)),
                       affects=tuple(f"gpu:{g.get('index')}" for g in odd))
    if "no cuda-capable device" in low or "error 100" in low:
        visible = facts.env_var("CUDA_VISIBLE_DEVICES")
        evidence.append(Evidence("CUDA_VISIBLE_DEVICES",
                                 "not set" if visible is None else repr(visible), "environment"))
        return Finding(
            code=CUDA_NO_DEVICE,
            title=f"CUDA detects no device although NVML lists {count(len(gpus), 'GPU')}",
            evidence=tuple(evidence),
            remediation=(
                Step("Unset CUDA_VISIBLE_DEVICES (or list real GPU indices in it).",
                     command="unset CUDA_VISIBLE_DEVICES"),
                Step("In a container, start it with the GPUs passed in.",
                     command="docker run --gpus all --ipc=host ..."),
                Step("Confirm torch sees them.",
                     command=f'{facts.target_python()} -c "import torch; '
                             'print(torch.cuda.device_count())"'),
            ))
    if "insufficient for cuda runtime" in low or "error 35" in low:
        return Finding(code=CUDA_DRIVER_TOO_OLD,
                       title=f"CUDA init fails: driver {nvml.get('driver_version')} is too old "
                             "for torch's CUDA runtime",
                       evidence=tuple(evidence),
                       remediation=(Step("Upgrade the driver (see the driver check for the "
                                         "version needed), or install a torch build for the "
                                         "CUDA version nvidia-smi reports.",
                                         command="nvidia-smi | grep 'CUDA Version'",
                                         url="https://pytorch.org/get-started/locally/"),))
    if "unsupported display driver" in low or "error 803" in low:
        return Finding(code=CUDA_DRIVER_MISMATCH,
                       title="CUDA init fails: the driver's libcuda and kernel module disagree "
                             "(error 803)",
                       evidence=tuple(evidence),
                       remediation=(
                           Step("Look for a second libcuda (cuda-compat) on the library path.",
                                command="echo $LD_LIBRARY_PATH; ldconfig -p | grep libcuda.so"),
                           Step("Reboot so the kernel module matches the installed driver.",
                                command="sudo reboot"),
                       ))
    title = ("CUDA init fails with error 999 (unknown error)" if "999" in low or
             "unknown error" in low else "CUDA init fails although the driver answers")
    return Finding(
        code=CUDA_UNKNOWN_ERROR, title=title, evidence=tuple(evidence),
        remediation=(
            Step("Reload the CUDA unified-memory module (the usual cure after a suspend/resume; "
                 "stop GPU processes first).",
                 command="sudo rmmod nvidia_uvm && sudo modprobe nvidia_uvm"),
            Step("If the module is in use or the error persists, reboot.",
                 command="sudo reboot"),
            Step("Confirm CUDA initialises.",
                 command=f'{facts.target_python()} -c "import torch; torch.cuda.init(); '
                         'print(torch.cuda.device_count())"'),
        ))


@check(
    id="cuda.init",
    title="CUDA initialisation",
    area="cuda",
    requires=("torch", "nvml"),
    codes=(CUDA_UNKNOWN_ERROR, CUDA_NO_DEVICE, CUDA_DEVICES_BUSY, CUDA_DRIVER_TOO_OLD,
           CUDA_DRIVER_MISMATCH),
    blocked_by=("driver.present", "torch.import", "torch.cuda_build"),
)
def cuda_init(facts: FactsView) -> Iterator[Finding | Summary]:
    cuda = facts.torch_cuda()
    build = facts.torch_build()
    cut = cuda_init_cut_short(facts)
    # A probe stopped before it reported the build still had a torch that may use CUDA.
    if cut is not None and facts.nvml().get("initialized") and (build.get("cuda") or not build):
        yield _init_unfinished(facts, cut)
        return
    if not build.get("cuda") or not facts.nvml().get("initialized"):
        yield Summary("no CUDA build or no driver: nothing to initialise")
        return
    if cuda.get("available") and not cuda.get("init_error"):
        devices = cuda.get("device_count")
        yield Summary("CUDA available" if devices is None else count(devices, "CUDA device"))
        return
    if "available" not in cuda or "init_error" not in cuda:
        # Facts from a pasted report: whether or why CUDA failed was not recorded, and the
        # driver and build checks judge the causes they can see.
        yield Summary("CUDA " + ("not available" if "available" in cuda else "state unknown")
                      + "; the reason was not recorded")
        return
    yield _init_finding(facts, cuda.get("init_error")
                        or "torch.cuda.is_available() returned False without an error")


@check(
    id="cuda.functional",
    title="GPU functional test",
    area="cuda",
    requires=("torch",),
    codes=(GPU_FUNCTIONAL_FAILED, GPU_FUNCTIONAL_HUNG),
    blocked_by=("torch.import", "torch.cuda_build", "torch.arch_support", "cuda.init"),
)
def cuda_functional(facts: FactsView) -> Iterator[Finding | Summary]:
    results, none_ran = gpu_test_results(facts, "functional", "functional test")
    if none_ran is not None:
        yield none_ran
        return
    bad = [r for r in results if not r.get("ok")]
    if not bad:
        slowest = max(float(r.get("duration_s") or 0) for r in results)
        yield Summary(f"matmul ok on {count(len(results), 'GPU')}, slowest {slowest:.2f}s")
        return
    for r in bad:
        index = r.get("index")
        label = cuda_device_label(facts, index)
        evidence = (Evidence(label, r.get("error") or "failed", "torch probe: matmul test"),
                    Evidence("duration", f"{float(r.get('duration_s') or 0):.2f}s",
                             "torch probe"))
        if r.get("timed_out"):
            yield Finding(
                code=GPU_FUNCTIONAL_HUNG,
                title=f"{label} did not finish a small matmul: it hangs",
                evidence=evidence, affects=(f"gpu:{index}",),
                remediation=(
                    Step("Look for Xid errors from this GPU in the kernel log.",
                         command="sudo dmesg -T | grep -i xid | tail -20"),
                    Step("See what runs on the GPU, stop it, then reset the GPU.",
                         command=f"nvidia-smi -i {index} && sudo nvidia-smi -i {index} -r"),
                    Step("Until it is repaired, leave it out of training (list the other GPUs).",
                         command="export CUDA_VISIBLE_DEVICES=" + ",".join(
                             str(x.get("index")) for x in results
                             if x.get("ok"))),
                ))
        else:
            yield Finding(
                code=GPU_FUNCTIONAL_FAILED,
                title=f"{label} fails a small matmul: {r.get('error')}",
                evidence=evidence, affects=(f"gpu:{index}",),
                remediation=(
                    Step("Rerun with synchronous kernel launches to see the failing call.",
                         command=f"CUDA_LAUNCH_BLOCKING=1 {facts.target_python()} -c "
                                 "\"import torch; "
                                 f"x = torch.rand(1024, 1024, device='cuda:{index}'); "
                                 "print((x @ x).sum().item())\""),
                    Step("Look for Xid errors from this GPU in the kernel log.",
                         command="sudo dmesg -T | grep -i xid | tail -20"),
                    Step("Reset the GPU (stop its processes first); if it fails again, have the "
                         "hardware checked.", command=f"sudo nvidia-smi -i {index} -r"),
                ))


@check(
    id="cuda.compute_mode",
    title="GPU compute mode",
    area="cuda",
    requires=("nvml",),
    codes=(COMPUTE_MODE_NOT_DEFAULT,),
    blocked_by=("driver.present",),
)
def cuda_compute_mode(facts: FactsView) -> Iterator[Finding | Summary]:
    gpus = facts.nvml_gpus()
    odd = [g for g in gpus if g.get("compute_mode") not in (None, "Default")]
    if not odd:
        yield Summary(f"Default on {count(len(gpus), 'GPU')}")
        return
    for g in odd:
        mode = str(g.get("compute_mode"))
        yield Finding(
            code=COMPUTE_MODE_NOT_DEFAULT,
            title=f"GPU {g.get('index')} ({g.get('name')}) is in {mode} compute mode",
            severity=Severity.ERROR if mode == "Prohibited" else Severity.WARNING,
            evidence=(Evidence(f"GPU {g.get('index')} compute mode", mode,
                               "NVML nvmlDeviceGetComputeMode"),),
            remediation=tuple(_compute_mode_steps([g])),
            affects=(f"gpu:{g.get('index')}",),
        )
