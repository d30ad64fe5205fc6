"""The declared shape of every fact the probes write and the checks and the policy read.

A snapshot is plain JSON so that ``--save-facts`` on one machine replays with ``--facts``
on another; these TypedDicts say what that JSON holds, so that code reading it is checked
by mypy: a misspelt key is a type error instead of a ``None`` that quietly passes a check.
``docs/facts.schema.json`` describes the same shapes for the snapshot file, and a test
keeps the two in step.

Every shape is ``total=False``: facts read from a pasted report (``textfacts``) or saved
by an older version carry only some keys, so code must never assume a key is there. A
value typed ``Optional`` is one the probe itself writes as ``null`` (a query NVML does not
support, a step the interpreter probe could not run).

Where each shape comes from: ``nvml`` ``facts/nvml.py`` (+ ``nvml_topology.py``),
``driver`` ``facts/driver_files.py``, ``python`` and ``torch`` ``facts/torch_probe.py``
(the interpreter probe, ``python_probe_script.py``), ``host`` ``facts/host.py``, ``os``
``facts/os_info.py``, ``wsl`` ``facts/wsl.py``, ``interconnect`` ``facts/interconnect.py``,
``env_vars`` ``facts/environment_variables.py``, ``plan`` ``facts/plan.py`` (the CLI's
``--gpus/--batch/--workers``), ``nvidia_smi_text`` ``facts/nvidia_smi_text.py``,
``kernel_log`` ``facts/kernel_log.py``.
"""

from __future__ import annotations

from typing import Any, Optional, TypedDict, Union

# --------------------------------------------------------------------------- nvml


class MigMode(TypedDict, total=False):
    current: Optional[int]  # 1 = enabled
    pending: Optional[int]


class Ecc(TypedDict, total=False):
    enabled: Optional[bool]
    volatile_uncorrected: Optional[int]
    aggregate_uncorrected: Optional[int]


class RemappedRows(TypedDict, total=False):
    correctable: Optional[int]
    uncorrectable: Optional[int]
    pending: bool
    failure: bool


class Fabric(TypedDict, total=False):
    state: str  # "not_started" | "in_progress" | "completed"


class GpuProcess(TypedDict, total=False):
    pid: int
    used_memory: Optional[int]
    name: Optional[str]
    username: Optional[str]


class PcieLink(TypedDict, total=False):
    """The GPU's PCIe link: generation and lane count now and the most this GPU and slot
    allow (NVML's Max* queries answer for the pair), and the link's replay counter."""

    gen_current: Optional[int]
    gen_max: Optional[int]
    width_current: Optional[int]
    width_max: Optional[int]
    replay_counter: Optional[int]


class NvmlGpu(TypedDict, total=False):
    """One GPU as NVML sees it; a GPU NVML cannot reach has only index, error, error_type."""

    index: int
    name: Optional[str]
    uuid: Optional[str]
    pci_bus_id: Optional[str]
    memory_total: Optional[int]
    memory_used: Optional[int]
    compute_capability: Optional[str]  # "8.0"
    mig_mode: Optional[MigMode]
    compute_mode: Union[str, int, None]  # "Default", ...; the raw number when unknown
    persistence_mode: Optional[bool]
    ecc: Optional[Ecc]
    retired_pages_pending: Optional[bool]
    remapped_rows: Optional[RemappedRows]
    fabric: Optional[Fabric]
    processes: list[GpuProcess]
    pcie: Optional[PcieLink]  # read at idle: the generation may be lowered to save power
    clock_event_reasons: Optional[int]  # nvmlClocksEventReasons bit mask, at idle
    temperature: Optional[int]  # degrees C
    temperature_slowdown: Optional[int]  # degrees C at which the GPU slows itself down
    temperature_max_operating: Optional[int]  # degrees C the GPU holds itself under
    temperature_margin: Optional[int]  # degrees C left below that limit (T.Limit)
    error: str
    error_type: str


class Topology(TypedDict, total=False):
    """n x n matrices over NVML indices (None on the diagonal and where a query failed)."""

    link: Optional[list[list[Optional[str]]]]  # what `nvidia-smi topo -m` prints
    pcie: Optional[list[list[Optional[str]]]]
    nvlinks: Optional[list[list[Optional[int]]]]
    numa_affinity: Optional[list[Optional[int]]]
    error: Optional[str]


class NvmlFact(TypedDict, total=False):
    initialized: bool
    error: Optional[str]
    error_type: str
    driver_version: Optional[str]
    cuda_driver_version: Optional[str]  # "12.4"
    nvml_version: Optional[str]
    gpus: list[NvmlGpu]
    topology: Topology


# --------------------------------------------------------------------------- driver


class PciGpu(TypedDict, total=False):
    address: str
    device_id: str
    driver: Optional[str]


class KernelModules(TypedDict, total=False):
    modules_dir: bool
    nvidia_module_files: list[str]


class DriverFact(TypedDict, total=False):
    proc_version: Optional[str]
    module_version: Optional[str]
    modules_loaded: list[str]
    nouveau_loaded: bool
    device_nodes: list[str]
    nvidia_smi: Optional[str]
    pci_gpus: list[PciGpu]
    pci_scan_ok: bool
    kernel_release: Optional[str]
    kernel_modules: KernelModules
    dkms_status: Optional[str]
    userspace_versions: list[str]
    nvswitch_count: int
    fabric_manager_running: Optional[bool]


# --------------------------------------------------------------------------- python, torch


class PackageEntry(TypedDict, total=False):
    version: Optional[str]
    location: Optional[str]


class PythonFact(TypedDict, total=False):
    executable: str
    version: str  # "3.11.4"
    implementation: str
    prefix: str
    base_prefix: str
    platform: str
    cwd: str
    in_venv: bool
    # Normalised distribution name -> every installed copy; {"error": why} when the
    # interpreter has no importlib.metadata.
    packages: dict[str, Union[list[PackageEntry], str]]
    torch_locations: list[str]


class ProbeTimings(TypedDict, total=False):
    """Where the torch probe's time went, in seconds; None: the probe never got there."""
    startup_s: Optional[float]  # the interpreter's start, before the script's clock
    packages_s: Optional[float]  # listing the installed distributions, beside import torch
    import_torch_s: Optional[float]
    torch_facts_s: Optional[float]  # build, distributed, NumPy
    # torchvision's import and operators, in a thread beside CUDA's start (so its time is
    # not added to the probe's: the parts overlap); absent in snapshots saved before
    torchvision_s: Optional[float]
    cuda_init_s: Optional[float]  # is_available, init, device count and properties
    gpu_tests_s: Optional[float]  # the functional and cuDNN tests of every GPU
    p2p_query_s: Optional[float]
    under_load_s: Optional[float]
    p2p_copy_s: Optional[float]
    total_s: Optional[float]  # the script's own time, start-up excluded


class TorchProbe(TypedDict, total=False):
    completed: bool
    last_stage: Optional[str]
    timed_out: bool
    returncode: Optional[int]
    failure: Optional[str]
    stderr_tail: Optional[str]
    duration_s: float
    timings: ProbeTimings  # absent in snapshots saved before the parts were timed


class TorchImportError(TypedDict, total=False):
    type: str
    message: str


class TorchBuild(TypedDict, total=False):
    version: Optional[str]
    cuda: Optional[str]
    hip: Optional[str]
    git_version: Optional[str]
    debug: Optional[bool]
    file: Optional[str]
    cxx11_abi: Optional[bool]
    arch_list: list[str]


class TorchLibraries(TypedDict, total=False):
    cudnn_available: Optional[bool]
    cudnn_version: Optional[int]  # 90100
    cudnn_compile_version: Optional[str]  # "9.1.0"
    nccl_version: Optional[str]  # "2.21.5"; older snapshots hold NCCL_VERSION_CODE as text


class Distributed(TypedDict, total=False):
    available: bool
    nccl_available: Optional[bool]
    gloo_available: Optional[bool]


class CudaDevice(TypedDict, total=False):
    index: int
    name: Optional[str]
    capability: Optional[str]  # "8.6"
    total_memory: Optional[int]
    multi_processor_count: int
    uuid: Optional[str]
    pci_bus_id: Optional[int]  # the bus number alone, as torch reports it


class GpuTest(TypedDict, total=False):
    index: int
    ok: bool
    timed_out: bool
    error: Optional[str]
    duration_s: float


class PeerAccess(TypedDict, total=False):
    matrix: list[list[Optional[bool]]]  # [i][j]: can cuda:i access cuda:j
    error: Optional[str]
    timed_out: bool


class GpuUnderLoad(TypedDict, total=False):
    """NVML read by the interpreter probe while its own work kept the GPU busy."""

    index: int  # the CUDA index
    uuid: Optional[str]
    pcie: Optional[PcieLink]
    clock_event_reasons: Optional[int]
    temperature: Optional[int]
    error: Optional[str]  # why nothing was read (pynvml missing, the GPU not found)


class P2pCopyPair(TypedDict, total=False):
    """One directed copy GPU ``src`` -> GPU ``dst`` (CUDA indices) of the P2P data test."""

    src: int
    dst: int
    peer_access: Optional[bool]  # can_device_access_peer(src, dst)
    ok: bool
    timed_out: bool
    corrupt: bool
    error: Optional[str]
    seconds: Optional[float]  # the timed copies together
    gbps: Optional[float]  # GB/s (10^9 bytes per second)


class P2pCopy(TypedDict, total=False):
    bytes: int  # per copy
    repeats: int  # timed copies per pair
    pairs: list[P2pCopyPair]
    not_run: list[list[int]]  # [src, dst] pairs skipped after a hang or past the budget
    stopped: Optional[str]  # why the test stopped early


class TorchCuda(TypedDict, total=False):
    available: bool
    device_count: Optional[int]
    init_error: Optional[str]
    devices: list[CudaDevice]
    functional: list[GpuTest]
    cudnn_test: list[GpuTest]
    p2p: Optional[PeerAccess]
    under_load: list[GpuUnderLoad]
    p2p_copy: Optional[P2pCopy]


class NumpyBridge(TypedDict, total=False):
    version: Optional[str]
    import_error: Optional[str]
    bridge_error: Optional[str]
    warnings: list[str]


class Torchvision(TypedDict, total=False):
    version: Optional[str]
    cuda: Optional[str]
    import_error: Optional[str]
    ops_error: Optional[str]


class ProbeException(TypedDict, total=False):
    stage: str
    type: str
    message: str
    traceback: str


class TorchFact(TypedDict, total=False):
    probe: TorchProbe
    import_error: Optional[TorchImportError]
    importable: bool
    build: Optional[TorchBuild]
    libraries: Optional[TorchLibraries]
    distributed: Optional[Distributed]
    cuda: Optional[TorchCuda]
    numpy: Optional[NumpyBridge]
    torchvision: Optional[Torchvision]  # None: not installed; absent: not tried
    exceptions: list[ProbeException]


# --------------------------------------------------------------------------- host


class DiskUsage(TypedDict, total=False):
    """A filesystem's size (psutil.disk_usage); /dev/shm not mounted: path and missing."""

    path: str
    total: int
    free: int
    used: int
    missing: bool


class NofileLimit(TypedDict, total=False):
    soft: Optional[int]
    hard: Optional[int]


class RendezvousPort(TypedDict, total=False):
    port: int
    source: str  # "MASTER_PORT" | "torchrun default"
    in_use: Optional[bool]
    pid: Optional[int]
    process: Optional[str]
    method: Optional[str]
    error: Optional[str]


class HostFact(TypedDict, total=False):
    cpu_logical: Optional[int]
    cpu_physical: Optional[int]
    cpu_affinity: Optional[int]
    memory_total: int
    memory_available: int
    swap_total: int
    cgroup_memory_limit: Optional[int]
    shm: Optional[DiskUsage]  # None: mounted but unreadable
    disk: Optional[DiskUsage]
    nofile_limit: Optional[NofileLimit]
    rendezvous_port: RendezvousPort


# --------------------------------------------------------------------------- os


class Distro(TypedDict, total=False):
    id: Optional[str]
    name: Optional[str]
    version: Optional[str]
    pretty: Optional[str]
    error: str


class OsWsl(TypedDict, total=False):
    is_wsl: bool
    version: Optional[int]
    evidence: Optional[str]
    lib_dir: str
    lib_dir_files: list[str]
    distro_name: Optional[str]


class Container(TypedDict, total=False):
    in_container: bool
    kind: Optional[str]
    evidence: list[str]


class Scheduler(TypedDict, total=False):
    slurm: bool
    slurm_job_id: str
    slurm_job_num_nodes: str
    slurm_ntasks: str
    slurm_gpus_on_node: str
    slurm_cpus_on_node: str
    slurm_job_gpus: str
    slurm_step_gpus: str


class OsFact(TypedDict, total=False):
    system: Optional[str]
    kernel: Optional[str]
    machine: Optional[str]
    hostname: Optional[str]
    distro: Distro
    proc_version: Optional[str]
    wsl: OsWsl
    container: Container
    scheduler: Scheduler


# --------------------------------------------------------------------------- wsl


class Ldconfig(TypedDict, total=False):
    ok: bool
    error: Optional[str]
    libcuda: list[str]
    libnvidia_ml: list[str]


class LibcudaResolved(TypedDict, total=False):
    path: Optional[str]
    via: Optional[str]  # "LD_LIBRARY_PATH" | "ldconfig cache"


class LinuxDriver(TypedDict, total=False):
    files: list[str]
    kernel_module: bool
    proc_driver_nvidia: bool
    checked: bool
    packages: list[str]
    error: Optional[str]


class WslConfig(TypedDict, total=False):
    path: str
    memory: Optional[str]
    memory_bytes: Optional[int]
    processors: Optional[int]
    swap: Optional[str]
    swap_bytes: Optional[int]
    error: Optional[str]


class WslFact(TypedDict, total=False):
    is_wsl: bool
    version: Optional[int]
    evidence: Optional[str]
    distro_name: Optional[str]
    lib_dir: str
    lib_dir_files: list[str]
    libcuda_in_lib_dir: bool
    nvml_in_lib_dir: bool
    nvidia_smi_in_lib_dir: bool
    ld_library_path: list[str]
    ldconfig: Ldconfig
    libcuda_resolved: LibcudaResolved
    linux_driver: LinuxDriver
    wslconfig: list[WslConfig]


# --------------------------------------------------------------------------- interconnect


class Iommu(TypedDict, total=False):
    cmdline_flags: list[str]
    groups: int
    enabled: bool
    passthrough: bool
    cmdline_read: bool


class InfinibandPort(TypedDict, total=False):
    device: str
    port: Union[int, str]
    state: Optional[str]  # "4: ACTIVE"
    active: bool
    rate: Optional[str]
    link_layer: Optional[str]


class IpAddress(TypedDict, total=False):
    family: str  # "ipv4" | "ipv6"
    address: str


class NetInterface(TypedDict, total=False):
    name: str
    up: Optional[bool]
    speed_mbps: Optional[int]
    mtu: Optional[int]
    addresses: list[IpAddress]


class InterconnectFact(TypedDict, total=False):
    errors: dict[str, str]  # part -> why it could not be read (that part is then None)
    iommu: Optional[Iommu]
    infiniband: Optional[list[InfinibandPort]]
    interfaces: Optional[list[NetInterface]]


# --------------------------------------------------------------------------- plan, smi text


class PlanFact(TypedDict, total=False):
    gpus: Optional[int]
    batch: Optional[int]
    workers: Optional[int]
    script: str


class NvidiaSmiTextErrors(TypedDict, total=False):
    q: Optional[str]
    topo: Optional[str]


class NvidiaSmiTextFact(TypedDict, total=False):
    command: str
    q: Optional[str]
    topo: Optional[str]
    errors: NvidiaSmiTextErrors


# --------------------------------------------------------------------------- kernel_log


class XidEvent(TypedDict, total=False):
    kind: str  # "Xid" (a GPU) or "SXid" (an NVSwitch)
    xid: int
    pci_bus_id: str  # as the log prints it, lowercased: "0000:3b:00" ("...:00.0" for SXid)
    time: Optional[str]  # as printed: ISO (journalctl), a date (dmesg -T), seconds since boot
    pid: Optional[int]
    message: str  # the text after the number
    log_code: Optional[str]  # what diagnose's rules make of the line (LOG017, ...)
    caused_by: Optional[int]  # "caused by previous Xid 145": the driver names the cause
    fatal: Optional[bool]  # the line's own "Fatal"/"Nonfatal" (NVLink5 Xids 144-150)


class KernelLogFact(TypedDict, total=False):
    readable: bool
    source: Optional[str]  # the command that read it
    attempts: list[str]  # each command that could not, and why
    dmesg_restrict: Optional[bool]  # /proc/sys/kernel/dmesg_restrict
    events: list[XidEvent]
    events_dropped: int  # events beyond those kept (the first and the latest)


# Relevant variable name -> value (secret values already replaced by a marker).
EnvVars = dict[str, str]

# --------------------------------------------------------------------------- the file


class FactRecordData(TypedDict):
    """One fact in the snapshot file: its value, or why the probe could not gather it."""

    ok: bool
    value: Any
    error: Optional[str]
    duration_s: float


class FactsFile(TypedDict):
    format: str
    schema_version: int
    meta: dict[str, Any]
    facts: dict[str, FactRecordData]


# Fact name -> the shape of its value, for the facts the probes and the CLI record.
FACT_SHAPES: dict[str, Any] = {
    "nvml": NvmlFact,
    "driver": DriverFact,
    "python": PythonFact,
    "torch": TorchFact,
    "host": HostFact,
    "os": OsFact,
    "wsl": WslFact,
    "interconnect": InterconnectFact,
    "env_vars": EnvVars,
    "plan": PlanFact,
    "nvidia_smi_text": NvidiaSmiTextFact,
    "kernel_log": KernelLogFact,
}
