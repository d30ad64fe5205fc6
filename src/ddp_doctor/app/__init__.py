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
its results go.
Nothing here is re-exported: the command line imports each flow from its own module when
that command runs (``from ddp_doctor.app.examine import run_check``), so ``check`` pays for
neither the smoke job's nor diagnose's modules, and every import is one the layering test
can read.
"""

from __future__ import annotations

from ddp_doctor.usage import EXIT_INTERNAL, EXIT_PROBLEMS, EXIT_READY, EXIT_USAGE, UsageError

__all__ = ["EXIT_INTERNAL", "EXIT_PROBLEMS", "EXIT_READY", "EXIT_USAGE", "UsageError"]
