"""Run the user's command, pass its output through, keep a log, and end it on a deadline.

The command runs unchanged, in a session of its own (``start_new_session``), with its
stdout and stderr joined into one pipe. A reader thread copies every chunk to the
terminal as it arrives (so progress bars and tracebacks look as they would without the
doctor) and to the log file, and follows the lines: the last one, the last one of each
rank (read from the launchers' prefixes), and the first that matches ``--until``.

Whatever ends the run (the command exiting, ``--until``, a deadline, SIGINT/SIGTERM/SIGHUP
to the doctor), everything the command started is ended before ``supervise`` returns:
torchrun starts each rank in a session of its own, so the process group alone is not
enough. ``ddp_doctor.process`` finds the rest through the descendants it remembered and
the run's tag, an environment variable: the command line is the user's and is never
changed, while the environment is inherited by every descendant.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Optional

import psutil

from ddp_doctor.diagnose.rank_prefixes import split_rank
from ddp_doctor.forensics.capture import capture_stacks, missing_ranks
from ddp_doctor.forensics.flight import RankRecord, flight_environment, request_dumps
from ddp_doctor.forensics.stacks import RankStack
from ddp_doctor.job.status_line import REDRAW_EVERY_S, StatusLine
from ddp_doctor.process.signals import Interrupted, stop_signals_raise
from ddp_doctor.process.tag import new_tag, survivors
from ddp_doctor.process.tree import GRACE_S, ProcessTree

NCCL_DEBUG_ENV = {"NCCL_DEBUG": "INFO", "TORCH_DISTRIBUTED_DEBUG": "DETAIL"}
POLL_S = 0.1
_LINE_CAP = 400  # the longest line kept as evidence
CUDA_LIBRARY = b"/libcuda.so"  # the driver's user-space library, mapped by cuInit


@dataclass(frozen=True)
class JobOptions:
    """What ``run`` was asked to do; the deadlines are ``None`` when not given."""

    command: tuple[str, ...]
    timeout_s: Optional[float] = None
    stall_s: Optional[float] = None
    until: Optional[re.Pattern[str]] = None
    nccl_debug: bool = False
    grace_s: float = GRACE_S
    flight_dir: Optional[str] = None  # --flight-recorder: where the ranks' dumps go

    def environment(self, base: Optional[Mapping[str, str]] = None) -> dict[str, str]:
        """The command's environment: the doctor's own and --nccl-debug's (the run's tag,
        ``process.tag.TAG_VARIABLE``, is added by ``ProcessTree.start``)."""
        env = dict(os.environ if base is None else base)
        if self.nccl_debug:
            env.update(NCCL_DEBUG_ENV)
        if self.flight_dir is not None:
            env.update(flight_environment(self.flight_dir, env))
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
    cuda_loaded: Optional[str] = None  # a process of the run that had the CUDA driver loaded
    # A run stopped as hung: each rank's stack, read before it was stopped, and the ranks of
    # the world size whose processes had already ended (forensics/).
    stacks: list[RankStack] = field(default_factory=list)
    gone: list[int] = field(default_factory=list)
    flight: list[RankRecord] = field(default_factory=list)  # --flight-recorder's dumps
    capture_s: float = 0.0  # reading the stacks and dumps, before anything was stopped
    fr_analysis: Optional[str] = None  # torch's analyser on the dumps (forensics/)

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


def cuda_user(known: dict[int, psutil.Process]) -> Optional[str]:
    """The first process of the run (pid -> process) that has the CUDA driver library
    mapped, as "pid N (name)"; None when none has.

    ``libcuda.so`` is loaded by the first CUDA call (torch loads it lazily), so a job that
    never initialised CUDA never maps it: the evidence that GPU findings about this
    machine concern the job, or do not.
    """
    for pid, proc in list(known.items()):
        if _maps_cuda(pid):
            with contextlib.suppress(psutil.Error):
                return f"pid {pid} ({proc.name()})"
            return f"pid {pid}"
    return None


def _maps_cuda(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/maps", "rb") as maps:
            return any(CUDA_LIBRARY in line for line in maps)
    except OSError:
        return False


# A line that starts with a rank's marker ("rank 0 ...", "[rank0]: ...", "[default0]:")
# and holds the same marker for another rank glued on: two ranks writing unbuffered to one
# pipe, each line's text and its newline in separate writes ("rank 0 step 2rank 1 step 2").
_RANK_HEAD = re.compile(r"^(\[?(?:rank|default|trainer|worker)[ :]?)\d{1,5}\b", re.IGNORECASE)
# A bare "rank 3 ..." or "rank 3: ..." at the start of a line names the rank that printed it.
_BARE_RANK = re.compile(r"^rank[ _]?(\d{1,5})\b", re.IGNORECASE)


def apart(text: str) -> list[str]:
    """A line split where another rank's marker is glued onto it (see ``_RANK_HEAD``)."""
    head = _RANK_HEAD.match(text)
    if head is None:
        return [text]
    glued = re.compile(rf"(?<=\S)(?={re.escape(head.group(1))}\d)", re.IGNORECASE)
    return [part for part in glued.split(text) if part.strip()]


def rank_of(text: str) -> Optional[str]:
    """The rank that printed a line: a launcher's prefix, or a bare "rank N" leading it."""
    who, _rest = split_rank(text)
    if who is not None and who.startswith("rank "):
        return who
    bare = _BARE_RANK.match(text)
    return f"rank {int(bare.group(1))}" if bare else None


class _Output:
    """The reader's side: copies chunks through, keeps the log, follows the lines.

    Stdout and stderr arrive on pipes of their own, each read by its own thread: each is
    shown on its own sink, and each keeps its own unfinished line, so a line of one is
    never glued to a line of the other. The log holds both, in the order they arrived.
    """

    def __init__(self, sinks: tuple[IO[bytes], IO[bytes]], log: IO[bytes],
                 until: Optional[re.Pattern[str]], status: Optional[StatusLine] = None
                 ) -> None:
        self.sinks, self.log, self.until, self.status = sinks, log, until, status
        self.lock = threading.Lock()
        self.feeding = threading.Lock()  # one chunk at a time through the log and lines
        self.last_output = time.monotonic()
        self.longest_silence = 0.0
        self.partial = [b"", b""]
        self.last_line: Optional[str] = None
        self.last_by_rank: dict[str, str] = {}
        self.until_line: Optional[str] = None
        self.matched = threading.Event()

    def feed(self, chunk: bytes, stream: int = 0) -> None:
        now = time.monotonic()
        with self.lock:
            self.longest_silence = max(self.longest_silence, now - self.last_output)
            self.last_output = now
        sink = self.sinks[stream]

        def show(data: bytes) -> None:
            with contextlib.suppress(OSError, ValueError):
                sink.write(data)
                sink.flush()

        with self.feeding:
            if self.status is not None:
                self.status.around_output(show, chunk)
            else:
                show(chunk)
            self.log.write(chunk)
            self.log.flush()
            lines = (self.partial[stream] + chunk).split(b"\n")
            self.partial[stream] = lines.pop()
            for raw in lines:
                self._line(raw)

    def tick(self, elapsed: float) -> None:
        """Redraw the status line (when there is one) with the time and the last line."""
        if self.status is not None:
            last_line, _ = self.seen()
            self.status.draw(elapsed, self.silence(), last_line)

    def finish(self, stream: int = 0) -> None:
        with self.feeding:
            if self.partial[stream]:
                self._line(self.partial[stream])
                self.partial[stream] = b""

    def _line(self, raw: bytes) -> None:
        text = raw.decode("utf-8", "replace").rstrip("\r").split("\r")[-1]
        if not text.strip():
            return
        for part in apart(text[:_LINE_CAP]):
            who = rank_of(part)
            with self.lock:
                self.last_line = part
                if who is not None:
                    self.last_by_rank[who] = part
            if self.until is not None and self.until_line is None and self.until.search(part):
                self.until_line = part
                self.matched.set()

    def seen(self) -> tuple[Optional[str], dict[str, str]]:
        """The last line, and each rank's, as they are now: when a deadline fires, what the
        job printed before it (not the launcher's own words while it is stopped)."""
        with self.lock:
            return self.last_line, dict(self.last_by_rank)

    def silence(self) -> float:
        with self.lock:
            return time.monotonic() - self.last_output


def _pump(stream: IO[bytes], output: _Output, which: int) -> None:
    fd = stream.fileno()
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        output.feed(chunk, which)
    output.finish(which)


def supervise(options: JobOptions, log_path: str, sink: IO[bytes],
              env: Optional[Mapping[str, str]] = None,
              status: Optional[StatusLine] = None,
              err_sink: Optional[IO[bytes]] = None) -> JobOutcome:
    """Run the command to its end (or a deadline) with its stdout copied to ``sink``, its
    stderr to ``err_sink`` (``sink`` too when None: a report is on stdout) and, on a
    terminal, ``status`` drawn below it.

    Raises OSError when the command cannot be started (not found, not executable), and
    ``Interrupted`` (a SystemExit) when the doctor is told to stop; in both cases
    nothing of the run is left running. The stop signal is forwarded to the command (a
    Ctrl-C reaches it as SIGINT), and a second one ends it with SIGKILL at once.
    """
    tag = new_tag("ddp-doctor-run")
    started = time.monotonic()
    with open(log_path, "wb") as log, stop_signals_raise() as request:
        output = _Output((sink, err_sink or sink), log, options.until, status)
        tree: Optional[ProcessTree] = None
        cuda: list[str] = []
        readers: list[threading.Thread] = []
        stopped_by: Optional[str] = None
        stop_at: Optional[float] = None
        before_stop: Optional[tuple[Optional[str], dict[str, str]]] = None
        stacks: list[RankStack] = []
        gone: list[int] = []
        flight: list[RankRecord] = []
        captured = 0.0
        try:
            tree = ProcessTree.start(options.command, tag, options.environment(env),
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
            proc = tree.proc
            for which, pipe in enumerate((proc.stdout, proc.stderr)):
                assert pipe is not None
                readers.append(threading.Thread(
                    target=_pump, args=(pipe, output, which), daemon=True,
                    name=f"ddp-doctor-run-{('stdout', 'stderr')[which]}"))
                readers[-1].start()
            stopped_by = _watch(tree, output, options, started, cuda)
            stop_at = time.monotonic()
            if stopped_by in ("stall", "timeout"):
                before_stop = output.seen()
                # Where each rank waits, read while the job still hangs (forensics/).
                tree.remember()
                alive = tree.alive()
                stacks = capture_stacks(alive)
                gone = missing_ranks(stacks, alive)
                if options.flight_dir is not None:
                    flight = request_dumps(Path(options.flight_dir), len(stacks))
                captured = time.monotonic() - stop_at
        except Interrupted:
            stop_at = time.monotonic()
            raise
        finally:
            if status is not None:
                status.close()
            if tree is not None:
                tree.stop(options.grace_s, request)
                for reader in readers:
                    reader.join(timeout=5.0)
                for pipe in (tree.proc.stdout, tree.proc.stderr):
                    if pipe is not None:
                        pipe.close()
    assert tree is not None  # Popen raised OSError otherwise, before this line
    cleanup_s = time.monotonic() - (stop_at or time.monotonic())
    left = survivors(tag)  # the proof: nothing of the run is alive
    last_line, last_by_rank = before_stop or output.seen()
    return JobOutcome(
        returncode=tree.proc.returncode, stopped_by=stopped_by,
        wall_s=time.monotonic() - started, log_path=log_path, tag=tag,
        silent_s=max(output.longest_silence, output.silence()) if stopped_by == "stall"
        else output.longest_silence,
        until_line=output.until_line, last_line=last_line,
        last_by_rank=dict(sorted(last_by_rank.items(), key=_rank_order)),
        cleanup_s=cleanup_s, left_running=len(left), stacks=stacks, gone=gone, flight=flight,
        capture_s=captured,
        cuda_loaded=cuda[0] if cuda else None)


def _rank_order(item: tuple[str, Any]) -> tuple[int, str]:
    digits = item[0].rsplit(" ", 1)[-1]
    return (int(digits) if digits.isdigit() else 1 << 30, item[0])


def _watch(tree: ProcessTree, output: _Output, options: JobOptions, started: float,
           cuda: list[str]) -> Optional[str]:
    """Wait for the first end: the command exits, --until matches, or a deadline passes.

    On the way, notes in ``cuda`` the first process of the run seen with CUDA loaded.
    """
    proc = tree.proc
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
            tree.remember()
            if not cuda:
                cuda.extend(filter(None, [cuda_user(tree.known)]))
            remembered = now
        if now - drawn >= REDRAW_EVERY_S:
            output.tick(now - started)
            drawn = now
        output.matched.wait(POLL_S)


def command_text(command: Sequence[str]) -> str:
    """The command as a shell would show it (for evidence and messages)."""
    import shlex

    return " ".join(shlex.quote(part) for part in command)
