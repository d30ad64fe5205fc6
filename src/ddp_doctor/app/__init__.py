"""What each command does, behind the command line: one flow per command, one ``emit``.

``cli.py`` declares the options and calls one function here; each returns the exit code:
0 ready, 1 problems found, 3 the doctor itself failed. Bad input of any kind (an option
value, a path, a facts file, a policy file) is a ``UsageError`` raised before any work
starts where it can be known then, printed by the CLI as one line, exit code 2.

Every flow ends in ``emit``: all outputs of a run come from one Report after one
redaction pass, so the console, --json, --markdown, --junit, the GitHub annotations and
the --bundle cannot disagree or leak.

One module per flow: ``examine`` (check, doctor), ``smoke``, ``run``, ``diagnose``, ``compare``,
``catalogue``
(checks, codes, explain); ``requests`` holds what a command asked for and ``outputs`` where
its results go. This package's names below are the command line's whole interface to it.

The names load on first use (PEP 562's module ``__getattr__``): importing one flow, as
``cli.py`` does when its command runs, does not import the others, so ``check`` pays for
neither the smoke job's nor diagnose's modules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ddp_doctor.usage import EXIT_INTERNAL, EXIT_PROBLEMS, EXIT_READY, EXIT_USAGE, UsageError

if TYPE_CHECKING:
    from ddp_doctor.app.catalogue import run_checks, run_codes, run_explain
    from ddp_doctor.app.compare import CompareRequest, compare
    from ddp_doctor.app.diagnose import run_diagnose
    from ddp_doctor.app.examine import run_check, run_doctor
    from ddp_doctor.app.outputs import emit
    from ddp_doctor.app.requests import Common, MachineRequest, SmokeRequest
    from ddp_doctor.app.run import RunRequest, run_job
    from ddp_doctor.app.smoke import run_smoke

# Each lazily loaded name and the module of this package that defines it. (Importing the
# module ``ddp_doctor.app.compare`` binds the package's ``compare`` to that module, as any
# submodule import does: the command line imports the flow from the module itself.)
_HOMES = {
    "run_checks": "catalogue", "run_codes": "catalogue", "run_explain": "catalogue",
    "CompareRequest": "compare", "compare": "compare",
    "run_diagnose": "diagnose",
    "run_check": "examine", "run_doctor": "examine",
    "emit": "outputs",
    "Common": "requests", "MachineRequest": "requests", "SmokeRequest": "requests",
    "RunRequest": "run", "run_job": "run",
    "run_smoke": "smoke",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)


__all__ = [
           "EXIT_INTERNAL",
           "EXIT_PROBLEMS",
           "EXIT_READY",
           "EXIT_USAGE",
           "Common",
           "CompareRequest",
           "MachineRequest",
           "RunRequest",
           "SmokeRequest",
           "UsageError",
           "compare",
           "emit",
           "run_check",
           "run_checks",
           "run_codes",
           "run_diagnose",
           "run_doctor",
           "run_explain",
           "run_job",
           "run_smoke",
]
