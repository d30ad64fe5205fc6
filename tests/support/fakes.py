"""Fakes of the outside world for probe tests: the ``Env`` seam and psutil.

``FakeEnv`` serves files, directory listings, symlinks and environment variables from
dictionaries and answers only the commands it was given; any other command fails the
test, so no probe test silently depends on the machine it runs on.
"""

from __future__ import annotations

import posixpath
from collections import namedtuple
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable, Union

from ddp_doctor.facts.seam import CommandResult

CommandAnswer = Union[CommandResult, Callable[[Sequence[str]], CommandResult]]


class UnexpectedCommand(AssertionError):
    pass


def ok(stdout: str = "", stderr: str = "", argv: Sequence[str] = ("fake",)) -> CommandResult:
    return CommandResult(tuple(argv), 0, stdout, stderr)


_Mem = namedtuple("_Mem", "total available used free percent")
_Swap = namedtuple("_Swap", "total used free percent")
_Disk = namedtuple("_Disk", "total used free percent")
Conn = namedtuple("Conn", "fd family type laddr raddr status pid")


def listening(port: int, pid: int | None = None) -> Conn:
    """A listening TCP socket as psutil.net_connections reports it."""
    return Conn(3, 2, 1, ("0.0.0.0", port), (), "LISTEN", pid)


@dataclass
class FakePsutil:
    """The slice of psutil that probes use, with values from a recorded machine."""

    memory_total: int = 64 * 1024**3
    memory_available: int = 60 * 1024**3
    swap_total: int = 0
    cpu_logical: int = 16
    cpu_physical: int | None = 8
    affinity: int | None = None
    nofile: tuple[int, int] = (1024, 1048576)
    disks: dict[str, tuple[int, int]] = field(default_factory=dict)  # path -> (total, free)
    # The process table: pid -> (name, username); username None when access is denied.
    processes: dict[int, tuple[str, str | None]] = field(default_factory=dict)
    connections: list[Any] = field(default_factory=list)  # what net_connections returns
    process_names: dict[int, str] = field(default_factory=dict)  # pid -> name (no user)

    def __post_init__(self) -> None:
        for pid, name in self.process_names.items():
            self.processes.setdefault(pid, (name, None))

    RLIMIT_NOFILE = 7

    class NoSuchProcess(Exception):
        pass

    class AccessDenied(Exception):
        pass

    def virtual_memory(self) -> Any:
        used = self.memory_total - self.memory_available
        return _Mem(self.memory_total, self.memory_available, used, self.memory_available, 0.0)

    def swap_memory(self) -> Any:
        return _Swap(self.swap_total, 0, self.swap_total, 0.0)

    def cpu_count(self, logical: bool = True) -> int | None:
        return self.cpu_logical if logical else self.cpu_physical

    def disk_usage(self, path: str) -> Any:
        for prefix in sorted(self.disks, key=len, reverse=True):
            if path == prefix or path.startswith(prefix.rstrip("/") + "/"):
                total, free = self.disks[prefix]
                return _Disk(total, total - free, free, 0.0)
        raise FileNotFoundError(path)

    def process_iter(self, attrs: list[str] | None = None) -> Any:
        for pid, (name, username) in sorted(self.processes.items()):
            info = {"pid": pid, "name": name, "username": username}
            yield SimpleNamespace(pid=pid, info={k: info[k] for k in (attrs or info)})

    def net_connections(self, kind: str = "inet") -> list[Any]:
        assert kind == "tcp"
        return list(self.connections)

    def Process(self, pid: int | None = None) -> Any:  # mirrors psutil's API
        fake = self
        if pid is not None:
            if pid not in self.processes:
                raise FakePsutil.NoSuchProcess(pid)
            name, username = self.processes[pid]

            def _username() -> str:
                if username is None:
                    raise FakePsutil.AccessDenied(pid)
                return username

            return SimpleNamespace(pid=pid, name=lambda: name, username=_username)

        class _Proc:
            def rlimit(self, which: int) -> tuple[int, int]:
                return fake.nofile

            def cpu_affinity(self) -> list[int]:
                return list(range(fake.affinity or fake.cpu_logical))

        return _Proc()


@dataclass
class FakeEnv:
    files: dict[str, str] = field(default_factory=dict)
    dirs: set[str] = field(default_factory=set)
    links: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    plat: dict[str, str] = field(default_factory=lambda: {
        "system": "Linux", "release": "6.8.0-45-generic", "version": "#45-Ubuntu SMP",
        "machine": "x86_64", "node": "gpu-node-01", "python": "3.11.7"})
    release: dict[str, str] = field(default_factory=lambda: {
        "id": "ubuntu", "name": "Ubuntu", "version": "22.04",
        "pretty": "Ubuntu 22.04.4 LTS"})
    fake_psutil: FakePsutil = field(default_factory=FakePsutil)
    # (argv prefix, answer): the first entry whose prefix matches answers the command.
    commands: list[tuple[tuple[str, ...], CommandAnswer]] = field(default_factory=list)
    calls: list[tuple[str, ...]] = field(default_factory=list)

    def run(self, argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None,
            input_text: str | None = None) -> CommandResult:
        assert timeout > 0, "every command needs a deadline"
        self.calls.append(tuple(argv))
        for prefix, answer in self.commands:
            if tuple(argv[: len(prefix)]) == prefix:
                return answer(argv) if callable(answer) else answer
        raise UnexpectedCommand(f"FakeEnv was not told about command {list(argv)[:3]}")

    def read_text(self, path: str) -> str | None:
        return self.files.get(path)

    def exists(self, path: str) -> bool:
        return path in self.files or path in self.links or path in self._all_dirs()

    def _all_dirs(self) -> set[str]:
        found = set(self.dirs)
        for path in [*self.files, *self.links, *self.dirs]:
            parent = posixpath.dirname(path)
            while parent and parent != "/":
                found.add(parent)
                parent = posixpath.dirname(parent)
        return found

    def listdir(self, path: str) -> list[str]:
        path = path.rstrip("/")
        names = {p[len(path) + 1:].split("/")[0]
                 for p in [*self.files, *self.links, *self.dirs]
                 if p.startswith(path + "/")}
        return sorted(n for n in names if n)

    def readlink(self, path: str) -> str | None:
        return self.links.get(path)

    def environ(self) -> dict[str, str]:
        return dict(self.env)

    def platform(self) -> dict[str, str]:
        return dict(self.plat)

    def psutil(self) -> Any:
        return self.fake_psutil

    def os_release(self) -> dict[str, str]:
        return dict(self.release)
