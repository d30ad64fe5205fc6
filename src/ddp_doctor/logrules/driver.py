"""What a missing, old, mismatched or failing NVIDIA driver (and WSL's copy of it) prints.

Sources: torch's CUDA initialisation warnings (pytorch/pytorch torch/cuda/__init__.py and
c10/cuda), the CUDA runtime error enum and strings
(https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html), CUDA
compatibility (https://docs.nvidia.com/deploy/cuda-compatibility/), the Xid catalog
(https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), Fabric Manager and
error 802 (pytorch/pytorch#35710, NVIDIA/nccl#1488), the driver/library mismatch threads
(NVIDIA/ubuntu-packaging-nvidia-driver#3), WSL's CUDA guide
(https://docs.nvidia.com/cuda/wsl-user-guide/index.html) and microsoft/WSL#5548, #8587,
#9938, #10289 (``GPU access blocked by the operating system``), the NGC containers' driver
check (https://docs.nvidia.com/deeplearning/frameworks/support-matrix/index.html,
ultralytics/yolov5#1232), the kernel's PCIe AER messages (drivers/pci/pcie/aer.c,
rwth-i6/returnn#1500), moby's GPU device request and libnvidia-container's cgroup setup
(NVIDIA/nvidia-docker#1447, #1486).
"""

from __future__ import annotations

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.logrules.rule import ReadAs, Rule, rx
from ddp_doctor.model import Severity, Step

CUDA_COMPAT = "https://docs.nvidia.com/deploy/cuda-compatibility/"
WSL_GUIDE = "https://docs.nvidia.com/cuda/wsl-user-guide/index.html"
SMI = Step("See whether the driver answers and which CUDA version it supports.",
           command="nvidia-smi")
TORCH_CUDA = Step("See which CUDA your torch was built for and whether it can use it.",
                  command='python -c "import torch; print(torch.__version__, '
                          'torch.version.cuda, torch.cuda.is_available())"')

NO_DRIVER = declare(
    "LOG009", Category.DRIVER_MISSING, "No usable NVIDIA kernel driver",
    what="Nothing answered for the NVIDIA driver: the kernel module is not loaded (often a "
         "kernel update without a DKMS rebuild, nouveau holding the GPU, or Secure Boot "
         "refusing an unsigned module) or no driver is installed.",
    why="Without the kernel driver no process can see a GPU; everything falls back to the "
        "CPU or fails.",
    fix="Load or reinstall the driver for the running kernel (`dkms status`, `uname -r`), "
        "blacklist nouveau, then reboot and check `nvidia-smi`.",
    docs_url="https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/index.html")
TOOLKIT_GUIDE = ("https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/"
                 "install-guide.html")
NO_CONTAINER_GPU = declare(
    "LOG010", Category.DRIVER_MISSING, "The container runtime found no NVIDIA driver on the host",
    what="nvidia-container-cli could not load the driver's own library (libnvidia-ml) on the "
         "host: no NVIDIA driver is installed there, or its libraries are not where the "
         "runtime looks.",
    why="The runtime cannot hand the driver to the container: there is no driver and no "
        "/dev/nvidia* device inside it.",
    fix="Install the NVIDIA driver on the host and check `nvidia-smi` there before starting "
        "GPU containers.",
    docs_url=TOOLKIT_GUIDE)
# The container runtime's own messages (moby's "could not select device driver", and
# libnvidia-container's cgroup errors: NVIDIA/nvidia-docker#1447 and #1486, cgroup v2 before
# libnvidia-container 1.8): the host driver is fine, the container's GPU setup is not, which
# the category contract calls a misconfigured container setup (cuda_init_failure).
NO_GPU_RUNTIME = declare(
    "LOG071", Category.CUDA_INIT_FAILURE,
    "Docker has no NVIDIA runtime to give the container a GPU",
    what="Docker was asked for GPUs (`--gpus`, or `driver: nvidia` in a compose file) but no "
         "device driver for GPUs is registered with it: the NVIDIA Container Toolkit is not "
         "installed, or Docker was not configured to use it.",
    why="The container does not start, or starts without any GPU.",
    fix="Install the NVIDIA Container Toolkit, run `sudo nvidia-ctk runtime configure "
        "--runtime=docker`, restart Docker.",
    docs_url=TOOLKIT_GUIDE)
CONTAINER_CGROUP = declare(
    "LOG072", Category.CUDA_INIT_FAILURE,
    "The container runtime could not set up the GPU devices' cgroup",
    what="nvidia-container-cli failed while granting the container access to the GPU "
         "device nodes through the devices cgroup: typically a host on the unified cgroup v2 "
         "hierarchy with a libnvidia-container too old for it, or a runtime configured with "
         "no-cgroups that the host does not allow.",
    why="The GPU container cannot start, or starts without access to /dev/nvidia*.",
    fix="Upgrade the NVIDIA Container Toolkit (cgroup v2 support came in libnvidia-container "
        "1.8), or boot with systemd.unified_cgroup_hierarchy=false; check no-cgroups in "
        "/etc/nvidia-container-runtime/config.toml.",
    docs_url="https://github.com/NVIDIA/nvidia-docker/issues/1447")
# libnvidia-container checks the image's NVIDIA_REQUIRE_CUDA / NVIDIA_REQUIRE_DRIVER
# constraints (set by every nvidia/cuda image) against the host driver before the container
# starts (https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/
# docker-specialized.html#constraints; Xilinx/Vitis-AI#103).
CONTAINER_NEEDS_NEWER = declare(
    "LOG074", Category.DRIVER_TOO_OLD,
    "The container image needs a newer NVIDIA driver than the host has",
    what="The NVIDIA container runtime compared the image's requirement (NVIDIA_REQUIRE_CUDA, "
         "e.g. cuda>=12.4, or a driver>= constraint) with the host driver and refused to "
         "start the container: the host driver supports an older CUDA than the image was "
         "built for.",
    why="The container does not start.",
    fix="Update the host driver to one that supports the image's CUDA version, or use an "
        "image built for the CUDA version nvidia-smi shows on the host.",
    docs_url="https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/"
             "docker-specialized.html")
# libnvidia-container asks the host driver for its devices and libraries through a helper
# process (its "driver" RPC service); "driver error" is that query failing, before any
# container exists. Under WSL 2 it is what a Windows build or driver without GPU support in
# WSL gives (docker/for-win#10379); on a Linux host, a driver that does not answer.
CONTAINER_DRIVER_QUERY = declare(
    "LOG075", Category.CUDA_INIT_FAILURE,
    "The container runtime could not query the host's NVIDIA driver",
    what="nvidia-container-cli failed in its driver query ('initialization error: driver "
         "error'): the host driver is installed but does not answer the runtime - a kernel "
         "module that is not loaded or not usable, or, under WSL 2, a Windows build or "
         "Windows driver that does not offer the GPU to WSL.",
    why="No GPU container can start.",
    fix="Check `nvidia-smi` on the host (in WSL: inside the distribution, then update the "
        "Windows driver and Windows/WSL); fix the driver there before starting GPU "
        "containers.",
    docs_url=TOOLKIT_GUIDE)
# In WSL mode the runtime mounts the driver's libraries from /usr/lib/wsl/lib under their
# .so.1 names (libcuda.so.1, libnvidia-ml.so.1); on a Linux host it mounts the versioned
# files (libnvidia-ml.so.535.129.03). An image that already holds a file of that name - a
# driver package installed in it, or a `docker commit` of a running GPU container - makes
# the mount fail with "file exists" (NVIDIA/nvidia-container-toolkit#371).
WSL_IMAGE_DRIVER = declare(
    "LOG076", Category.WSL_SETUP,
    "The image holds its own copy of the driver libraries WSL mounts (file exists)",
    what="Starting a GPU container under WSL 2, the NVIDIA runtime could not mount the WSL "
         "driver's libraries (libnvidia-ml.so.1, libcuda.so.1) into the image because the "
         "image already has files by those names: a Linux NVIDIA driver package (libnvidia-"
         "compute, nvidia-utils, or one pulled in as a dependency) was installed in the "
         "image, or the image was committed from a running GPU container.",
    why="The container does not start.",
    fix="Build the image without NVIDIA driver packages (remove libnvidia-compute-*, "
        "nvidia-utils-*, and packages that depend on them), or rebuild it instead of "
        "committing a running GPU container.",
    docs_url=WSL_GUIDE)
DRIVER_OLD = declare(
    "LOG011", Category.DRIVER_TOO_OLD,
    "The NVIDIA driver is older than the CUDA torch was built for",
    what="The installed driver supports an older CUDA version than the CUDA runtime bundled "
         "with this PyTorch build (torch.version.cuda).",
    why="torch.cuda.is_available() turns False and every CUDA call fails.",
    fix="Update the driver (on WSL: the Windows driver, then `wsl --shutdown`), or install "
        "a torch wheel built for the CUDA version nvidia-smi shows.",
    docs_url=CUDA_COMPAT)
PTX_TOOLCHAIN = declare(
    "LOG012", Category.DRIVER_TOO_OLD, "PTX from a newer toolchain than the driver understands",
    what="A kernel shipped as PTX was compiled by a newer CUDA than the driver's JIT knows; "
         "minor-version compatibility does not cover PTX.",
    why="That kernel can never load on this driver.",
    fix="Update the driver, or use a build that ships native code (SASS) for this GPU.",
    docs_url="https://docs.nvidia.com/deploy/cuda-compatibility/"
             "minor-version-compatibility.html")
LIB_MISMATCH = declare(
    "LOG013", Category.DRIVER_LIBRARY_MISMATCH, "NVIDIA driver libraries and kernel module differ",
    what="The user-space driver libraries (libnvidia-ml, libcuda) are a different version "
         "from the loaded kernel module: usually a driver upgrade without a reboot, or a "
         "forward-compatibility libcuda that does not match the kernel driver.",
    why="NVML and CUDA refuse to start, so no GPU is usable until they agree.",
    fix="Reboot (or unload and reload the nvidia modules); remove a stale cuda-compat "
        "directory from LD_LIBRARY_PATH.",
    docs_url=CUDA_COMPAT)
CUDA_INIT = declare(
    "LOG014", Category.CUDA_INIT_FAILURE, "The driver is there but CUDA cannot initialise",
    what="CUDA reported an unknown error (999), an initialisation error or that all devices "
         "are busy or unavailable: a GPU in exclusive or prohibited compute mode held by "
         "another process, nvidia_uvm not loaded (often after suspend/resume), missing "
         "/dev/nvidia-uvm in a container, or a GPU in a bad state.",
    why="No CUDA context can be created, so torch sees no usable GPU.",
    fix="Check the compute mode and other GPU processes (`nvidia-smi`), reload nvidia_uvm "
        "(`sudo modprobe -r nvidia_uvm && sudo modprobe nvidia_uvm`) or reboot.",
    docs_url="https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html")
FABRIC = declare(
    "LOG015", Category.CUDA_INIT_FAILURE,
    "CUDA error 802: system not yet initialized (Fabric Manager)",
    what="On NVSwitch systems (HGX/DGX A100, H100, H200, B200) CUDA waits for the "
         "nvidia-fabricmanager service, which is missing, stopped or a different version "
         "from the driver.",
    why="torch.cuda.is_available() is False although nvidia-smi lists the GPUs.",
    fix="Install nvidia-fabricmanager for exactly the driver's version and "
        "`sudo systemctl enable --now nvidia-fabricmanager`.",
    docs_url="https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html")
COMPAT_HW = declare(
    "LOG016", Category.CUDA_INIT_FAILURE, "CUDA forward compatibility used on an unsupported GPU",
    what="A cuda-compat libcuda (error 804) is on the loader path, but forward compatibility "
         "only works on data-center GPUs.",
    why="CUDA cannot initialise on this GPU while that library is loaded.",
    fix="Remove the compat directory from LD_LIBRARY_PATH (or the image) and update the "
        "host driver instead.",
    docs_url="https://docs.nvidia.com/deploy/cuda-compatibility/forward-compatibility.html")
# The Xids the driver logs for a fault of the GPU, its memory, its links or its firmware
# (NVIDIA's Xid catalogue, knowledge/xid.py): 48 double-bit ECC, 61/62 internal
# micro-controller faults, 64/92/94/95 memory, 74 NVLink, 79 off the bus, 119/120 GSP,
# 122-158 the newer GPUs' link, memory and timeout events. An application's own faults
# (13, 31, 43) are not among them.
_HARDWARE_XIDS = (r"(?:48|61|62|64|74|79|92|94|95|119|120|122|123|136|140|143|144|145|146|147"
                  r"|148|149|150|154|155|156|158)")
HARDWARE = declare(
    "LOG017", Category.HARDWARE_FAULT, "GPU hardware or link fault (Xid, ECC, fallen off the bus)",
    what="The driver logged a hardware-class event: an Xid such as 48 (double-bit ECC), "
         "64/95 (memory), 74 (NVLink), 79 (fallen off the bus), 119/120 (GSP), an "
         "uncorrectable ECC error or a GPU that stopped answering.",
    why="Work on that GPU fails or corrupts results until it is reset; repeats mean RMA.",
    fix="Drain the node, read `sudo dmesg -T | grep -i xid` and `nvidia-smi -q -d "
        "ECC,ROW_REMAPPER,PAGE_RETIREMENT`; reset the GPU (`nvidia-smi -r -i N`) or "
        "reboot; replace it if it recurs.",
    docs_url="https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html")
WSL_LIBCUDA = declare(
    "LOG018", Category.WSL_SETUP, "libcuda.so not found (WSL's /usr/lib/wsl/lib not on the path)",
    what="A library asked the loader for the unversioned libcuda.so. On WSL2 it lives only "
         "in /usr/lib/wsl/lib, which the loader does not search by default.",
    why="cuDNN and other CUDA libraries fail to load, so convolutions fail.",
    fix="export LD_LIBRARY_PATH=/usr/lib/wsl/lib:$LD_LIBRARY_PATH (and `sudo ldconfig`).",
    docs_url="https://github.com/microsoft/WSL/issues/8587")
WSL_SYMLINK = declare(
    "LOG019", Category.WSL_SETUP, "ldconfig: WSL's libcuda.so.1 is not a symbolic link",
    what="WSL ships its driver libraries as copies, not symbolic links, and ldconfig says "
         "so on every run.",
    why="Mostly cosmetic; it tells that this is WSL, where the other WSL limits apply.",
    fix="Ignore it, or recreate the links in another directory as the WSL thread shows.",
    severity=Severity.WARNING,
    docs_url="https://github.com/microsoft/WSL/issues/5548")
WSL_BLOCKED = declare(
    "LOG020", Category.WSL_SETUP, "WSL: GPU access blocked by the operating system",
    what="WSL's GPU paravirtualisation gave NVML no GPU: a Linux NVIDIA driver or utils "
         "package installed inside WSL, Windows driver files missing from WSL, an "
         "unsupported GPU mode (TCC instead of WDDM) or an old WSL kernel.",
    why="No GPU is visible inside WSL.",
    fix="Remove Linux driver packages inside WSL (apt remove 'nvidia-*' except the "
        "toolkit), update the Windows driver and WSL (`wsl --update`), then `wsl --shutdown`.",
    docs_url=WSL_GUIDE)
WSL1 = declare(
    "LOG061", Category.WSL_SETUP, "WSL 1 has no GPU support",
    what="The kernel is WSL 1's (version ending in -Microsoft). Only WSL 2 passes the GPU "
         "through; installing a Linux NVIDIA driver or its DKMS module inside WSL never works.",
    why="No GPU can be used in this distribution.",
    fix="Convert the distribution to WSL 2 (`wsl --set-version <distro> 2`), remove Linux "
        "NVIDIA driver packages inside it, and use the Windows driver.",
    docs_url=WSL_GUIDE)
# cudaErrorNotSupported (801, CUDA_ERROR_NOT_SUPPORTED): "the attempted operation is not
# supported on the current system or device" (the CUDA runtime's error enum, above). On a
# native Linux driver every discrete GPU of the last decade has the operations libraries
# ask for (managed memory, pinned and registered host memory, memory pools, IPC); under
# WSL 2 the GPU is reached through the Windows driver, which lacks or limits several of
# them, and more on pre-Volta GPUs (the CUDA on WSL guide's known limitations; NVIDIA/
# cudf#11382: RMM's allocations on a Pascal GeForce under WSL 2).
WSL_UNSUPPORTED = declare(
    "LOG080", Category.WSL_SETUP,
    "CUDA: operation not supported on this platform (error 801, typical of WSL 2)",
    what="CUDA refused an operation as not supported on this system or device "
         "(cudaErrorNotSupported, 801). Native Linux drivers support what training and "
         "RAPIDS libraries ask for; WSL 2, which reaches the GPU through the Windows driver, "
         "does not fully support managed memory, concurrent CPU/GPU access or large pinned "
         "allocations, and supports less on GPUs older than Volta.",
    why="The library's allocation or call fails every time on this platform; retrying or "
        "reinstalling does not change it.",
    fix="Check whether the job runs under WSL 2 (`uname -r`); there, avoid the unsupported "
        "feature (managed memory, memory pools: see the library's WSL notes), use a "
        "Volta-or-newer GPU, or run on native Linux.",
    docs_url=WSL_GUIDE)
# A container started without asking for GPUs (plain `docker run` with no --gpus, no
# --runtime=nvidia, not nvidia-docker) gets neither the /dev/nvidia* device nodes nor the
# driver's libraries: inside it there is no driver at all, whatever the host has. NVIDIA's
# CUDA/NGC images say so when they start ("WARNING: The NVIDIA Driver was not detected.  GPU
# functionality will not be available." then "Use the NVIDIA Container Toolkit to start this
# container with GPU support", earlier "Use 'nvidia-docker run' to start this container");
# diagnose/context.py reads a `docker run` line without a GPU request beside a CUDA that
# finds no GPU the same way (floydhub/dockerfiles#3: fixed by nvidia-docker run).
CONTAINER_NO_GPU = declare(
    "LOG085", Category.DRIVER_MISSING, "The container was started without GPUs",
    what="The container was started without a GPU request (docker run without --gpus or "
         "--runtime=nvidia, not through nvidia-docker), so the NVIDIA container runtime did "
         "not mount the driver's libraries or the /dev/nvidia* devices into it: inside, no "
         "driver exists, even though the host has one.",
    why="torch.cuda.is_available() is False and every CUDA call fails in the container.",
    fix="Start the container with GPUs: docker run --gpus all ... (NVIDIA Container Toolkit "
        "installed on the host), or the GPU resource in Kubernetes; with a daemon whose "
        "default runtime is nvidia, check that default-runtime is set in daemon.json.",
    docs_url=TOOLKIT_GUIDE)

RULES: tuple[Rule, ...] = (
    # torch's "Found no NVIDIA driver on your system" (torch/cuda/__init__.py
    # _check_driver), also as issue titles put it: "No NVIDIA driver on your system"
    # (kubeflow/notebooks#68)
    Rule(NO_DRIVER, rx(r"\bno nvidia driver on your system",
                       r"nvidia-smi has failed because it couldn.t communicate with the nvidia "
                       r"driver",
                       r"modprobe: fatal: module nvidia\S* not found",
                       # Secure Boot refusing an unsigned module: the kernel's module
                       # signature check answers EKEYREJECTED or ENOKEY, which modprobe and
                       # insmod print as these strings (NVIDIA/gpu-driver-container#44)
                       r"could not insert (?:module )?'?nvidia\S*'?: (?:key was rejected by "
                       r"service|required key not available)",
                       # NVIDIA's .run installer when the module it built does not load
                       r"unable to load the kernel module '?nvidia\S*\.ko'?",
                       r"nvrm: the nvidia probe routine was not called",
                       r"error[_:\s]+driver ?not ?loaded",
                       # nvidia-settings (https://github.com/NVIDIA/nvidia-settings) when no
                       # NVIDIA kernel module answers it, as after a kernel update whose DKMS
                       # build failed (pop-os/pop#690)
                       r"\bnvidia driver is not loaded",
                       r"fail\w* to [\w ]{0,30}nvml: driver not loaded",
                       # NVML's return code alone: 9 is NVML_ERROR_DRIVER_NOT_LOADED (nvml.h),
                       # as ollama's GPU discovery prints it (ollama/ollama#1898)
                       r"nvml[^\n]*\binit\w*[^\n]*\bfail\w*:? ?9\b(?![.\d])",
                       r"error: libcuda\.so\.1: cannot open shared object file",
                       # the driver's own soname missing: no driver (cuda-python's loader)
                       r"fail\w* to dlopen libcuda\.so\.1\b"),
         ("nvidia", "nvrm", "error", "fail"),
         (Step("Is the kernel module loaded, and built for the running kernel?",
               command="lsmod | grep -E 'nvidia|nouveau'; dkms status; uname -r"),
          Step("Rebuild it for this kernel (DKMS needs the running kernel's headers; a "
               "driver installed from NVIDIA's .run file: run the installer again) and reboot.",
               command="sudo apt-get install -y dkms linux-headers-$(uname -r) && "
                       "sudo dkms autoinstall"),
          SMI),
         examples=(
             "AssertionError: Found no NVIDIA driver on your system. Please check that you have "
             "an NVIDIA GPU and installed a driver from http://www.nvidia.com/Download/index.aspx",
             "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
             "Make sure that the latest NVIDIA driver is installed and running.",
             "modprobe: FATAL: Module nvidia not found in directory /lib/modules/5.15.0-91-generic",
             "modprobe: ERROR: could not insert 'nvidia': Key was rejected by service",
             "ERROR: Unable to load the kernel module 'nvidia.ko'.  This happens most "
             "frequently when this kernel module was built against the wrong or improperly "
             "configured kernel sources",
             "pynvml.nvml.NVMLError_DriverNotLoaded: Driver Not Loaded",
             "Failed to properly shut down NVML: Driver Not Loaded",
             "Oct 14 07:35:56 pop-os nvidia-settings-autostart.desktop[2905]: ERROR: NVIDIA "
             "driver is not loaded",
             "Jan 08 19:28:33 XDFAF ollama[178990]: 2024/01/08 19:28:33 gpu.go:39: CUDA not "
             "detected: nvml vram init failure: 9",
             "RuntimeError: Failed to dlopen libcuda.so.1"),
         symptom_of=("LOG061", "LOG020"),
         alternatives=("wsl_setup: inside WSL2 this means the Linux driver was installed in WSL "
                       "or /usr/lib/wsl/lib is missing",),
         decide=(Step("Tell WSL from a native Linux host.", command="uname -r"),)),
    Rule(CONTAINER_NO_GPU, rx(r"warn\w*:? the nvidia driver was not detected",
                              r"use the nvidia container toolkit to start this container",
                              r"use .?nvidia-docker run.? to start this container"),
         ("warn", "nvidia"),
         (Step("Start the container with the GPUs (NVIDIA Container Toolkit on the host).",
               command="docker run --gpus all --rm IMAGE python -c \"import torch; "
                       "print(torch.cuda.is_available())\""),
          Step("On the host, check that the toolkit is installed and Docker knows the runtime.",
               command="nvidia-ctk --version; docker info | grep -i runtime")),
         examples=("WARNING: The NVIDIA Driver was not detected.  GPU functionality will not be "
                   "available.",
                   "   Use the NVIDIA Container Toolkit to start this container with GPU support; "
                   "see",
                   "   Use 'nvidia-docker run' to start this container; see"),
         alternatives=("driver_missing: a host without a working NVIDIA driver gives the "
                       "container none either, even with --gpus",),
         decide=(Step("On the host, outside the container: does the driver answer?",
                      command="nvidia-smi"),),
         relations=(ReadAs("container-without-gpus", code="LOG085",
                           categories=(Category.DRIVER_MISSING, Category.GPU_NOT_VISIBLE),
                           reason="A `docker run` that asks for no GPU (no --gpus, no "
                                  "--runtime=nvidia, no nvidia device) beside a CUDA that "
                                  "finds no driver or GPU: the container never got them "
                                  "(floydhub/dockerfiles#3)."),)),
    Rule(NO_CONTAINER_GPU, rx(r"nvidia-container-cli: initialization error: (?:load library "
                              r"failed|nvml error)[^\n]*libnvidia-ml\.so"),
         ("error",),
         (Step("On the host, check that the driver answers.", command="nvidia-smi"),
          Step("And that its NVML library is installed.",
               command="ldconfig -p | grep libnvidia-ml")),
         examples=("nvidia-container-cli: initialization error: load library failed: "
                   "libnvidia-ml.so.1: cannot open shared object file: no such file or "
                   "directory: unknown",)),
    Rule(CONTAINER_DRIVER_QUERY, rx(r"nvidia-container-cli: initialization error: driver "
                                    r"error"),
         ("error", "nvidia"),
         (Step("On the host (in WSL: inside the distribution), check the driver answers.",
               command="nvidia-smi"),
          Step("Ask the container runtime what it finds, with its debug output.",
               command="nvidia-container-cli -k -d /dev/tty info"),
          Step("Under WSL 2, in Windows: update the NVIDIA driver and WSL, then restart WSL.",
               command="wsl --update && wsl --shutdown")),
         examples=("stderr: nvidia-container-cli: initialization error: driver error: failed "
                   "to process request: unknown.",),
         alternatives=("wsl_setup: under WSL 2, a Windows build or driver without GPU support "
                       "in WSL",
                       "driver_missing: no usable NVIDIA driver on the host"),
         decide=(SMI, Step("Tell WSL from a native Linux host.", command="uname -r"))),
    Rule(WSL_IMAGE_DRIVER, rx(r"nvidia-container-cli: mount error: file creation failed: "
                              r"\S*/lib(?:cuda|nvidia-\w+|dxcore)\.so(?:\.1(?:\.1)?)?: file "
                              r"exists"),
         ("error", "nvidia"),
         (Step("Find the driver libraries and the packages that put them in the image.",
               command="docker run --rm IMAGE sh -c 'ls -l /usr/lib/x86_64-linux-gnu/"
                       "libnvidia-ml.so* /usr/lib/x86_64-linux-gnu/libcuda.so*; "
                       "dpkg -S libnvidia-ml.so.1'"),
          Step("Remove those packages in the Dockerfile (or do not install them), rebuild, "
               "and start the container again.",
               command="apt-get purge -y 'libnvidia-compute-*' 'nvidia-utils-*'")),
         examples=("nvidia-container-cli: mount error: file creation failed: /var/lib/docker/"
                   "overlay2/6011c57d/merged/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1: file "
                   "exists: unknown.",),
         alternatives=("cuda_init_failure: on a Linux host, an image with the driver's "
                       "libraries baked in (a committed GPU container)",),
         decide=(Step("Tell WSL from a native Linux host.", command="uname -r"),)),
    # moby names the driver it could not find: "" for `--gpus`, "nvidia" for a compose file's
    # `driver: nvidia` (AbdBarho/stable-diffusion-webui-docker#130). The docker CLI prefixes
    # "Error response from daemon:"; docker-compose v1 prints the same daemon error after
    # "ERROR: for <service>  Cannot start service <service>:" (easydiffusion/easydiffusion#27).
    Rule(NO_GPU_RUNTIME, rx(r"error response from daemon: could not select device driver "
                            r"\"[^\"]*\" with capabilities: \[\[gpu\]\]",
                            r"error\b[^\n]*cannot start service [^\n]*could not select device "
                            r"driver \"[^\"]*\" with capabilities: \[\[gpu\]\]"),
         ("error",),
         (Step("Install and register the NVIDIA Container Toolkit.",
               command="sudo nvidia-ctk runtime configure --runtime=docker && "
                       "sudo systemctl restart docker"),
          Step("Check that Docker now lists the nvidia runtime.",
               command="docker info | grep -i runtimes")),
         examples=('docker: Error response from daemon: could not select device driver "" '
                   'with capabilities: [[gpu]].',
                   'Error response from daemon: could not select device driver "nvidia" with '
                   'capabilities: [[gpu]]',
                   'ERROR: for stability-ai  Cannot start service stability-ai: could not '
                   'select device driver "" with capabilities: [[gpu]]')),
    Rule(CONTAINER_CGROUP, rx(r"nvidia-container-cli: [^\n]*error[^\n]*cgroup"),
         ("error", "nvidia"),
         (Step("See which cgroup hierarchy the host runs (cgroup2fs is v2).",
               command="stat -fc %T /sys/fs/cgroup"),
          Step("See the container toolkit's version (cgroup v2 needs 1.8 or later).",
               command="nvidia-container-cli --version"),
          Step("Check the runtime's cgroup setting.",
               command="grep -n no-cgroups /etc/nvidia-container-runtime/config.toml")),
         examples=(
             "stderr: nvidia-container-cli: container error: cgroup subsystem devices not "
             "found: unknown.",
             "nvidia-container-cli: container error: failed to get device cgroup mount path: "
             "relative path in absolute URI: unknown")),
    Rule(CONTAINER_NEEDS_NEWER, rx(r"requirement error: unsatisfied condition: "
                                   r"(?:cuda|driver)\s*>",
                                   # the condition quoted alone, as a platform's page or an
                                   # "OCI runtime create failed" summary shows it
                                   r"unsatisfied condition: cuda\s*>"),
         ("error", "cud"),
         (Step("On the host, see the driver version and the newest CUDA it supports.",
               command="nvidia-smi"),
          Step("See what the image requires (its NVIDIA_REQUIRE_CUDA).",
               command="docker inspect --format '{{json .Config.Env}}' IMAGE | tr , '\\n' "
                       "| grep NVIDIA_REQUIRE"),
          Step("Update the host driver, or pick an image tag built for the host's CUDA.",
               url=CUDA_COMPAT)),
         examples=("stderr: nvidia-container-cli: requirement error: unsatisfied condition: "
                   "cuda>=10.0",
                   "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.4, "
                   "please update your driver to a newer version, or use an earlier cuda "
                   "container: unknown",
                   "unsatisfied condition: cuda>=12.8")),
    Rule(DRIVER_OLD, rx(r"the nvidia driver on your system is too old",
                        r"cuda driver version is insufficient for cuda runtime version",
                        r"cuda runtime error \(35\)", r"cuda failure 35\b",
                        r"cudagetdevicecount\S* returned 35",
                        r"cuda_error_insufficient_driver",
                        r"cudaerrorinsufficientdriver",
                        # tools that print cudaErrorInsufficientDriver in their own words
                        r"cuda[^\n]*\binsufficient (?:cuda )?driver\b",
                        # NGC containers' entrypoint banner (nvcr.io images); it wraps
                        # before the detected version, so the first line is what is sure
                        r"error: this container was built for nvidia driver release [\d.]+ "
                        r"or later"),
         ("nvidia", "cud"),
         (SMI, TORCH_CUDA,
          Step("Or install the torch build that matches the driver's CUDA (pick the cuXXX "
               "not above nvidia-smi's 'CUDA Version').",
               url="https://pytorch.org/get-started/locally/")),
         examples=(
             "UserWarning: CUDA initialization: The NVIDIA driver on your system is too old "
             "(found version 11040). Please update your GPU driver by downloading and "
             "installing a new version from the URL: http://www.nvidia.com/Download/index.aspx",
             "RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime "
             "version",
             "THCudaCheck FAIL file=/pytorch/aten/src/THC/THCGeneral.cpp line=50 error=35 : "
             "CUDA driver version is insufficient for CUDA runtime version",
             "CUDA error: Insufficient CUDA driver: 9020",
             "ERROR: This container was built for NVIDIA Driver Release 455.23 or later, but "
             "version 450.66 was detected and compatibility mode is UNAVAILABLE."),
         alternatives=("driver_missing: in a container started without GPUs the runtime says "
                       "'insufficient' because it finds no driver at all",),
         decide=(SMI,)),
    Rule(PTX_TOOLCHAIN, rx(r"cuda error: the provided ptx was compiled with an unsupported "
                           r"toolchain", r"cuda_error_unsupported_ptx_version"),
         ("cud",),
         (SMI, Step("Update the driver to one that supports the CUDA version the code was "
                    "built with (the table of minimum driver versions).", url=CUDA_COMPAT)),
         examples=("RuntimeError: CUDA error: the provided PTX was compiled with an unsupported "
                   "toolchain.",)),
    Rule(LIB_MISMATCH, rx(r"fail\w* to initialize nvml: driver/library version mismatch",
                          r"error: driver/library version mismatch",
                          # nvidia-docker 1.0's own NVML call (NVIDIA/nvidia-docker#584)
                          r"error: nvml: driver/library version mismatch",
                          r"nvmlerror_librmversionmismatch",
                          r"nvrm: api mismatch",
                          r"cuda\w* error\W+system has unsupported display driver / cuda driver",
                          r"error 803\W+system has unsupported display driver",
                          r"cuda_error_system_driver_mismatch"),
         ("fail", "error", "nvrm", "cud"),
         (Step("Compare the loaded module with the libraries.",
               command="cat /proc/driver/nvidia/version; nvidia-smi"),
          Step("Reboot so the new kernel module loads.", command="sudo reboot")),
         examples=(
             "Failed to initialize NVML: Driver/library version mismatch",
             "nvidia-docker | 2017/12/21 05:04:46 Error: nvml: Driver/library version mismatch",
             "nvidia-container-cli: initialization error: nvml error: driver/library version "
             "mismatch: unknown",
             "NVRM: API mismatch: the client has the version 535.129.03, but",
             "CUDA initialization: Unexpected error from cudaGetDeviceCount(). Did you run some "
             "cuda functions before calling NumCudaDevices() that might have already set an "
             "error? Error 803: system has unsupported display driver / cuda driver "
             "combination"),
         # Error 803 (cudaErrorSystemDriverMismatch) says only that the two halves disagree;
         # a kernel driver older than the libcuda beside it (bundled or cuda-compat) is one
         # way there, and installing the current driver, which replaces both, fixes either
         # (easydiffusion/easydiffusion#134 and #379).
         alternatives=("driver_too_old: the kernel driver is older than the CUDA user-space "
                       "library loaded beside it; installing the current driver replaces both",),
         decide=(Step("Compare the kernel module's version with the user-space libraries'.",
                      command="cat /proc/driver/nvidia/version; ls -l $(ldconfig -p | "
                              "grep -m1 'libcuda.so.1 ' | awk '{print $NF}')"),)),
    Rule(CUDA_INIT, rx(r"cuda unknown error",
                       r"cuda error: unknown error",
                       r"error 999\W+unknown error",
                       r"cuda runtime error \(30\)",
                       r"cuda_error_unknown",
                       r"cuda failure 999",
                       r"all cuda-capable devices are busy or unavailable",
                       r"cuda-capable device\(s\) is/are busy or unavailable",
                       r"cuda error: initialization error",
                       # in containers: the cgroup lost the device (systemctl daemon-reload)
                       r"fail\w* to initialize nvml: unknown error"),
         ("cud", "error", "fail"),
         (Step("Reload the unified-memory module (or reboot); after a suspend/resume this "
               "is the usual fix.",
               command="sudo modprobe -r nvidia_uvm && sudo modprobe nvidia_uvm"),
          Step("Look for another process and an exclusive or prohibited compute mode.",
               command="nvidia-smi --query-gpu=index,compute_mode --format=csv; nvidia-smi")),
         examples=(
             "RuntimeError: CUDA unknown error - this may be due to an incorrectly set up "
             "environment, e.g. changing env variable CUDA_VISIBLE_DEVICES after program start. "
             "Setting the available devices to be zero.",
             "UserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount(). Did "
             "you run some cuda functions before calling NumCudaDevices() that might have "
             "already set an error? Error 999: unknown error",
             "RuntimeError: CUDA error: all CUDA-capable devices are busy or unavailable",
             "RuntimeError: CUDA error: initialization error"),
         alternatives=(
             "ddp_usage_error: 'initialization error' also comes from using CUDA in a process "
             "forked after CUDA started (DataLoader workers, mp.Process with fork)",
             "hardware_fault: a GPU that fell off the bus gives unknown errors too"),
         decide=(Step("Does plain CUDA start outside your program?",
                      command='python -c "import torch; torch.zeros(1).cuda(); print(\'ok\')"'),
                 Step("Look for Xid errors.", command="sudo dmesg -T | grep -i xid"))),
    # Where torch's "CUDA initialization: ..." warning comes from, which is all a pasted
    # fragment may keep of it (an issue title: "Triggered internally at
    # ../c10/cuda/CUDAFunctions.cpp:108.) return torch._C._cuda_getDeviceCount() > 0").
    # c10/cuda/CUDAFunctions.cpp warns from one place, device_count() catching the failure
    # of cudaGetDeviceCount (pytorch/pytorch v2.5.1), besides the opt-in "called a
    # synchronizing CUDA operation" of sync debug mode. The message that says why is read by
    # its own rule where the log has it, and this line is then its consequence.
    Rule(CUDA_INIT, rx(r"(?<!synchronizing cuda operation )(?<!synchronizing cuda operation \()"
                       r"triggered internally at [^\n()]*c10[/\\]cuda[/\\]cudafunctions\.cpp"),
         ("cud",),
         (Step("See the whole warning: torch prints why CUDA did not start.",
               command='python -c "import torch; print(torch.cuda.is_available())"'),
          Step("Reload the unified-memory module (or reboot); after a suspend/resume this "
               "is the usual fix.",
               command="sudo modprobe -r nvidia_uvm && sudo modprobe nvidia_uvm")),
         examples=("Triggered internally at ../c10/cuda/CUDAFunctions.cpp:108.) return "
                   "torch._C._cuda_getDeviceCount() > 0",),
         symptom_of=("*",),
         alternatives=("driver_missing: the same warning says 'Found no NVIDIA driver' when "
                       "there is none",
                       "driver_too_old: or 'The NVIDIA driver on your system is too old'"),
         decide=(Step("Is the driver loaded and which CUDA does it support?",
                      command="nvidia-smi"),)),
    Rule(FABRIC, rx(r"error 802\W+system not yet initialized",
                    r"fail[^\n]*system not yet initialized",
                    r"cuda error: system not yet initialized",
                    r"cuda_error_system_not_ready", r"cudaerrorsystemnotready"),
         ("error", "cud", "fail"),
         (Step("Check the Fabric Manager service.",
               command="systemctl status nvidia-fabricmanager"),
          Step("Install the Fabric Manager of the driver's branch (its major version, e.g. "
               "nvidia-fabricmanager-535 for driver 535.x; Ubuntu package name) and start it.",
               command="sudo apt-get install -y nvidia-fabricmanager-$(nvidia-smi "
                       "--query-gpu=driver_version --format=csv,noheader | head -1 | cut -d. "
                       "-f1) && sudo systemctl enable --now nvidia-fabricmanager")),
         examples=("UserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount()"
                   ". Did you run some cuda functions before calling NumCudaDevices() that might "
                   "have already set an error? Error 802: system not yet initialized",)),
    Rule(COMPAT_HW, rx(r"error 804\W+forward compatibility was attempted",
                       r"cuda error: forward compatibility was attempted",
                       r"cuda_error_compat_not_supported_on_device"),
         ("error", "cud"),
         (Step("Find the compat libcuda on the loader path.",
               command="echo $LD_LIBRARY_PATH; ldconfig -p | grep libcuda"),),
         examples=("UserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount()"
                   ". Did you run some cuda functions before calling NumCudaDevices() that might "
                   "have already set an error? Error 804: forward compatibility was attempted on "
                   "non supported HW",)),
    # An Xid as the kernel logs it ("NVRM: Xid (PCI:0000:3b:00): 79, pid=...") and as users
    # paste it without the kernel's "NVRM:", from a monitor or a write-up ("Xid
    # (PCI:0000:??:00): 119 - Timeout ...", "NVRM: Xid 119, Timeout ...", "Xid 79: ...", "got
    # Xid 79 twice"); never an NVSwitch SXid, whose numbers are another list. (Optional
    # groups, not a branch: the literal test expands branches, and the 28 numbers times a
    # branch exceed what it expands, which would leave the rule without a phrase to filter on.)
    Rule(HARDWARE, rx(r"(?<![\w-])xids? (?:\([^)]*\):? ?)?(?:errors? )?" + _HARDWARE_XIDS
                      + r"\b(?!\.\d)",
                      r"nvrm: [^\n]*fallen off the bus",
                      # Xid 79's own words, whatever prints them (NVIDIA's Xid catalogue)
                      r"\bgpu has fallen off the bus\b",
                      # Xid 119's message as the driver's GSP events print it
                      # (NVIDIA/open-gpu-kernel-modules, GSP_RPC_TIMEOUT_XID_MESSAGE_FMT:
                      # "Timeout after %llus of waiting for RPC response from GPU%u GSP!"),
                      # with the short form write-ups quote (a Lambda engineer's notes on
                      # Xid 119 then 79)
                      r"timeout after \d+ ?s (?:of )?waiting for rpc response from gpu\d* gsp",
                      r"timeout waiting for rpc from (?:gpu\d* )?gsp\b",
                      r"cuda error:\s*uncorrectable ecc error",
                      # cudaErrorECCUncorrectable's own string, whatever wraps it (ggml, JSON)
                      r"\buncorrectable ecc error encountered",
                      # the kernel's PCIe AER driver (drivers/pci/pcie/aer.c): a fatal
                      # uncorrectable error on the GPU's link
                      r"pcie bus error: severity=uncorrected \(fatal\)",
                      r"aer: [^\n]*uncorrected \(fatal\) error received",
                      r"cuda runtime error \(39\)",
                      r"cuda_error_ecc_uncorrectable",
                      r"unable to determine the device handle for gpu[^\n]*unknown error",
                      r"nvmlerror_gpuislost", r"error: gpu is lost"),
         ("nvrm", "cud", "error", "xid", "fallen off the bus", "time"),
         (Step("Read the kernel's Xid record.", command="sudo dmesg -T | grep -i -E 'xid|nvrm'"),
          Step("Read the memory error counters.",
               command="nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT"),
          Step("Reset the idle GPU (or reboot).", command="sudo nvidia-smi -r -i 0")),
         examples=(
             "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
             "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.",
             "NVRM: Xid (PCI:0000:ca:00): 48, pid=2915, DBE (double bit error) ECC error",
             "RuntimeError: CUDA error: uncorrectable ECC error encountered",
             '{"error":{"message":"timed out waiting for llama runner to start:CUDA '
             'error:uncorrectable ECC error encountered',
             "pcieport 0000:00:03.0: PCIe Bus Error: severity=Uncorrected (Fatal), "
             "type=Transaction Layer, (Requester ID)",
             "pcieport 0000:00:03.0: AER: Multiple Uncorrected (Fatal) error received: "
             "0000:00:03.0",
             "Unable to determine the device handle for GPU 0000:3B:00.0: Unknown Error",
             "Xid (PCI:0000:??:00): 79  - GPU has fallen off the bus",
             "13:41:53  NVRM: Xid 119, Timeout after 9s of waiting for RPC response from GPU0 "
             "GSP!",
             "Xid 119: Timeout after 45s waiting for RPC response from GPU0 GSP")),
    Rule(WSL_LIBCUDA, rx(r"/usr/lib/wsl/lib/libcuda\S*: cannot open",
                         r"error: libcuda\.so: cannot open shared object file",
                         # libraries that search the loader's directories for the
                         # unversioned libcuda.so themselves: bitsandbytes' CUDA setup
                         # ("CUDA SETUP: WARNING! libcuda.so not found!", bitsandbytes-
                         # foundation/bitsandbytes#52: fixed by /usr/lib/wsl/lib on
                         # LD_LIBRARY_PATH) and Triton's libcuda_dirs() ("libcuda.so cannot
                         # found!", triton-lang/triton python/triton/common/build.py)
                         r"\blibcuda\.so (?:not found|cannot (?:be )?found)\b",
                         # cuda-python's cuPythonInit dlopen()s the unversioned name too
                         # (NVIDIA/cuda-python#17: WSL, fixed by /usr/lib/wsl/lib on
                         # LD_LIBRARY_PATH)
                         r"fail\w* to dlopen libcuda\.so(?![.\w])"),
         ("cud",),
         (Step("Put WSL's driver directory on the loader path.",
               command="export LD_LIBRARY_PATH=/usr/lib/wsl/lib:$LD_LIBRARY_PATH"),),
         examples=("Could not load library libcudnn_cnn_infer.so.8. Error: libcuda.so: cannot "
                   "open shared object file: No such file or directory",
                   "CUDA SETUP: WARNING! libcuda.so not found! Do you have a CUDA driver "
                   "installed? If you are on a cluster, make sure you are on a CUDA machine!",
                   "AssertionError: libcuda.so cannot found!",
                   "RuntimeError: Failed to dlopen libcuda.so"),
         alternatives=("driver_missing: on native Linux, no driver (or a container started "
                       "without GPUs) also leaves libcuda.so missing",),
         decide=(Step("Is this WSL?", command="uname -r; ls /usr/lib/wsl/lib"),)),
    Rule(WSL_UNSUPPORTED, rx(r"cudaerrornotsupported\b", r"cuda_error_not_supported\b",
                             r"cuda error: operation not supported",
                             r"cuda runtime error \(801\)"),
         ("cud",),
         (Step("Is this WSL 2? (a kernel release ending in -microsoft-standard-WSL2)",
               command="uname -r"),
          Step("See the GPU and its compute capability (below 7.0, pre-Volta, WSL 2 supports "
               "the least).", command="nvidia-smi --query-gpu=name,compute_cap --format=csv"),
          Step("Read what CUDA under WSL 2 does not support, and keep the job off it (or run "
               "it on native Linux).", url=WSL_GUIDE)),
         examples=(
             "RuntimeError: CUDA error encountered at: /workspace/.conda-bld/work/cpp/src/"
             "bitmask/null_mask.cu:93: 801 cudaErrorNotSupported operation not supported.",
             "MemoryError: std::bad_alloc: CUDA error at: /workspace/.conda-bld/work/include/"
             "rmm/mr/device/cuda_memory_resource.hpp:70: cudaErrorNotSupported operation not "
             "supported",
             "RuntimeError: CUDA error: operation not supported",
             "numba.cuda.cudadrv.driver.CudaAPIError: [801] Call to cuMemHostRegister results "
             "in CUDA_ERROR_NOT_SUPPORTED"),
         alternatives=("cuda_init_failure: on native Linux, a vGPU without unified memory "
                       "enabled, or a Jetson (no CUDA IPC), refuses the same operations",),
         decide=(Step("Tell WSL from a native Linux host.", command="uname -r"),)),
    Rule(WSL_SYMLINK, rx(r"/usr/lib/wsl/lib/libcuda\.so\S* is not a symbolic link"),
         ("cud",), examples=("/sbin/ldconfig.real: /usr/lib/wsl/lib/libcuda.so.1 is not a "
                              "symbolic link",)),
    Rule(WSL_BLOCKED, rx(r"fail\w* to [\w ]{0,30}nvml: gpu access blocked by the operating "
                         r"system", r"error\W+gpu access blocked by the operating system",
                         # 17 is NVML_ERROR_OPERATING_SYSTEM (nvml.h), the same refusal
                         r"nvml[^\n]*\binit\w*[^\n]*\bfail\w*:? ?17\b(?![.\d])"),
         ("fail", "error"),
         (Step("Update WSL and restart it.", command="wsl --update && wsl --shutdown"),),
         examples=("Failed to initialize NVML: GPU access blocked by the operating system",
                   "gpu.go:39: CUDA not detected: nvml vram init failure: 17",
                   "Failed to properly shut down NVML: GPU access blocked by the operating "
                   "system"),
         relations=(ReadAs("container", code="DIAG005",
                           reason="WSL 2 hands its GPU to containers through the NVIDIA "
                                  "container runtime; with a container around the job, the "
                                  "refusal is the runtime's (no-cgroups, too old), not WSL's "
                                  "(microsoft/WSL#9962, #9938)."),)),
    Rule(WSL1, rx(r"error[^\n]*\d+\.\d+\.\d+-\d+-microsoft\b(?!-)",
                  r"nvidia[^\n]*\d+\.\d+\.\d+-\d+-microsoft\b(?!-)"),
         ("error", "nvidia"),
         (Step("Check the WSL version of each distribution (in Windows).", command="wsl -l -v"),
          Step("Convert it to WSL 2.", command="wsl --set-version Ubuntu 2")),
         examples=("Error! Your kernel headers for kernel 4.4.0-19041-Microsoft cannot be "
                   "found.",)),
)
