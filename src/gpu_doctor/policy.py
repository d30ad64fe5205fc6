"""The CI policy file: what a pipeline requires of a machine beyond "no errors".

Found as ``--config PATH``, else the nearest ``gpu-doctor.toml`` or ``pyproject.toml``
with a ``[tool.gpu-doctor]`` table, searching upward from the working directory.
(The keys and their checks are defined in the policy issue; until then a found policy
file is read and its table kept, and an unreadable one is a one-line error.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class PolicyError(Exception):
    """A policy file that cannot be used; the message is one line for the user."""


@dataclass(frozen=True)
class Policy:
    """The [tool.gpu-doctor] table and where it came from."""

    path: Path
    table: dict[str, Any] = field(default_factory=dict)


def _read_toml(path: Path) -> dict[str, Any]:
    import tomllib

    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PolicyError(f"{path}: not valid TOML: {exc}") from None


def _table(path: Path) -> dict[str, Any] | None:
    data = _read_toml(path)
    if path.name == "pyproject.toml":
        table = data.get("tool", {}).get("gpu-doctor")
        return table if isinstance(table, dict) else None
    return data


def find_policy(config: Path | None, cwd: Path) -> Policy | None:
    """The policy to apply, or None when there is none."""
    if config is not None:
        if not config.is_file():
            raise PolicyError(f"--config {config}: no such file")
        table = _table(config)
        if table is None:
            raise PolicyError(f"--config {config}: has no [tool.gpu-doctor] table")
        return Policy(config, table)
    for folder in (cwd, *cwd.parents):
        for name in ("gpu-doctor.toml", "pyproject.toml"):
            candidate = folder / name
            if candidate.is_file():
                table = _table(candidate)
                if table is not None:
                    return Policy(candidate, table)
    return None


def apply_policy(report: Any, policy: Policy, facts: Any) -> Any:
    """The report judged by the policy (no keys are defined yet: unchanged)."""
    return report
