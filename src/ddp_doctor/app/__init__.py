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
"""

from __future__ import annotations

from ddp_doctor.app.catalogue import run_checks, run_codes, run_explain
from ddp_doctor.app.compare import CompareRequest, compare
from ddp_doctor.app.diagnose import run_diagnose
from ddp_doctor.app.examine import run_check, run_doctor
from ddp_doctor.app.outputs import emit
from ddp_doctor.app.requests import Common, MachineRequest, SmokeRequest
from ddp_doctor.app.run import RunRequest, run_job
from ddp_doctor.app.smoke import run_smoke
from ddp_doctor.usage import EXIT_INTERNAL, EXIT_PROBLEMS, EXIT_READY, EXIT_USAGE, UsageError

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
