"""Built-in check plugins, one module per area.

The order of ``BUILTIN_MODULES`` is the order checks run and are reported in: root
causes (the driver, the torch install) before what depends on them. The modules are
imported here, by name in an import statement, so that whoever loads the built-in checks
(``ddp_doctor.checklist``) depends on them in a way a reader and the layering test see.

Every check receives a ``ddp_doctor.facts.view.FactsView`` of the snapshot: typed
accessors for the facts, and the derived answers (usable GPUs, the target interpreter)
that several checks share.
"""

from types import ModuleType

from . import (
    cuda,
    cudnn,
    driver,
    driver_compat,
    hardware,
    host,
    launch,
    nccl,
    packages,
    torch_build,
    visibility,
    wsl,
)

BUILTIN_MODULES: tuple[ModuleType, ...] = (
    driver,
    driver_compat,
    hardware,
    torch_build,
    packages,
    cuda,
    cudnn,
    visibility,
    nccl,
    wsl,
    host,
    launch,
)
