"""A typed, read-only view of one facts snapshot: what checks and the policy read from it.

``Facts`` holds plain JSON values so a snapshot replays anywhere; reading them directly
means chains of ``(facts.get("torch") or {}).get("cuda") or {}`` in which a misspelt key
is a silent ``None``. ``FactsView`` wraps the snapshot and gives each fact its declared
shape (``facts.shapes``), plus the derived answers several checks need (how many GPUs a
process here can use, the interpreter to put in a command, whether this is WSL), written
once so every check and the CI policy answer them the same way.

Built-in and third-party checks receive a ``FactsView``. It keeps the generic mapping
API of ``Facts`` (``view["host"]``, ``view.get(name)``, ``view.available(name)``), so a
plugin written against plain dictionaries goes on working.

An accessor of a fact that is unavailable, or whose value is null, returns an empty
shape (``{}``): checks declare the facts they need in ``@check(requires=...)`` and are
skipped without them, so an empty shape only reaches code that reads an optional fact.
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Literal, Union

from ddp_doctor.facts.shapes import (
    Container,
    CudaDevice,
    Distro,
    DriverFact,
    EnvVars,
    GpuTest,
    HostFact,
    InterconnectFact,
    KernelLogFact,
    NumpyBridge,
    NvmlFact,
    NvmlGpu,
    OsFact,
    PackageEntry,
    PlanFact,
    PythonFact,
    TorchBuild,
    TorchCuda,
    TorchFact,
    TorchLibraries,
    WslFact,
    XidEvent,
)
from ddp_doctor.facts.sizing import (
    DEFAULT_MAX_WORKERS,
    FULL_GPU_SHARE,
    RamNeed,
    cpu_cores,
    effective_ram,
    nccl_version_text,
    ram_estimate,
    visible_device_ids,
)
from ddp_doctor.facts.snapshot import Facts
from ddp_doctor.knowledge.arch import parse_capability
from ddp_doctor.knowledge.cuda_driver import max_cuda_for_driver

GpuTestKind = Literal["functional", "cudnn_test"]

# Datacenter GPU model names (NVML), and the kernel flavours of cloud images: both mean a
# server, where Ubuntu packages the driver as nvidia-driver-NNN-server (source package
# https://packages.ubuntu.com/source/noble/nvidia-graphics-drivers-580-server) and its
# installer takes --gpgpu for compute servers (Ubuntu Server guide, "NVIDIA drivers
# installation").
_DATACENTER_MODELS = frozenset({
    "A2", "A10", "A10G", "A16", "A30", "A40", "A100", "A800", "B100", "B200", "B300", "GB200",
    "GB300", "GH200", "H20", "H100", "H200", "H800", "L4", "L20", "L40", "L40S", "P4", "P40",
    "P100", "T4", "V100", "K80",
})
_CLOUD_KERNEL = re.compile(r"-(aws|azure|gcp|gke|oracle|ibm|kvm|nvidia)(-|$)")


def pci_key(bus_id: str | None) -> tuple[int, int, int] | None:
    """(domain, bus, device) of a PCI address in any of its spellings, None if unreadable.

    NVML writes "00000000:3B:00.0", the kernel log "0000:3b:00" (no function), nvidia-smi's
    table "00000000:3B:00.0": the function is left out, a GPU is function 0.
    """
    parts = (bus_id or "").strip().split(".")[0].split(":")
    if len(parts) != 3:
        return None
    try:
        domain, bus, device = (int(p, 16) for p in parts)
    except ValueError:
        return None
    return domain, bus, device


def mig_on(gpu: NvmlGpu) -> bool:
    """Whether GPU runs in MIG mode now (a pending change does not count until a reset)."""
    return (gpu.get("mig_mode") or {}).get("current") == 1


class FactsView:
    """Typed accessors over one ``Facts`` snapshot; never changes it."""

    __slots__ = ("_facts",)

    def __init__(self, facts: Facts) -> None:
        self._facts = facts

    @classmethod
    def of(cls, facts: Union[Facts, FactsView]) -> FactsView:
        """FACTS as a view (itself when it already is one)."""
        return facts if isinstance(facts, FactsView) else cls(facts)

    def __repr__(self) -> str:
        return f"FactsView({sorted(self._facts.records)})"

    # ------------------------------------------------------------------ the Facts API

    @property
    def facts(self) -> Facts:
        """The snapshot itself (its records and meta)."""
        return self._facts

    def available(self, name: str) -> bool:
        return self._facts.available(name)

    def __getitem__(self, name: str) -> Any:
        """The raw value of an available fact (KeyError otherwise), as ``Facts`` gives it."""
        return self._facts[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self._facts.get(name, default)

    def why_unavailable(self, name: str) -> str:
        return self._facts.why_unavailable(name)

    def errors(self) -> dict[str, str]:
        return self._facts.errors()

    def _value(self, name: str) -> Any:
        value = self._facts.get(name)
        return value if isinstance(value, dict) else {}

    # ------------------------------------------------------------------ the facts, typed

    def nvml(self) -> NvmlFact:
        value: NvmlFact = self._value("nvml")
        return value

    def driver(self) -> DriverFact:
        value: DriverFact = self._value("driver")
        return value

    def python(self) -> PythonFact:
        value: PythonFact = self._value("python")
        return value

    def torch(self) -> TorchFact:
        value: TorchFact = self._value("torch")
        return value

    def host(self) -> HostFact:
        value: HostFact = self._value("host")
        return value

    def os(self) -> OsFact:
        value: OsFact = self._value("os")
        return value

    def wsl(self) -> WslFact:
        value: WslFact = self._value("wsl")
        return value

    def interconnect(self) -> InterconnectFact:
        value: InterconnectFact = self._value("interconnect")
        return value

    def env_vars(self) -> EnvVars:
        value: EnvVars = self._value("env_vars")
        return value

    def plan(self) -> PlanFact:
        value: PlanFact = self._value("plan")
        return value

    def kernel_log(self) -> KernelLogFact:
        value: KernelLogFact = self._value("kernel_log")
        return value

    # ------------------------------------------------------------------ nested parts

    def nvml_gpus(self) -> list[NvmlGpu]:
        """Every GPU NVML lists, including ones it could not reach (they carry ``error``)."""
        return self.nvml().get("gpus") or []

    def reachable_gpus(self) -> list[NvmlGpu]:
        """The GPUs NVML lists and could query (no ``error`` entry)."""
        return [g for g in self.nvml_gpus() if "error" not in g]

    def torch_build(self) -> TorchBuild:
        return self.torch().get("build") or {}

    def torch_cuda(self) -> TorchCuda:
        return self.torch().get("cuda") or {}

    def cuda_devices(self) -> list[CudaDevice]:
        """The CUDA devices the torch probe saw (``torch.cuda.get_device_properties``)."""
        return self.torch_cuda().get("devices") or []

    def gpu_tests(self, kind: GpuTestKind) -> list[GpuTest]:
        """The torch probe's per-GPU results: the matmul (functional) or cuDNN test."""
        return self.torch_cuda().get(kind) or []

    def gpu_by_bus(self, bus_id: str | None) -> NvmlGpu | None:
        """The NVML GPU at a PCI address, however it is written: NVML's "00000000:3B:00.0",
        the kernel log's "0000:3b:00", torch's bus number alone is not enough (use UUIDs)."""
        wanted = pci_key(bus_id)
        if wanted is None:
            return None
        return next((g for g in self.nvml_gpus() if pci_key(g.get("pci_bus_id")) == wanted),
                    None)

    def gpu_by_uuid(self, uuid: str | None) -> NvmlGpu | None:
        """The NVML GPU with this UUID ("GPU-" prefix or not, as torch prints it)."""
        wanted = (uuid or "").lower().removeprefix("gpu-")
        if not wanted:
            return None
        return next((g for g in self.nvml_gpus()
                     if (g.get("uuid") or "").lower().removeprefix("gpu-") == wanted), None)

    def xid_events(self) -> list[tuple[XidEvent, NvmlGpu | None]]:
        """This boot's Xid/SXid events, each with the NVML GPU at its PCI address (None for an
        NVSwitch or a GPU NVML does not list)."""
        events = self.kernel_log().get("events") or []
        return [(e, self.gpu_by_bus(e.get("pci_bus_id")) if e.get("kind") == "Xid" else None)
                for e in events]

    def torch_libraries(self) -> TorchLibraries:
        return self.torch().get("libraries") or {}

    def torch_numpy(self) -> NumpyBridge:
        return self.torch().get("numpy") or {}

    def nccl_version(self) -> str | None:
        """The NCCL bundled with torch, "2.21.5" (older snapshots' version codes decoded)."""
        return nccl_version_text(self.torch_libraries().get("nccl_version"))

    def container(self) -> Container:
        return self.os().get("container") or {}

    def in_container(self) -> bool:
        return bool(self.container().get("in_container"))

    def distro(self) -> Distro:
        return self.os().get("distro") or {}

    def distro_id(self) -> str:
        """The distribution's id in lower case ("ubuntu", "rhel"); "" when unknown."""
        return (self.distro().get("id") or "").lower()

    def env_var(self, name: str) -> str | None:
        return self.env_vars().get(name)

    # ------------------------------------------------------------------ the interpreter

    def packages(self, name: str) -> list[PackageEntry]:
        """Every installed copy of distribution NAME the interpreter probe found."""
        packages = self.python().get("packages")
        entries = packages.get(name) if isinstance(packages, dict) else None
        return entries if isinstance(entries, list) else []

    def package_versions(self, name: str) -> list[str]:
        """The versions of NAME's installed copies, in the order the probe found them."""
        return [str(e.get("version")) for e in self.packages(name) if e.get("version")]

    def torch_version_source(self) -> tuple[str | None, str]:
        """torch's version and where it was read: the imported build, else package metadata."""
        version = self.torch_build().get("version")
        if version:
            return str(version), "torch.__version__"
        versions = self.package_versions("torch")
        if versions:
            return versions[0], "installed package metadata"
        return None, ""

    def torch_version(self) -> str | None:
        return self.torch_version_source()[0]

    def python_version(self) -> str | None:
        return self.python().get("version")

    def python_minor(self) -> str | None:
        """"3.11" of "3.11.4"; None when the version is unknown."""
        version = str(self.python_version() or "")
        return ".".join(version.split(".")[:2]) or None

    def target_python(self) -> str:
        """The interpreter being diagnosed (``--python``), quoted for a shell; ``python`` if
        unknown."""
        exe = self.python().get("executable")
        return shlex.quote(str(exe)) if exe else "python"

    def target_pip(self) -> str:
        """pip of the interpreter being diagnosed: ``/venv/bin/python -m pip``."""
        return f"{self.target_python()} -m pip"

    # ------------------------------------------------------------------ the machine

    def is_wsl(self) -> bool:
        """Whether the OS probe found WSL (either version)."""
        return bool((self.os().get("wsl") or {}).get("is_wsl"))

    def driver_os(self) -> str:
        """"windows" under WSL2, whose driver (and version numbers) are Windows ones."""
        return "windows" if self.is_wsl() else "linux"

    def nvidia_gpus_present(self) -> bool:
        """True when NVML lists a GPU or the PCI bus holds an NVIDIA display/3D controller."""
        return bool(self.nvml().get("gpus")) or bool(self.driver().get("pci_gpus"))

    def gpu_capabilities(self) -> list[tuple[int, int]]:
        """The compute capability of each NVML GPU that reports one."""
        return [c for c in (parse_capability(g.get("compute_capability"))
                            for g in self.nvml_gpus()) if c is not None]

    def driver_cuda(self) -> str | None:
        """The newest CUDA the driver supports: NVML's answer, else derived from its version."""
        nvml = self.nvml()
        if nvml.get("cuda_driver_version"):
            return str(nvml.get("cuda_driver_version"))
        return max_cuda_for_driver(nvml.get("driver_version"), self.driver_os())

    def looks_like_server(self) -> bool:
        """A datacenter GPU (by NVML name) or a cloud kernel: server driver packages fit."""
        for gpu in self.nvml_gpus():
            tokens = re.split(r"[\s\-_]+", str(gpu.get("name") or "").upper())
            if "TESLA" in tokens or _DATACENTER_MODELS.intersection(tokens):
                return True
        kernel = str(self.driver().get("kernel_release") or "")
        return bool(_CLOUD_KERNEL.search(kernel))

    def mig_enabled(self) -> bool:
        """Whether any GPU runs in MIG mode (only then can a MIG- UUID name a device)."""
        return any(mig_on(g) for g in self.nvml_gpus())

    # ------------------------------------------------------------------ the planned job

    def usable_gpus(self) -> tuple[int, str]:
        """How many GPUs a process started here can use, and what says so."""
        torch = self.torch()
        cuda = self.torch_cuda()
        if torch.get("importable") and cuda.get("available"):
            return int(cuda.get("device_count") or 0), "torch.cuda.device_count()"
        count = len(self.nvml_gpus())
        env_vars = self.env_vars()
        visible = visible_device_ids(env_vars, count, self.mig_enabled())
        if visible is None:
            return count, "NVML"
        return min(count, len(visible)), (
            f"NVML ({count} GPUs) with CUDA_VISIBLE_DEVICES={env_vars['CUDA_VISIBLE_DEVICES']!r}")

    def job_gpus(self) -> list[NvmlGpu]:
        """The NVML GPUs a job started here would use, in CUDA_VISIBLE_DEVICES order."""
        gpus = self.reachable_gpus()
        visible = visible_device_ids(self.env_vars(), len(gpus), self.mig_enabled())
        if visible is None:
            return gpus
        chosen: list[NvmlGpu] = []
        for entry in visible:
            if entry.isdigit():
                chosen += [g for g in gpus if g.get("index") == int(entry)]
            elif entry.startswith("GPU-"):
                chosen += [g for g in gpus
                           if (g.get("uuid") or "").lower().startswith(entry.lower())][:1]
        return chosen

    def full_gpus(self) -> list[NvmlGpu]:
        """GPUs the job would use whose memory other processes already hold (FULL_GPU_SHARE)."""
        return [g for g in self.job_gpus()
                if (g.get("memory_total") or 0) > 0
                and (g.get("memory_used") or 0) >= FULL_GPU_SHARE * (g.get("memory_total") or 0)]

    def gpu_memories(self) -> list[int]:
        """Memory of each GPU a process here can use (torch's view first, NVML otherwise)."""
        devices = self.cuda_devices()
        if self.torch().get("importable") and devices:
            return [int(d.get("total_memory") or 0) for d in devices]
        return [int(g.get("memory_total") or 0) for g in self.nvml_gpus()]

    def planned_ranks(self) -> int:
        """One process per GPU: --gpus when given, else every usable GPU."""
        gpus = self.plan().get("gpus")
        if gpus:
            return int(gpus)
        return self.usable_gpus()[0]

    def cpu_cores(self) -> int:
        """CPUs this process may run on (affinity/cgroup cpuset), else the logical count."""
        return cpu_cores(self.host())

    def workers_per_rank(self, ranks: int) -> tuple[int, bool]:
        """DataLoader workers per rank and whether the user planned them (--workers)."""
        workers = self.plan().get("workers")
        if workers is not None:
            return int(workers), True
        return min(self.cpu_cores() // max(ranks, 1), DEFAULT_MAX_WORKERS), False

    def effective_ram(self) -> tuple[int, str]:
        """Host RAM the job can have: the container's cgroup limit when lower than the RAM."""
        return effective_ram(self.host())

    def ram_needed(self) -> RamNeed:
        """Rule-of-thumb host RAM for the planned job (``facts.sizing``)."""
        ranks = self.planned_ranks()
        memories = sorted(self.gpu_memories(), reverse=True)[:ranks] or [0]
        workers, planned = self.workers_per_rank(ranks)
        return ram_estimate(ranks, max(memories), workers, planned)
