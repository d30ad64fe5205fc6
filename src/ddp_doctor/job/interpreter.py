"""Which Python interpreter the supervised command runs, so ``run`` judges that one.

``ddp-doctor`` often lives in a venv of its own (pipx, a tools venv) while the job runs
another: ``/venv-b/bin/yolo detect train device=0,1`` runs ``/venv-b/bin/python`` and its
torch, whatever torch ddp-doctor's own interpreter holds. Judging the wrong one blames a
CPU-only torch the job never imported. The command itself says which it runs:

- a Python named in it (``python3 -m torch.distributed.run ...``, ``/venv/bin/python``);
- otherwise a console script's shebang: ``torchrun``, ``accelerate``, ``deepspeed``,
  ``yolo`` are scripts pip wrote with ``#!/path/to/python`` as their first line, or, for
  a path longer than the kernel's shebang limit, pip's ``#!/bin/sh`` with an ``'''exec'
  "/path/to/python"`` second line (the launcher format of pip's distlib:
  https://github.com/pypa/pip/blob/main/src/pip/_vendor/distlib/scripts.py);
  ``#!/usr/bin/env python3`` looks the name up on the command's PATH, as the kernel's
  ``env`` would;
- wrappers that run the rest of the line (``env A=1 ...``, ``nohup``, ``time``, ``nice``)
  are looked through;
- a command that names no Python (``bash train.sh``): the active venv
  (``VIRTUAL_ENV``), conda environment (``CONDA_PREFIX``), ``python3`` on PATH, and last
  ddp-doctor's own interpreter.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Optional

_PYTHON_NAME = re.compile(r"^(?:python|pypy)(?:\d+(?:\.\d+)?)?$")
# Wrappers that run the rest of their line as the command, with the options they take
# before it (those with a value consume the next word).
_WRAPPERS: dict[str, frozenset[str]] = {
    "env": frozenset({"-u", "--unset", "-C", "--chdir", "-S", "--split-string"}),
    "nohup": frozenset(),
    "time": frozenset({"-f", "--format", "-o", "--output"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "stdbuf": frozenset({"-i", "-o", "-e"}),
    "setsid": frozenset(),
    "exec": frozenset(),
}
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# pip's launcher for a long interpreter path: #!/bin/sh, then '''exec' "PATH" "$0" "$@"
_SH_EXEC = re.compile(r"""^'''exec' (?:"([^"]+)"|(\S+)) "\$0" "\$@"$""")


@dataclass(frozen=True)
class JobInterpreter:
    """The interpreter judged, and how it was found (for the report to say)."""

    path: str
    how: str

    def describe(self) -> str:
        return f"{self.path} ({self.how})"


def _resolve(word: str, environ: Mapping[str, str]) -> Optional[str]:
    """A command word as the shell would run it: a path as given, a name on PATH."""
    if "/" in word:
        return word if os.path.isfile(word) else None
    return shutil.which(word, path=environ.get("PATH", os.defpath))


def _after_wrappers(command: Sequence[str]) -> list[str]:
    """The command with ``env A=1``, ``nohup`` and similar wrappers taken off the front."""
    words = list(command)
    while words:
        head = os.path.basename(words[0])
        if _ASSIGNMENT.match(words[0]):
            words.pop(0)
            continue
        if head not in _WRAPPERS:
            break
        takes_value = _WRAPPERS[head]
        words.pop(0)
        while words and (words[0].startswith("-") or (head == "env"
                                                       and _ASSIGNMENT.match(words[0]))):
            option = words.pop(0)
            if option in takes_value and words:
                words.pop(0)
    return words


def shebang_python(path: str, environ: Mapping[str, str]) -> Optional[str]:
    """The Python a script's shebang runs, or None (not a script, not Python)."""
    try:
        with open(path, "rb") as script:
            head = script.read(1024)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    lines = head.decode("utf-8", "replace").splitlines()
    try:
        words = shlex.split(lines[0][2:].strip())
    except ValueError:
        return None
    if not words:
        return None
    program, args = words[0], words[1:]
    if os.path.basename(program) == "env":
        args = [a for a in args if not a.startswith("-")]
        if args and _PYTHON_NAME.match(os.path.basename(args[0])):
            return _resolve(args[0], environ)
        return None
    if _PYTHON_NAME.match(os.path.basename(program)):
        return program
    if os.path.basename(program) == "sh" and len(lines) > 1:
        found = _SH_EXEC.match(lines[1].strip())
        if found:
            return found.group(1) or found.group(2)
    return None


def find_interpreter(command: Sequence[str],
                     environ: Optional[Mapping[str, str]] = None) -> JobInterpreter:
    """The Python the command will run (see the module docstring for the order)."""
    env = os.environ if environ is None else environ
    words = _after_wrappers(command)
    if words:
        name = os.path.basename(words[0])
        found = _resolve(words[0], env)
        if _PYTHON_NAME.match(name) and found:
            return JobInterpreter(found, "the Python the command runs")
        if found:
            python = shebang_python(found, env)
            if python is not None:
                return JobInterpreter(python, f"the interpreter of {found}, from its "
                                              "first line")
    venv = env.get("VIRTUAL_ENV")
    if venv and os.path.isfile(os.path.join(venv, "bin", "python")):
        return JobInterpreter(os.path.join(venv, "bin", "python"),
                              "the active venv (VIRTUAL_ENV): the command names no Python")
    conda = env.get("CONDA_PREFIX")
    if conda and os.path.isfile(os.path.join(conda, "bin", "python")):
        return JobInterpreter(os.path.join(conda, "bin", "python"),
                              "the active conda environment (CONDA_PREFIX): the command "
                              "names no Python")
    on_path = shutil.which("python3", path=env.get("PATH", os.defpath))
    if on_path:
        return JobInterpreter(on_path, "python3 on PATH: the command names no Python")
    return JobInterpreter(sys.executable, "ddp-doctor's own: the command names no Python "
                                          "and none is on PATH")
