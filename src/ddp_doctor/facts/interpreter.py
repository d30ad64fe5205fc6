"""Validate a ``--python`` argument before running the probe in it."""

from __future__ import annotations

import os
import shutil

from ddp_doctor.facts.seam import Env

_MARKER = "ddp-doctor-python-ok"


class InterpreterError(Exception):
    """The path given is not a usable Python interpreter; the message is for the user."""


def validate_interpreter(env: Env, path: str, timeout: float = 20.0) -> str:
    """Return the interpreter's path if it runs Python 3, else raise InterpreterError."""
    resolved = path if os.sep in path else (shutil.which(path) or path)
    if os.path.isdir(resolved):
        raise InterpreterError(f"--python {path}: is a directory; give the interpreter, "
                               f"e.g. {os.path.join(resolved, 'bin', 'python')}")
    if not os.path.exists(resolved):
        raise InterpreterError(f"--python {path}: no such file")
    if not os.access(resolved, os.X_OK):
        raise InterpreterError(f"--python {path}: not executable")
    result = env.run(
        [resolved, "-c", f"import sys; print('{_MARKER}', sys.version_info[0])"],
        timeout=timeout,
    )
    if not result.ok or _MARKER not in result.stdout:
        raise InterpreterError(f"--python {path}: not a Python interpreter "
                               f"({result.describe_failure() if not result.ok else 'no answer'})")
    if result.stdout.split(_MARKER, 1)[1].split()[:1] != ["3"]:
        raise InterpreterError(f"--python {path}: Python 2 cannot run PyTorch 1.5 or newer")
    return resolved
