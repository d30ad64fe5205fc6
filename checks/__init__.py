"""Built-in check plugins, one module per area.

The order of ``BUILTIN_MODULES`` is the order checks run and are reported in: root
causes (the driver, the torch install) before what depends on them.
"""

BUILTIN_MODULES: tuple[str, ...] = (
    "gpu_doctor.checks.driver",
    "gpu_doctor.checks.driver_compat",
    "gpu_doctor.checks.hardware",
    "gpu_doctor.checks.torch_build",
    "gpu_doctor.checks.cuda",
    "gpu_doctor.checks.cudnn",
    "gpu_doctor.checks.visibility",
    "gpu_doctor.checks.nccl",
    "gpu_doctor.checks.wsl",
    "gpu_doctor.checks.host",
    "gpu_doctor.checks.launch",
)
