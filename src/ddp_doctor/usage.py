"""Bad input from the user: one exception, the number limits, and the output-path checks.

Everything here runs before any work starts, so a typo costs a second, not a gather or a
smoke run. Every problem is one ``UsageError`` whose message is the single line printed
after ``ddp-doctor: error:`` (exit code 2).

Numbers are parsed here rather than by typer: typer's own messages differ between its
versions and come with a usage box, and the user should read the option, the value typed
and what is allowed, in one line, whatever went wrong.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

EXIT_READY, EXIT_PROBLEMS, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3


class UsageError(Exception):
    """Bad input from the user: reported in one line, exit code 2."""


@dataclass(frozen=True)
class Limit:
    """What one numeric option accepts, and how to say so when a value is not that."""

    option: str
    least: float
    most: Optional[float] = None
    whole: bool = True
    unit: str = ""  # e.g. " s", shown after the bounds
    why: str = ""  # e.g. " (BatchNorm needs ...)", shown after a value out of range

    @property
    def allowed(self) -> str:
        if self.most is None:
            return f"{self.least:g}{self.unit} or more"
        return f"{self.least:g} to {self.most:g}{self.unit}"

    def problem(self, value: float) -> Optional[str]:
        """The line for a value out of range, or None when it is in range."""
        if value < self.least or (self.most is not None and value > self.most):
            return f"{self.option} {value:g}: must be {self.allowed}{self.why}"
        return None

    def _check(self, value: float) -> None:
        problem = self.problem(value)
        if problem is not None:
            raise UsageError(problem)

    def whole_number(self, text: Optional[str]) -> Optional[int]:
        """TEXT as an int in range, None when the option was not given."""
        if text is None:
            return None
        stripped = text.strip()
        if not stripped.lstrip("+-").isdigit():
            raise UsageError(f"{self.option} {text!r}: not a whole number; use {self.allowed}")
        value = int(stripped)
        self._check(value)
        return value

    def number(self, text: Optional[str]) -> Optional[float]:
        """TEXT as a float in range (seconds and the like), None when not given."""
        if text is None:
            return None
        try:
            value = float(text)
        except ValueError:
            raise UsageError(f"{self.option} {text!r}: not a number; use {self.allowed}") from None
        if value != value or value in (float("inf"), float("-inf")):  # nan, inf
            raise UsageError(f"{self.option} {text!r}: not a finite number; use {self.allowed}")
        self._check(value)
        return value


def one_of(option: str, value: str, allowed: Sequence[str]) -> str:
    """VALUE when it is one of ALLOWED, else a UsageError naming them."""
    if value not in allowed:
        raise UsageError(f"{option} {value!r}: choose one of {', '.join(allowed)}")
    return value


@dataclass(frozen=True)
class OutputPath:
    """One file a run will write, as the user named it: ``--json PATH`` and the like."""

    option: str
    value: Optional[str]
    # Kept from being overwritten without --force, as --bundle is: a file a person keeps
    # (run's --log), not a report a pipeline rewrites on every run.
    guarded: bool = False


def check_output_path(output: OutputPath) -> None:
    """Refuse an output that cannot be written, before any work is done."""
    if output.value is None or output.value == "-":
        return
    path = Path(output.value)
    if path.is_dir():
        raise UsageError(f"{output.option} {output.value}: is a directory")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"{output.option} {output.value}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UsageError(f"{output.option} {output.value}: not writable")


def check_bundle_path(value: str, force: bool) -> None:
    """A bundle path must name an archive kind, a real directory, and no file unless --force."""
    from ddp_doctor.bundle.archive import archive_kind  # only --bundle needs the archives

    if archive_kind(Path(value)) is None:
        raise UsageError(f"--bundle {value}: name a .zip or .tar.gz file")
    check_output_path(OutputPath("--bundle", value))
    if Path(value).exists() and not force:
        raise UsageError(f"--bundle {value}: already exists (add --force to overwrite it)")


def check_outputs(outputs: Sequence[OutputPath], bundle: Optional[str], force: bool) -> None:
    """Every output of a run, checked together: each writable, one stdout user, no clashes.

    Run before anything is gathered or trained, so no run writes some outputs and then
    fails on another (a bundle written last used to fail after the reports claimed a run).
    """
    for output in outputs:
        check_output_path(output)
    stdout_users = [o.option for o in outputs if o.value == "-"]
    if len(stdout_users) == 2:
        raise UsageError(f"{' and '.join(stdout_users)} cannot both write to stdout ('-'); "
                         "send one of them to a file")
    if len(stdout_users) > 2:
        raise UsageError(f"{', '.join(stdout_users[:-1])} and {stdout_users[-1]}: only one "
                         "of them can write to stdout ('-'); send the others to files")
    guarded = [o for o in outputs if o.guarded and o.value not in (None, "-")]
    for output in guarded:
        if Path(str(output.value)).exists() and not force:
            raise UsageError(f"{output.option} {output.value}: already exists (add --force "
                             "to overwrite it)")
    if bundle is not None:
        check_bundle_path(bundle, force)
    elif force and not guarded:
        raise UsageError("--force only lets --bundle (or run's --log) overwrite an existing "
                         "file; add --bundle PATH or leave --force out")
    named = [(o.option, o.value) for o in (*outputs, OutputPath("--bundle", bundle))
             if o.value is not None and o.value != "-"]
    seen: dict[Path, str] = {}
    for option, value in named:
        where = Path(value).resolve()
        if where in seen:
            raise UsageError(f"{seen[where]} and {option} both name {value}; give each "
                             "output its own file")
        seen[where] = option
