"""WSL checks: WSL1 versus WSL2, where libcuda comes from, the VM's memory, multi-GPU.

Inside WSL2 the Windows driver provides CUDA: its libraries are mounted at
/usr/lib/wsl/lib and a Linux NVIDIA driver must never be installed in the distro. WSL1
has no GPU access at all.

Sources:
- https://docs.nvidia.com/cuda/wsl-user-guide/index.html (WSL2 only; the driver comes
  from Windows via /usr/lib/wsl/lib; do not install a Linux display driver or the
  cuda / cuda-drivers meta-packages, install cuda-toolkit-X-Y from the WSL-Ubuntu repo;
  pinned memory and NVML are limited)
- https://learn.microsoft.com/en-us/windows/wsl/wsl-config (.wslconfig [wsl2] memory,
  default 50 % of Windows RAM, and processors, default all of Windows' logical
  processors; both apply after `wsl --shutdown`)
- https://learn.microsoft.com/en-us/windows/wsl/basic-commands (`wsl --set-version`,
  `wsl --update`, `wsl --shutdown`)
- microsoft/WSL#8587 ("libcuda.so: cannot open shared object file", fixed with
  LD_LIBRARY_PATH=/usr/lib/wsl/lib), #5548 / #5663 / #11229 (ldconfig "is not a symbolic
  link" warning, harmless)
- NVIDIA/nccl-tests#69 (2021: NCCL not supported on WSL2), NVIDIA/nccl#511 (try NCCL 2.10
  or newer on WSL2), microsoft/WSL#12467 (multi-GPU NCCL on WSL2: "Error while creating
  shared memory segment"); NCCL reports "Legacy IPC not supported" and runs without P2P.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.facts.shapes import LibcudaResolved, LinuxDriver, WslConfig, WslFact
from ddp_doctor.facts.sizing import RamNeed
from ddp_doctor.facts.view import FactsView
from ddp_doctor.model import Evidence, Finding, Severity, Step
from ddp_doctor.registry import Summary, check

from ._util import GIB, human_bytes, install_steps, workers_phrase

WSL_GUIDE = "https://docs.nvidia.com/cuda/wsl-user-guide/index.html"
WSL_CONFIG_DOCS = "https://learn.microsoft.com/en-us/windows/wsl/wsl-config"
WSL_TOOLKIT_REPO = ("https://developer.nvidia.com/cuda-downloads?target_os=Linux&"
                    "target_arch=x86_64&Distribution=WSL-Ubuntu")
WINDOWS_DRIVER = "https://www.nvidia.com/Download/index.aspx"
WSL_LIB = "/usr/lib/wsl/lib"
NCCL_MIN_FOR_WSL = (2, 10)

# CUDA toolkit meta-packages in NVIDIA's WSL-Ubuntu repository (cuda-toolkit-X-Y); there
# was no 12.7 release. Source: https://developer.download.nvidia.com/compute/cuda/repos/wsl-ubuntu/x86_64/
TOOLKITS = ((11, 8), (12, 0), (12, 1), (12, 2), (12, 3), (12, 4), (12, 5), (12, 6), (12, 8),
            (12, 9), (13, 0))

WSL1 = declare(
    id="WSL001",
    category=Category.WSL_SETUP,
    summary="The distro runs under WSL1, which has no GPU access",
    what="This Linux runs under WSL 1, a system-call translation layer without a GPU path.",
    why="CUDA in WSL needs the WSL 2 virtual machine; under WSL 1 no CUDA device exists.",
    fix="Convert the distro with `wsl --set-version <distro> 2` in Windows PowerShell.",
    docs_url=WSL_GUIDE,
)
LIBCUDA_MISSING = declare(
    id="WSL002",
    category=Category.WSL_SETUP,
    summary="libcuda.so is missing from /usr/lib/wsl/lib",
    what="The Windows driver's CUDA library is not mounted into WSL at /usr/lib/wsl/lib.",
    why="Without it no program in WSL can reach the GPU.",
    fix="Install a current NVIDIA driver on Windows, run `wsl --update`, then `wsl --shutdown`.",
    docs_url=WSL_GUIDE,
)
LOADER_MISSES_LIBCUDA = declare(
    id="WSL003",
    category=Category.WSL_SETUP,
    summary="The dynamic loader does not find libcuda.so.1 in /usr/lib/wsl/lib",
    what="libcuda is in /usr/lib/wsl/lib but neither LD_LIBRARY_PATH nor the ldconfig cache "
         "points the loader there.",
    why="torch then reports no CUDA, and cuDNN fails with 'libcuda.so: cannot open shared "
        "object file'.",
    fix="Add /usr/lib/wsl/lib to LD_LIBRARY_PATH, or list it in /etc/ld.so.conf.d and run "
        "`sudo ldconfig`.",
    docs_url=WSL_GUIDE,
)
LINUX_DRIVER_IN_WSL = declare(
    id="WSL004",
    category=Category.WSL_SETUP,
    summary="A Linux NVIDIA driver is installed inside WSL",
    what="NVIDIA driver packages or libcuda/libnvidia-ml files of a Linux driver are "
         "installed in the distro.",
    why="They shadow the Windows driver's libraries in /usr/lib/wsl/lib: CUDA fails to "
        "initialise, NVML fails, and nvidia-smi reports a version that is not the driver's.",
    fix="Purge the driver packages (nvidia-driver-*, libnvidia-compute-*, cuda-drivers), "
        "install only cuda-toolkit-X-Y from the WSL-Ubuntu repository, then `wsl --shutdown`.",
    docs_url=WSL_GUIDE,
)
VM_MEMORY_SMALL = declare(
    id="WSL005",
    category=Category.WSL_SETUP,
    summary="The WSL VM has too little memory for the planned job",
    what="The WSL 2 VM's memory (50 % of Windows RAM unless .wslconfig sets memory=) is "
         "below the estimate for the GPU processes and DataLoader workers.",
    why="The Linux OOM killer inside the VM ends ranks with SIGKILL (exit code -9).",
    fix="Set [wsl2] memory= in %UserProfile%\\.wslconfig on Windows and run `wsl --shutdown`.",
    severity=Severity.WARNING,
    docs_url=WSL_CONFIG_DOCS,
)
VM_PROCESSORS_FEW = declare(
    id="WSL007",
    category=Category.WSL_SETUP,
    summary="The WSL VM is limited to too few processors for the planned job",
    what="[wsl2] processors= in .wslconfig caps the WSL 2 VM below what the GPU processes "
         "and their DataLoader workers need (2 per GPU process, or one per process and "
         "worker).",
    why="Starved of CPUs, the GPUs wait on input and the DataLoader workers compete for "
        "the few processors; without the line the VM would get all of Windows' processors.",
    fix="Raise or remove [wsl2] processors= in %UserProfile%\\.wslconfig and run "
        "`wsl --shutdown`, or use fewer DataLoader workers.",
    severity=Severity.WARNING,
    docs_url=WSL_CONFIG_DOCS,
)
MULTI_GPU_ON_WSL = declare(
    id="WSL006",
    category=Category.WSL_SETUP,
    summary="Multi-GPU DDP under WSL2 runs without GPU peer-to-peer and is best-effort",
    what="The plan uses several GPUs from WSL2, where NCCL cannot use CUDA IPC / P2P.",
    why="NCCL falls back to shared memory through the host (slower), older NCCL versions "
        "do not work on WSL2 at all, and failures show as 'unhandled system error' or "
        "shared-memory segment errors.",
    fix="Use torch's bundled NCCL 2.10 or newer, keep /dev/shm large, set "
        "NCCL_P2P_DISABLE=1 if NCCL hangs, and prefer native Linux for multi-GPU training.",
    severity=Severity.WARNING,
    docs_url=WSL_GUIDE,
)


def _distro(wsl: WslFact) -> str:
    return wsl.get("distro_name") or "Ubuntu"


def _toolkit_for(driver_cuda: str | None) -> str:
    try:
        major, minor = (int(x) for x in (driver_cuda or "").split(".")[:2])
    except ValueError:
        major, minor = TOOLKITS[-1]
    fitting = [t for t in TOOLKITS if t <= (major, minor)] or [TOOLKITS[0]]
    return "cuda-toolkit-{}-{}".format(*fitting[-1])


def _wsl1(wsl: WslFact) -> Finding:
    distro = _distro(wsl)
    return Finding(
        code=WSL1,
        title=f"The distro {distro} runs under WSL 1, which cannot use the GPU",
        evidence=(Evidence("kernel", str(wsl.get("evidence")), "uname -r, /proc/version"),),
        remediation=(
            Step("In Windows PowerShell, convert the distro to WSL 2 (takes minutes).",
                 command=f"wsl --set-version {distro} 2"),
            Step("Make WSL 2 the default for new distros.", command="wsl --set-default-version 2"),
            Step("Reopen the distro and check the kernel name ends in -WSL2 / "
                 "-microsoft-standard.", command="uname -r"),
        ),
    )


@check(id="wsl.setup", title="WSL setup", area="wsl", requires=("wsl",),
       codes=(WSL1, LIBCUDA_MISSING, LOADER_MISSES_LIBCUDA, LINUX_DRIVER_IN_WSL))
def wsl_setup(facts: FactsView) -> Iterator[Finding | Summary]:
    """WSL 2, the Windows driver's libcuda in /usr/lib/wsl/lib, found by the loader, alone."""
    wsl = facts.wsl()
    if not wsl.get("is_wsl"):
        yield Summary("not running under WSL")
        return
    if wsl.get("version") != 2:
        yield _wsl1(wsl)
        return
    files = wsl.get("lib_dir_files") or []
    lib_evidence = Evidence(f"{WSL_LIB}", ", ".join(files) or "empty or missing",
                            f"ls {WSL_LIB}")
    found = False
    if not wsl.get("libcuda_in_lib_dir"):
        found = True
        yield Finding(
            code=LIBCUDA_MISSING,
            title=f"libcuda.so is missing from {WSL_LIB}: the Windows driver does not reach WSL",
            evidence=(lib_evidence,),
            remediation=(
                Step("Install the current NVIDIA driver for your GPU on Windows (not inside "
                     "WSL).", url=WINDOWS_DRIVER),
                Step("In Windows PowerShell, update WSL and restart its VM.",
                     command="wsl --update; wsl --shutdown"),
                Step("Reopen the distro and check the library is there.",
                     command=f"ls -la {WSL_LIB}/libcuda.so*"),
            ),
        )
    linux = wsl.get("linux_driver") or {}
    resolved = wsl.get("libcuda_resolved") or {}
    resolved_path = resolved.get("path")
    foreign = bool(resolved_path) and not str(resolved_path).startswith(WSL_LIB)
    if linux.get("files") or linux.get("packages") or linux.get("kernel_module") \
            or linux.get("proc_driver_nvidia") or foreign:
        found = True
        yield _linux_driver_finding(facts, wsl, linux, resolved)
    elif wsl.get("libcuda_in_lib_dir") and not resolved_path:
        ld_path = ":".join(wsl.get("ld_library_path") or []) or "unset"
        ldconfig = wsl.get("ldconfig") or {}
        found = True
        yield Finding(
            code=LOADER_MISSES_LIBCUDA,
            title=f"libcuda.so.1 is in {WSL_LIB} but the dynamic loader does not find it",
            evidence=(
                lib_evidence,
                Evidence("LD_LIBRARY_PATH", ld_path, "environment"),
                Evidence("ldconfig cache for libcuda",
                         "no entry" if ldconfig.get("ok") else str(ldconfig.get("error")),
                         "ldconfig -p"),
            ),
            remediation=(
                Step("Register the WSL library directory with the loader (the 'is not a "
                     "symbolic link' warnings ldconfig prints for it are harmless).",
                     command=f"echo {WSL_LIB} | sudo tee /etc/ld.so.conf.d/ld.wsl.conf "
                             f"&& sudo ldconfig"),
                Step("Or, for your shell only, put it on LD_LIBRARY_PATH.",
                     command=f"echo 'export LD_LIBRARY_PATH={WSL_LIB}:$LD_LIBRARY_PATH' "
                             f">> ~/.bashrc && source ~/.bashrc"),
                Step("Check torch sees the GPU.",
                     command=f"{facts.target_python()} -c \"import torch; "
                             f"print(torch.cuda.is_available())\""),
            ),
        )
    if not found:
        yield Summary(f"WSL 2, libcuda from {resolved_path} ({resolved.get('via')})")


def _linux_driver_finding(facts: FactsView, wsl: WslFact, linux: LinuxDriver,
                          resolved: LibcudaResolved) -> Finding:
    evidence = []
    if linux.get("packages"):
        evidence.append(Evidence("driver packages", ", ".join(linux["packages"]),
                                 "dpkg-query -W"))
    if linux.get("files"):
        evidence.append(Evidence("Linux driver libraries", ", ".join(linux["files"]),
                                 "/usr/lib/x86_64-linux-gnu (not links into /usr/lib/wsl/lib)"))
    if linux.get("kernel_module"):
        evidence.append(Evidence("kernel module", "nvidia", "/proc/modules"))
    if linux.get("proc_driver_nvidia"):
        evidence.append(Evidence("/proc/driver/nvidia", "exists", "filesystem"))
    if resolved.get("path"):
        evidence.append(Evidence("libcuda.so.1 loads from", str(resolved["path"]),
                                 str(resolved.get("via"))))
    steps = []
    if linux.get("packages"):
        steps.append(Step(
            "Purge the Linux driver packages (the Windows driver provides CUDA to WSL).",
            command="sudo apt-get remove --purge -y 'nvidia-driver-*' 'nvidia-dkms-*' "
                    "'nvidia-utils-*' 'libnvidia-compute-*' 'cuda-drivers*' "
                    "&& sudo apt-get autoremove -y"))
    loose = [f.split(" -> ")[0] for f in linux.get("files") or []]
    if loose:
        steps.append(Step("Remove the Linux driver's libraries left in the system lib "
                          "directory, then refresh the loader cache.",
                          command=f"sudo rm -f {' '.join(loose)} && sudo ldconfig"))
    toolkit = _toolkit_for(facts.nvml().get("cuda_driver_version"))
    steps += [
        Step("If you need the CUDA toolkit (nvcc) at all, install only the toolkit from "
             "NVIDIA's WSL-Ubuntu repository (never `cuda`, `cuda-12-x` or `cuda-drivers`); "
             "pip's torch wheels bring their own CUDA runtime.",
             command=f"sudo apt-get install -y {toolkit}", url=WSL_TOOLKIT_REPO),
        Step("In Windows PowerShell, restart the WSL VM.", command="wsl --shutdown"),
        Step("Reopen the distro: nvidia-smi must be the one in /usr/lib/wsl/lib and report the "
             "Windows driver's version.", command="which nvidia-smi; nvidia-smi"),
    ]
    return Finding(
        code=LINUX_DRIVER_IN_WSL,
        title=f"A Linux NVIDIA driver is installed inside WSL ({_distro(wsl)}); it shadows "
              f"the Windows driver",
        evidence=tuple(evidence),
        remediation=tuple(steps),
    )


def _gib_up(n: int) -> int:
    return -(-n // GIB)


@check(id="wsl.limits", title="WSL limits", area="wsl",
       requires=("wsl", "host"), codes=(VM_MEMORY_SMALL, VM_PROCESSORS_FEW, MULTI_GPU_ON_WSL),
       blocked_by=("wsl.setup",))
def wsl_limits(facts: FactsView) -> Iterator[Finding | Summary]:
    """What WSL 2 caps: the VM's memory and processors (.wslconfig) and NCCL between GPUs."""
    wsl = facts.wsl()
    if not wsl.get("is_wsl"):
        yield Summary("not running under WSL")
        return
    vm = int(facts.host().get("memory_total") or 0)
    need = facts.ram_needed()
    found = [f for f in (_memory_finding(wsl, vm, need), _processors_finding(facts, wsl),
                         _multi_gpu_finding(facts, wsl)) if f is not None]
    yield from found
    if not found:
        yield Summary(f"{human_bytes(vm)} in the VM (about {human_bytes(need.total)} "
                      f"needed), {need.ranks} GPU")



def _wslconfig_line(configs: list[WslConfig], key: str, value: str) -> str:
    """A command that sets [wsl2] KEY=VALUE in the .wslconfig found (or appends a section)."""
    holder = next((c for c in configs if c.get(key) is not None), None)
    if holder:  # the key is there: change that line in place, keep the rest of the file
        return (f"sed -i 's/^[[:space:]]*{key}[[:space:]]*=.*/{key}={value}/' "
                f"{holder['path']}")
    path = configs[0]["path"] if configs else "/mnt/c/Users/<you>/.wslconfig"
    return f"printf '[wsl2]\\n{key}={value}\\n' >> {path}"


def _memory_finding(wsl: WslFact, vm: int, need: RamNeed) -> Finding | None:
    if need.ranks == 0 or vm >= need.total:
        return None
    configs = wsl.get("wslconfig") or []
    set_to = next((c.get("memory") for c in configs if c.get("memory")), None)
    path = configs[0]["path"] if configs else "/mnt/c/Users/<you>/.wslconfig"
    want = _gib_up(need.total) + 2
    how = ("changing the memory= line" if set_to else "with no [wsl2] section yet")
    return Finding(
        code=VM_MEMORY_SMALL,
        title=f"The WSL VM has {human_bytes(vm)} of memory; {need.ranks} GPU process(es) "
              f"with {workers_phrase(need.workers, need.workers_planned)} need about "
              f"{human_bytes(need.total)}",
        evidence=(
            Evidence("VM memory", human_bytes(vm), "/proc/meminfo inside WSL"),
            Evidence(".wslconfig memory=", set_to or "not set (default: 50% of Windows RAM)",
                     path if configs else "/mnt/c/Users/*/.wslconfig"),
            Evidence("estimated need", human_bytes(need.total),
                     "2 GiB + GPU memory/4 + 0.5 GiB per worker, per process"),
        ),
        remediation=(
            Step(f"On Windows, give the VM more memory in %UserProfile%\\.wslconfig "
                 f"([wsl2] section, memory={want}GB; keep some RAM for Windows). From WSL, "
                 f"{how}:",
                 command=_wslconfig_line(configs, "memory", f"{want}GB"),
                 url=WSL_CONFIG_DOCS),
            Step("Restart the VM so it applies (wait until `wsl --list --running` is empty).",
                 command="wsl.exe --shutdown"),
            Step("Or use fewer DataLoader workers (--workers).")
        ),
    )


def _processors_finding(facts: FactsView, wsl: WslFact) -> Finding | None:
    """[wsl2] processors= below 2 per GPU process, or below the planned workers + ranks.

    The same rule as host.cpu (HST003), which leaves a VM capped by .wslconfig to this check.
    """
    configs = wsl.get("wslconfig") or []
    set_to = next((c["processors"] for c in configs if c.get("processors")), None)
    ranks = facts.planned_ranks()
    if set_to is None or ranks == 0:
        return None
    workers, planned = facts.workers_per_rank(ranks)
    need = ranks * (workers + 1) if planned else 2 * ranks
    if set_to >= need:
        return None
    cores = facts.cpu_cores()
    fewer = max(0, set_to // ranks - 1)
    what = (f"{ranks} GPU process(es) with {workers} DataLoader workers each need {need}"
            if planned else f"{ranks} GPU process(es) need at least {need} (2 each)")
    return Finding(
        code=VM_PROCESSORS_FEW,
        title=f".wslconfig limits the WSL VM to {set_to} processor"
              f"{'s' if set_to != 1 else ''}; {what}",
        evidence=(
            Evidence(".wslconfig processors=", str(set_to),
                     next(c["path"] for c in configs if c.get("processors"))),
            Evidence("CPU cores in the VM", str(cores), "sched_getaffinity inside WSL"),
            Evidence("GPU processes", str(ranks), "--gpus, else the usable GPUs"),
            Evidence("DataLoader workers per process", str(workers),
                     "--workers" if planned else "default min(cores per GPU, 8)"),
        ),
        remediation=(
            Step(f"Give the VM at least {need} processors (no more than Windows has; deleting "
                 f"the line gives it all of them). From WSL:",
                 command=_wslconfig_line(configs, "processors", str(need)),
                 url=WSL_CONFIG_DOCS),
            Step("Restart the VM so it applies (wait until `wsl --list --running` is empty).",
                 command="wsl.exe --shutdown"),
            Step(f"Or keep the limit and use at most {fewer} DataLoader workers per GPU process "
                 f"(--workers {fewer})."),
        ),
    )


def _nccl_tuple(text: str | None) -> tuple[int, ...] | None:
    try:
        return tuple(int(x) for x in str(text).split(".")[:2])
    except ValueError:
        return None


def _multi_gpu_finding(facts: FactsView, wsl: WslFact) -> Finding | None:
    ranks = facts.planned_ranks()
    if ranks < 2:
        return None
    nccl = facts.nccl_version()
    version = _nccl_tuple(nccl)
    too_old = version is not None and version < NCCL_MIN_FOR_WSL
    steps = []
    if too_old:
        # torch, torchvision and torchaudio are built in pairs: upgrade them together to a
        # build this driver runs (its bundled NCCL is then >= 2.10).
        first, *rest = install_steps(facts, "torch torchvision torchaudio")
        why = "Upgrade torch, whose bundled NCCL is older than 2.10 and does not work on WSL2. "
        steps += [replace(first, text=why + first.text), *rest]
    steps += [
        Step("Expect NCCL to run without GPU peer-to-peer ('Legacy IPC not supported' / "
             "'Could not enable P2P' in NCCL_DEBUG=INFO output); if it hangs or fails at "
             "init, turn P2P off explicitly.", command="export NCCL_P2P_DISABLE=1"),
        Step("Run a short 2-GPU job with NCCL logging first.",
             command=f"NCCL_DEBUG=INFO {facts.target_python()} -m torch.distributed.run "
                     f"--nproc_per_node {ranks} train.py"),
        Step("If NCCL cannot work here, the gloo backend still runs DDP (slower): "
             "init_process_group(backend='gloo'); for real multi-GPU throughput use native "
             "Linux.", url=WSL_GUIDE),
    ]
    return Finding(
        code=MULTI_GPU_ON_WSL,
        title=f"{ranks} GPUs under WSL2: NCCL runs without peer-to-peer"
              + (f" and NCCL {nccl} is too old for WSL2" if too_old else ", best-effort"),
        severity=Severity.ERROR if too_old else None,
        evidence=(
            Evidence("GPU processes", str(ranks), "--gpus, else the usable GPUs"),
            Evidence("NCCL in torch", str(nccl or "unknown"), "torch.cuda.nccl.version()"),
            Evidence("WSL", f"WSL 2 ({wsl.get('evidence')})", "uname -r"),
        ),
        remediation=tuple(steps),
    )
