"""The CI policy file: what a pipeline requires of a machine beyond "no errors".

Where it is found: ``--config PATH``, else the nearest ``ddp-doctor.toml`` or
``pyproject.toml`` with a ``[tool.ddp-doctor]`` table, searching upward from the working
directory (a ``ddp-doctor.toml`` wins over a ``pyproject.toml`` in the same folder; a
``pyproject.toml`` without the table is passed over). In ``pyproject.toml`` the keys live
in ``[tool.ddp-doctor]`` (the ``[tool.NAME]`` convention of PEP 518,
https://peps.python.org/pep-0518/#tool-table); in ``ddp-doctor.toml`` (or any other file
given to ``--config``) they are top-level keys. Keys are kebab-case, as in pyproject
(https://packaging.python.org/en/latest/specifications/pyproject-toml/):

- ``min-gpus`` (int): usable GPUs, counted as the checks count them
  (``FactsView.usable_gpus`` in ``facts/view.py``: torch.cuda.device_count(), else NVML
  narrowed by CUDA_VISIBLE_DEVICES), so the policy and the visibility checks never disagree.
- ``min-driver-version`` (string, e.g. "535.104.05"): compared number by number.
- ``torch-versions`` (string): a PEP 440 specifier set such as ">=2.3,<2.7"
  (https://packaging.python.org/en/latest/specifications/version-specifiers/).
- ``require-gpu-training`` (true/false): the smoke job must have trained on the GPUs with
  NCCL. A run that fell back to the CPU (no usable GPU: SMK017) fails it (POL007), so a CI
  pre-flight on a GPU runner whose driver broke can never pass on the CPU.
- ``min-allreduce-busbw-gbps`` (number) and ``min-scaling-efficiency`` (0 to 1): read
  from the smoke job; ``ddp-doctor doctor`` runs it with ``--scaling`` when the second is
  set. A requirement the run did not measure is a POL006 warning, never a silent pass.
- ``ignore`` (table CODE = "reason"): those findings stay in every report, marked
  ignored with the reason, and no longer count for the exit code or the check's status.
- ``fail-on-warnings`` (true, or a list of codes): those warnings fail the run (exit 1),
  and the checks that report them are marked failed, so JUnit and annotations agree.

Anything else is an error naming the file and the key (exit 2), never a silent default.
Applying a policy to a finished Report is ``policy.apply``; this module only finds and
validates the file, so the requirements (which need ``Policy``) never import it back.
TOML is read with ``tomllib`` (Python 3.11+) or its backport ``tomli``
(https://docs.python.org/3/library/tomllib.html).
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python < 3.11 only
    import tomli as tomllib

POLICY_FILE = "ddp-doctor.toml"
KEYS = ("min-gpus", "min-driver-version", "torch-versions", "require-gpu-training",
        "min-allreduce-busbw-gbps", "min-scaling-efficiency", "ignore", "fail-on-warnings")
_DRIVER_VERSION = re.compile(r"^\d+(\.\d+){0,3}$")


class PolicyError(Exception):
    """A policy file that cannot be used; the message is one line for the user."""


@dataclass(frozen=True)
class Policy:
    """A validated policy: the raw table, where it came from, and each key's value."""

    path: Path
    table: dict[str, Any] = field(default_factory=dict)
    min_gpus: int | None = None
    min_driver_version: str | None = None
    torch_versions: str | None = None
    min_allreduce_busbw_gbps: float | None = None
    min_scaling_efficiency: float | None = None
    require_gpu_training: bool | None = None
    ignore: dict[str, str] = field(default_factory=dict)
    fail_on_warnings: bool | tuple[str, ...] = False

    @property
    def wants_scaling(self) -> bool:
        """Whether the smoke job must also run on one rank to measure scaling."""
        return self.min_scaling_efficiency is not None

    @property
    def requirements(self) -> int:
        return sum(v is not None for v in (self.min_gpus, self.min_driver_version,
                                           self.torch_versions, self.min_allreduce_busbw_gbps,
                                           self.min_scaling_efficiency)) + bool(
            self.require_gpu_training)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PolicyError(f"{path}: not valid TOML: {exc}") from None


def _table(path: Path) -> dict[str, Any] | None:
    data = _read_toml(path)
    if path.name == "pyproject.toml":
        tool = data.get("tool")
        if not isinstance(tool, dict) or "ddp-doctor" not in tool:
            return None
        table = tool["ddp-doctor"]
        if not isinstance(table, dict):
            raise PolicyError(f"{path}: tool.ddp-doctor: expected a table ([tool.ddp-doctor]), "
                              f"got {_kind(table)}")
        return table
    return data


def find_policy(config: Path | None, cwd: Path,
                known_codes: Callable[[], Collection[str]]) -> Policy | None:
    """The policy to apply, or None when there is none; PolicyError when it is unusable.

    KNOWN_CODES gives every code id (called only when a policy file is found): the codes of
    every family lie above the policy, so its caller, which may import them, hands them in.
    """
    if config is not None:
        if not config.is_file():
            raise PolicyError(f"--config {config}: no such file")
        table = _table(config)
        if table is None:
            raise PolicyError(f"--config {config}: has no [tool.ddp-doctor] table")
        return parse_policy(config, table, known_codes())
    for folder in (cwd, *cwd.parents):
        for name in (POLICY_FILE, "pyproject.toml"):
            candidate = folder / name
            if candidate.is_file():
                table = _table(candidate)
                if table is not None:
                    return parse_policy(candidate, table, known_codes())
    return None


def _kind(value: Any) -> str:
    """A value's TOML kind, for error messages: 'a string ("eight")', 'an array'."""
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, (int, float)):
        return f"a number ({value!r})"
    if isinstance(value, str):
        return f"a string ({value!r})"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    return f"a {type(value).__name__}"


def _suggest(word: str, choices: Collection[str]) -> str:
    close = difflib.get_close_matches(word.lower().replace("_", "-"), list(choices), n=1,
                                      cutoff=0.6)
    if not close:
        close = difflib.get_close_matches(word.upper(), list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


class _Reader:
    """Validates one table, raising PolicyError lines that name the file and the key."""

    def __init__(self, path: Path, known_codes: Collection[str]) -> None:
        self.path = path
        self.prefix = "[tool.ddp-doctor] " if path.name == "pyproject.toml" else ""
        self.known_codes = known_codes

    def fail(self, key: str, message: str) -> PolicyError:
        return PolicyError(f"{self.path}: {self.prefix}{key}: {message}")

    def number(self, key: str, value: Any, least: float, most: float | None = None,
               whole: bool = False) -> float:
        wanted = "a whole number" if whole else "a number"
        bounds = f"{least:g} or more" if most is None else f"from {least:g} to {most:g}"
        kinds = (int,) if whole else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds):
            raise self.fail(key, f"expected {wanted} {bounds}, got {_kind(value)}")
        if value < least or (most is not None and value > most):
            raise self.fail(key, f"expected {wanted} {bounds}, got {value!r}")
        return value

    def boolean(self, key: str, value: Any) -> bool:
        if not isinstance(value, bool):
            raise self.fail(key, f"expected true or false, got {_kind(value)}")
        return value

    def text(self, key: str, value: Any, example: str) -> str:
        if not isinstance(value, str) or not value.strip():
            got = _kind(value) if not isinstance(value, str) else "an empty string"
            raise self.fail(key, f"expected a string such as {example}, got {got}")
        return value.strip()

    def code(self, key: str, value: Any) -> str:
        if not isinstance(value, str):
            raise self.fail(key, f"expected a finding code such as \"VIS006\", got {_kind(value)}")
        code = value.strip().upper()
        if code not in self.known_codes:
            hint = _suggest(code, self.known_codes)
            raise self.fail(key, f"unknown code {value!r}{hint}; `ddp-doctor checks` and "
                                 "docs/codes.md list them")
        return code

    def ignore(self, value: Any) -> dict[str, str]:
        if not isinstance(value, dict):
            raise self.fail("ignore", "expected a table of CODE = \"reason\" (e.g. ignore = "
                                      f"{{ VIS006 = \"shared dev box\" }}), got {_kind(value)}")
        out: dict[str, str] = {}
        for raw, reason in value.items():
            code = self.code(f"ignore.{raw}", raw)
            if not isinstance(reason, str) or not reason.strip():
                got = _kind(reason) if not isinstance(reason, str) else "an empty string"
                raise self.fail(f"ignore.{raw}", f"give the reason as a non-empty string "
                                                 f"(e.g. {code} = \"shared dev box\"), got {got}")
            out[code] = reason.strip()
        return out

    def fail_on_warnings(self, value: Any) -> bool | tuple[str, ...]:
        key = "fail-on-warnings"
        if isinstance(value, bool):
            return value
        if not isinstance(value, list):
            raise self.fail(key, f"expected true, false or a list of codes (e.g. "
                                 f"[\"VIS006\"]), got {_kind(value)}")
        return tuple(dict.fromkeys(self.code(f"{key}[{n}]", v) for n, v in enumerate(value)))


def parse_policy(path: Path, table: dict[str, Any], known_codes: Collection[str]) -> Policy:
    """The table validated into a Policy; the first problem is a one-line PolicyError."""
    reader = _Reader(path, known_codes)
    for key in table:
        if key not in KEYS:
            hint = _suggest(key, KEYS)
            if key == "tool" and path.name != "pyproject.toml":
                hint = (f" ({path.name} takes the keys at top level, without "
                        "[tool.ddp-doctor])")
            raise reader.fail(key, f"unknown key{hint}; known keys: {', '.join(KEYS)}")
    values: dict[str, Any] = {}
    if "min-gpus" in table:
        values["min_gpus"] = int(reader.number("min-gpus", table["min-gpus"], 1, whole=True))
    if "min-driver-version" in table:
        text = reader.text("min-driver-version", table["min-driver-version"], '"535.104.05"')
        if not _DRIVER_VERSION.match(text):
            raise reader.fail("min-driver-version", f"{text!r} is not a driver version such as "
                                                    "\"535.104.05\" or \"550\"")
        values["min_driver_version"] = text
    if "torch-versions" in table:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet

        text = reader.text("torch-versions", table["torch-versions"], '">=2.3,<2.7"')
        try:
            SpecifierSet(text)
        except InvalidSpecifier:
            raise reader.fail("torch-versions", f"{text!r} is not a PEP 440 specifier set "
                                                "such as \">=2.3,<2.7\" or \"==2.5.*\"") from None
        values["torch_versions"] = text
    if "min-allreduce-busbw-gbps" in table:
        number = reader.number("min-allreduce-busbw-gbps", table["min-allreduce-busbw-gbps"], 0)
        values["min_allreduce_busbw_gbps"] = float(number)
    if "min-scaling-efficiency" in table:
        number = reader.number("min-scaling-efficiency", table["min-scaling-efficiency"], 0, 1)
        values["min_scaling_efficiency"] = float(number)
    if "require-gpu-training" in table:
        values["require_gpu_training"] = reader.boolean("require-gpu-training",
                                                        table["require-gpu-training"])
    if "ignore" in table:
        values["ignore"] = reader.ignore(table["ignore"])
    if "fail-on-warnings" in table:
        values["fail_on_warnings"] = reader.fail_on_warnings(table["fail-on-warnings"])
    return Policy(path, dict(table), **values)
