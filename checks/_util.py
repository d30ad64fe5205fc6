"""Helpers shared by the check modules: byte sizes, per-GPU test results, torch install steps.

What a check reads from the facts (the interpreter to put in a command, how many GPUs a
process here can use, whether this is WSL) comes from ``ddp_doctor.facts.view.FactsView``;
what stays here is how checks word and advise.
"""

from __future__ import annotations

from ddp_doctor.facts.shapes import GpuTest
from ddp_doctor.facts.sizing import GIB, MIB
from ddp_doctor.facts.view import FactsView, GpuTestKind
from ddp_doctor.knowledge.wheels import (
    DRIVER_GUIDE,
    INSTALL_GUIDE,
    RECOMMENDED_BRANCH_MIN,
    Install,
    Recommendation,
    recommend,
)
from ddp_doctor.model import Step
from ddp_doctor.registry import Summary
from ddp_doctor.wording import human_bytes

__all__ = ["GIB", "MIB", "MORE_PROBE_TIME", "cuda_device_label", "cuda_init_cut_short",
           "gpu_test_results", "human_bytes", "install_steps", "recommendation",
           "workers_phrase"]

# The step after timing by hand the call a probe deadline cut short (CUDA's start in
# cuda.py, `import torch` in torch_build.py).
MORE_PROBE_TIME = Step("If it finishes, give the probe that much time and more.",
                       command="ddp-doctor check --probe-timeout 300")

# The torch probe's stages from torch.cuda.is_available() to the last device's properties,
# and those between `import torch` and them. (Probes before 2026-11-25 asked the arch list
# and cuDNN's version in "torch build" and "torch libraries", before CUDA: in torch 2.11
# both start CUDA, so a snapshot of such a probe stopped there is CUDA's start cut short too.)
CUDA_INIT_STAGES = ("cuda.is_available", "cuda.init", "cuda.device_count",
                    "cuda.device_properties")
BEFORE_CUDA_STAGES = ("torch build", "torch libraries", "torch.distributed", "numpy",
                      "import torchvision")


def cuda_init_cut_short(facts: FactsView) -> str | None:
    """The stage the torch probe was stopped in (a hang, or a --probe-timeout shorter than
    the probe's work) when torch had imported but CUDA's initialisation had not finished,
    else None. The device count and list the probe had sent by then are its starting
    values, not CUDA's answer. (A stop in `import torch` is torch.import's finding; one in
    a GPU's test is that GPU's.)"""
    probe = facts.torch().get("probe") or {}
    last = probe.get("last_stage")
    if probe.get("completed") or not last:
        return None
    if last.split(":", 1)[0] in CUDA_INIT_STAGES or last in BEFORE_CUDA_STAGES:
        return last
    return None


def workers_phrase(workers: int, planned: bool) -> str:
    """'8 DataLoader workers each', saying so when the count is the assumed default."""
    assumed = "" if planned else (" (assumed: the YOLO default, min(CPU cores per GPU, 8); "
                                  "give --workers to size your job)")
    return f"{workers} DataLoader workers each{assumed}"


def cuda_device_label(facts: FactsView, index: int | None) -> str:
    """'GPU 3 (NVIDIA A100-SXM4-80GB)': a CUDA index with the name the torch probe reported."""
    for dev in facts.cuda_devices():
        if dev.get("index") == index:
            return f"GPU {index} ({dev.get('name')})"
    return f"GPU {index} (unknown GPU)"


def gpu_test_results(facts: FactsView, kind: GpuTestKind,
                     what: str) -> tuple[list[GpuTest], Summary | None]:
    """The torch probe's per-GPU results of one test (``torch.cuda[kind]``).

    When there are none, also the Summary that says why: no CUDA device, or a snapshot
    saved before the probe ran GPU work (devices but no results).
    """
    results = facts.gpu_tests(kind)
    if results:
        return results, None
    cuda = facts.torch_cuda()
    if cuda.get("device_count") or (cuda.get("available") and "device_count" not in cuda):
        return [], Summary(f"not run: the probe reported no {what} for the CUDA devices")
    return [], Summary(f"no {what} ran (no CUDA device)")


def recommendation(facts: FactsView, cuda: str | None = None) -> Recommendation:
    """``knowledge.wheels.recommend`` for this machine's driver, GPUs and Python.

    ``cuda`` overrides the driver's CUDA version (a check that derived it already).
    """
    # Windows driver numbers (WSL2) are not comparable with the Linux MVC floors.
    version = None if facts.is_wsl() else facts.nvml().get("driver_version")
    return recommend(cuda or facts.driver_cuda(), facts.gpu_capabilities(),
                     facts.python_version(), version)


def _install_text(facts: FactsView, install: Install, cuda: str | None) -> str:
    """Install this build, and why it fits this machine."""
    if install.torch is None:
        head = f"Install the CUDA {install.cuda} build ({install.tag})"
        if cuda is None:
            return (f"{head}: no driver answered, so this is the build for an R580 driver "
                    f"(needs driver 580.65.06 or newer); with an older driver use the cuXYZ "
                    f"index that matches the 'CUDA Version' nvidia-smi prints")
        how = (f"runs on this driver (CUDA {cuda}) through minor-version compatibility"
               if install.minor_compat else f"runs on this driver (it supports CUDA {cuda})")
        return f"{head}: it {how} and has kernels for these GPUs"
    how = " through minor-version compatibility" if install.minor_compat else ""
    return (f"Install torch {install.torch} with torchvision {install.torchvision} (CUDA "
            f"{install.cuda}, {install.tag}): the newest release that runs on this driver{how}, "
            f"has kernels for these GPUs and supports Python {facts.python_minor()}")


def _blocked(facts: FactsView, rec: Recommendation, cuda: str | None) -> str:
    reasons = {
        "driver": f"its builds with kernels for these GPUs need driver {rec.driver_needed} "
                  f"or newer (this driver supports CUDA {cuda})" if rec.driver_needed else
                  f"no CUDA build of it runs on this driver (CUDA {cuda})",
        "gpu": "none of its CUDA builds has kernels for these GPUs",
        "python": f"it needs Python {rec.python_min} to {rec.python_max} (this is "
                  f"{facts.python_minor()})",
    }
    return "; ".join(reasons[b] for b in rec.blocked)


def install_steps(facts: FactsView, packages: str = "torch torchvision torchaudio",
                  cuda: str | None = None) -> list[Step]:
    """Steps that install a torch this machine runs, for every check that advises one.

    Never an unpinned install that the driver cannot run: a current build matched to the
    driver, else an exact older release, plus the driver upgrade that makes current torch fit.
    """
    rec = recommendation(facts, cuda)
    cuda = cuda or facts.driver_cuda()
    pip = facts.target_pip()
    steps: list[Step] = []
    prefix = ""
    if rec.blocked:
        prefix = f"The current PyTorch release does not fit here: {_blocked(facts, rec, cuda)}. "
    if rec.install is not None:
        steps.append(Step(f"{prefix}{_install_text(facts, rec.install, cuda)}.",
                          command=rec.install.command(pip, packages), url=INSTALL_GUIDE))
    if rec.driver_branch and rec.current is not None:
        where = ("update the NVIDIA driver on Windows (WSL2 uses it) to"
                 if facts.is_wsl() else "upgrade the driver to")
        text = (f"{where} the R{rec.driver_branch} branch ({RECOMMENDED_BRANCH_MIN} or newer, "
                f"long-term support), then install the current {rec.current.tag} build")
        command = rec.current.command(pip, packages)
        if "python" in rec.blocked:
            text += f" into a new Python {rec.python_min}+ environment"
            venv = f"python{rec.python_min} -m venv ~/venvs/train"
            command = venv + " && " + rec.current.command("~/venvs/train/bin/python -m pip",
                                                          packages)
        text = f"Or {text}" if steps else prefix + text[0].upper() + text[1:]
        steps.append(Step(text + ".", command=command, url=DRIVER_GUIDE))
        prefix = ""
    if not steps:
        steps.append(Step(f"{prefix}No published build is known to run here; see the "
                          "install guide for the builds of your GPU and driver.",
                          url=INSTALL_GUIDE))
    return steps
