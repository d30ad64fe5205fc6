"""Built-in check plugins, one module per area.

The order of ``BUILTIN_MODULES`` is the order checks run and are reported in: root
causes (the driver, the torch install) before what depends on them.

Every check receives a ``ddp_doctor.facts.view.FactsView`` of the snapshot: typed
accessors for the facts, and the derived answers (usable GPUs, the target interpreter)
that several checks share.
"""

BUILTIN_MODULES: tuple[str, ...] = (
    "ddp_doctor.checks.driver",
    "ddp_doctor.checks.driver_compat",
    "ddp_doctor.checks.hardware",
    "ddp_doctor.checks.torch_build",
    "ddp_doctor.checks.packages",
    "ddp_doctor.checks.cuda",
    "ddp_doctor.checks.cudnn",
    "ddp_doctor.checks.visibility",
    "ddp_doctor.checks.nccl",
    "ddp_doctor.checks.wsl",
    "ddp_doctor.checks.host",
    "ddp_doctor.checks.launch",
)
