"""The one seam between ddp-doctor and the machine it diagnoses.

Every probe reaches the outside world only through an ``Env``: running a command
(always with a deadline, never through a shell), reading a file, the environment
variables, platform details and psutil's host counters. Tests hand probes a fake Env
loaded with outputs captured on real machines, and that fake refuses any command it
was not told about, so no test silently depends on this machine.
"""

from __future__ import annotations

import contextlib
import os
import platform
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ddp_doctor.process.group import reap_group


@dataclass(frozen=True)
class CommandResult:
    """What a child process did. ``timed_out`` means it was killed at its deadline."""

    argv: tuple[str, ...]
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    not_found: bool = False
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.not_found

    def describe_failure(self) -> str:
        """One line saying how the command failed, for evidence and error texts."""
        name = self.argv[0] if self.argv else "command"
        if self.not_found:
            return f"{name}: not found"
        if self.timed_out:
            return f"{name}: no answer within {self.duration_s:.0f}s, killed"
        if self.returncode is not None and self.returncode < 0:
            try:
                sig = signal.Signals(-self.returncode).name
            except ValueError:
                sig = f"signal {-self.returncode}"
            return f"{name}: killed by {sig} (exit code {self.returncode})"
        tail = (self.stderr or self.stdout).strip().splitlines()[-1:] or [""]
        return f"{name}: exit code {self.returncode}: {tail[0][:300]}".rstrip(": ")


class Env(Protocol):
    """What probes may ask of the machine."""

    def run(
        self,
        argv: Sequence[str],
        timeout: float,
        env: Mapping[str, str] | None = None,
        input_text: str | None = None,
    ) -> CommandResult: ...

    def read_text(self, path: str) -> str | None: ...

    def exists(self, path: str) -> bool: ...

    def listdir(self, path: str) -> list[str]: ...

    def readlink(self, path: str) -> str | None: ...

    def environ(self) -> dict[str, str]: ...

    def platform(self) -> dict[str, str]: ...

    def psutil(self) -> Any: ...

    def os_release(self) -> dict[str, str]: ...


class RealEnv:
    """The live machine."""

    def run(
        self,
        argv: Sequence[str],
        timeout: float,
        env: Mapping[str, str] | None = None,
        input_text: str | None = None,
    ) -> CommandResult:
        return run_with_deadline(argv, timeout, env=env, input_text=input_text)

    def read_text(self, path: str) -> str | None:
        try:
            return Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def listdir(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(path))
        except OSError:
            return []

    def readlink(self, path: str) -> str | None:
        try:
            return os.readlink(path)
        except OSError:
            return None

    def environ(self) -> dict[str, str]:
        return dict(os.environ)

    def platform(self) -> dict[str, str]:
        uname = platform.uname()
        return {
            "system": uname.system,
            "release": uname.release,
            "version": uname.version,
            "machine": uname.machine,
            "node": uname.node,
            "python": platform.python_version(),
        }

    def psutil(self) -> Any:
        import psutil

        return psutil

    def os_release(self) -> dict[str, str]:
        import distro

        return {
            "id": distro.id(),
            "name": distro.name(),
            "version": distro.version(best=True),
            "pretty": distro.name(pretty=True),
        }


_DRAIN_S = 1.0


def _decode(data: bytes | str | None) -> str:
    if isinstance(data, bytes):  # TimeoutExpired carries raw bytes even with text=True
        return data.decode("utf-8", "replace")
    return data or ""


def run_with_deadline(
    argv: Sequence[str],
    timeout: float,
    env: Mapping[str, str] | None = None,
    input_text: str | None = None,
) -> CommandResult:
    """Run ``argv`` in its own process group and kill the whole group at the deadline.

    A new session matters: a hung CUDA call may sit in a grandchild (a DataLoader
    worker, a compiler), and killing only the direct child would leave it behind.
    """
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env) if env is not None else None,
            start_new_session=True,
            text=True,
            errors="replace",
        )
    except (FileNotFoundError, PermissionError, NotADirectoryError, OSError) as exc:
        return CommandResult(tuple(argv), None, "", str(exc), not_found=True)
    try:
        out, err = proc.communicate(input=input_text, timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        reap_group(proc)
        try:
            out, err = proc.communicate(timeout=_DRAIN_S)
        except subprocess.TimeoutExpired as exc:
            # Something we cannot kill still holds the pipes: a process in uninterruptible
            # sleep inside a wedged driver, or a grandchild that left the group. Keep what
            # was read and stop waiting: the deadline is the promise.
            out, err = _decode(exc.stdout), _decode(exc.stderr)
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        timed_out = True
    finally:
        if proc.poll() is None:
            reap_group(proc)
            # An unkillable process (uninterruptible sleep) leaves returncode None.
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=_DRAIN_S)
    return CommandResult(
        argv=tuple(argv),
        returncode=proc.returncode,
        stdout=out or "",
        stderr=err or "",
        timed_out=timed_out,
        duration_s=time.monotonic() - start,
    )

