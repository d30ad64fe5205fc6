"""Run the user's command, pass its output through, keep a log, and end it on a deadline.

The command runs unchanged, in a session of its own (``start_new_session``), with its
stdout and stderr joined into one pipe. A reader thread copies every chunk to the
terminal as it arrives (so progress bars and tracebacks look as they would without the
doctor) and to the log file, and follows the lines: the last one, the last one of each
rank (read from the launchers' prefixes), and the first that matches ``--until``.

Whatever ends the run (the command exiting, ``--until``, a deadline, SIGINT/SIGTERM/SIGHUP
to the doctor), everything the command started is ended before ``supervise`` returns:
torchrun starts each rank in a session of its own, so the process group alone is not
enough. The ``Reaper`` of the smoke job finds the rest through the descendants it
remembered and a tag: here an environment variable, because the command line is the
user's and is never changed, while the environment is inherited by every descendant.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, Optional

import psutil

from ddp_doctor.diagnose.rank_prefixes import split_rank
from ddp_doctor.job.status_line import REDRAW_EVERY_S, StatusLine
from ddp_doctor.smoke.monitor import Reaper
from ddp_doctor.smoke.run import SmokeInterrupted, stop_signals_raise

TAG_VARIABLE = "DDP_DOCTOR_RUN_TAG"
"""Set in the command's environment to a value unique to the run; every process whose
environment carries it belongs to the run."""
NCCL_DEBUG_ENV = {"NCCL_DEBUG": "INFO", "TORCH_DISTRIBUTED_DEBUG": "DETAIL"}
GRACE_S = 3.0  # between SIGTERM and SIGKILL: time for ranks to flush and exit cleanly
POLL_S = 0.1
_LINE_CAP = 400  # the longest line kept as evidence


@dataclass(frozen=True)
class JobOptions:
    """What ``run`` was asked to do; the deadlines are ``None`` when not given."""

    command: tuple[str, ...]
    timeout_s: Optional[float] = None
    stall_s: Optional[float] = None
    until: Optional[re.Pattern[str]] = None
    nccl_debug: bool = False
    grace_s: float = GRACE_S

    def environment(self, tag: str, base: Optional[Mapping[str, str]] = None
                    ) -> dict[str, str]:
        """The command's environment: the doctor's own, the tag and --nccl-debug's."""
        env = dict(os.environ if base is None else base)
        if self.nccl_debug:
            env.update(NCCL_DEBUG_ENV)
        env[TAG_VARIABLE] = tag
        return env


@dataclass
class JobOutcome:
    """How the command ended, and what its output showed last."""

    returncode: Optional[int]
    stopped_by: Optional[str]  # None (it exited) | "until" | "stall" | "timeout"
    wall_s: float
    log_path: str
    tag: str
    silent_s: float = 0.0  # the longest silence seen, up to the end
    until_line: Optional[str] = None
    last_line: Optional[str] = None
    last_by_rank: dict[str, str] = field(default_factory=dict)
    cleanup_s: float = 0.0  # from the decision to stop to nothing of the run left
    left_running: int = 0  # processes of the run still alive after the cleanup (never > 0)

    @property
    def succeeded(self) -> bool:
        return self.stopped_by == "until" or (self.stopped_by is None and self.returncode == 0)

    @property
    def signal_name(self) -> Optional[str]:
        """The signal that killed the command (a negative return code), if one did."""
        if self.returncode is None or self.returncode >= 0:
            return None
        with contextlib.suppress(ValueError):
            return signal.Signals(-self.returncode).name
        return f"signal {-self.returncode}"


class JobReaper(Reaper):
    """The smoke job's Reaper, finding the run's processes by the tag in their environment."""

    def tagged(self) -> list[psutil.Process]:
        return tagged_processes(self.tag)


def tagged_processes(tag: str) -> list[psutil.Process]:
    """Every live process (but this one) whose environment carries the run's tag."""
    found = []
    for p in psutil.process_iter():
        if p.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error, OSError):
            if p.environ().get(TAG_VARIABLE) == tag:
                found.append(p)
    return list({p.pid: p for p in found}.values())


class _Output:
    """The reader's side: copies chunks through, keeps the log, follows the lines."""

    def __init__(self, sink: IO[bytes], log: IO[bytes], until: Optional[re.Pattern[str]],
                 status: Optional[StatusLine] = None) -> None:
        self.sink, self.log, self.until, self.status = sink, log, until, status
        self.lock = threading.Lock()
        self.last_output = time.monotonic()
        self.longest_silence = 0.0
        self.partial = b""
        self.last_line: Optional[str] = None
        self.last_by_rank: dict[str, str] = {}
        self.until_line: Optional[str] = None
        self.matched = threading.Event()

    def feed(self, chunk: bytes) -> None:
        now = time.monotonic()
        with self.lock:
            self.longest_silence = max(self.longest_silence, now - self.last_output)
            self.last_output = now
        if self.status is not None:
            self.status.around_output(self._show, chunk)
        else:
            self._show(chunk)
        self.log.write(chunk)
        self.log.flush()
        lines = (self.partial + chunk).split(b"\n")
        self.partial = lines.pop()
        for raw in lines:
            self._line(raw)

    def _show(self, chunk: bytes) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.sink.write(chunk)
            self.sink.flush()

    def tick(self, elapsed: float) -> None:
        """Redraw the status line (when there is one) with the time and the last line."""
        if self.status is not None:
            last_line, _ = self.seen()
            self.status.draw(elapsed, self.silence(), last_line)

    def finish(self) -> None:
        if self.partial:
            self._line(self.partial)
            self.partial = b""

    def _line(self, raw: bytes) -> None:
        text = raw.decode("utf-8", "replace").rstrip("\r").split("\r")[-1]
        if not text.strip():
            return
        text = text[:_LINE_CAP]
        who, _rest = split_rank(text)
        with self.lock:
            self.last_line = text
            if who is not None and who.startswith("rank "):
                self.last_by_rank[who] = text
        if self.until is not None and self.until_line is None and self.until.search(text):
            self.until_line = text
            self.matched.set()

    def seen(self) -> tuple[Optional[str], dict[str, str]]:
        """The last line, and each rank's, as they are now: when a deadline fires, what the
        job printed before it (not the launcher's own words while it is stopped)."""
        with self.lock:
            return self.last_line, dict(self.last_by_rank)

    def silence(self) -> float:
        with self.lock:
            return time.monotonic() - self.last_output


def _pump(stream: IO[bytes], output: _Output) -> None:
    fd = stream.fileno()
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        output.feed(chunk)
    output.finish()


def supervise(options: JobOptions, log_path: str, sink: IO[bytes],
              env: Optional[Mapping[str, str]] = None,
              status: Optional[StatusLine] = None) -> JobOutcome:
    """Run the command to its end (or a deadline) with its output copied to ``sink`` and,
    on a terminal, ``status`` drawn below it.

    Raises OSError when the command cannot be started (not found, not executable), and
    ``SmokeInterrupted`` (a SystemExit) when the doctor is told to stop; in both cases
    nothing of the run is left running.
    """
    tag = uuid.uuid4().hex
    started = time.monotonic()
    with open(log_path, "wb") as log, stop_signals_raise():
        output = _Output(sink, log, options.until, status)
        proc: Optional[subprocess.Popen[bytes]] = None
        reaper: Optional[JobReaper] = None
        reader: Optional[threading.Thread] = None
        stopped_by: Optional[str] = None
        stop_at: Optional[float] = None
        before_stop: Optional[tuple[Optional[str], dict[str, str]]] = None
        try:
            proc = subprocess.Popen(list(options.command), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    env=options.environment(tag, env),
                                    start_new_session=True)
            reaper = JobReaper(proc, tag)
            assert proc.stdout is not None
            reader = threading.Thread(target=_pump, args=(proc.stdout, output),
                                      name="ddp-doctor-run-output", daemon=True)
            reader.start()
            stopped_by = _watch(proc, reaper, output, options, started)
            stop_at = time.monotonic()
            if stopped_by in ("stall", "timeout"):
                before_stop = output.seen()
        except SmokeInterrupted:
            stop_at = time.monotonic()
            raise
        finally:
            if status is not None:
                status.close()
            if proc is not None:
                (reaper or JobReaper(proc, tag)).stop(options.grace_s)
                if reader is not None:
                    reader.join(timeout=5.0)
                if proc.stdout is not None:
                    proc.stdout.close()
    cleanup_s = time.monotonic() - (stop_at or time.monotonic())
    left = len(tagged_processes(tag))
    last_line, last_by_rank = before_stop or output.seen()
    return JobOutcome(
        returncode=proc.returncode, stopped_by=stopped_by,
        wall_s=time.monotonic() - started, log_path=log_path, tag=tag,
        silent_s=max(output.longest_silence, output.silence()) if stopped_by == "stall"
        else output.longest_silence,
        until_line=output.until_line, last_line=last_line,
        last_by_rank=dict(sorted(last_by_rank.items(), key=_rank_order)),
        cleanup_s=cleanup_s, left_running=left)


def _rank_order(item: tuple[str, Any]) -> tuple[int, str]:
    digits = item[0].rsplit(" ", 1)[-1]
    return (int(digits) if digits.isdigit() else 1 << 30, item[0])


def _watch(proc: subprocess.Popen[bytes], reaper: JobReaper, output: _Output,
           options: JobOptions, started: float) -> Optional[str]:
    """Wait for the first end: the command exits, --until matches, or a deadline passes."""
    remembered = drawn = 0.0
    while True:
        if output.matched.is_set():
            return "until"
        if proc.poll() is not None:
            # Its last words may still be in the pipe: an --until line among them counts.
            return "until" if output.matched.wait(0.2) else None
        now = time.monotonic()
        if options.timeout_s is not None and now - started >= options.timeout_s:
            return "timeout"
        if options.stall_s is not None and output.silence() >= options.stall_s:
            return "stall"
        if now - remembered >= 0.5:  # a SIGKILLed launcher orphans what it started
            reaper.remember()
            remembered = now
        if now - drawn >= REDRAW_EVERY_S:
            output.tick(now - started)
            drawn = now
        output.matched.wait(POLL_S)


def command_text(command: Sequence[str]) -> str:
    """The command as a shell would show it (for evidence and messages)."""
    import shlex

    return " ".join(shlex.quote(part) for part in command)
