"""A rank's stack, and the readers of ``py-spy dump`` and faulthandler output.

Both formats list the innermost frame first. ``py-spy dump`` (https://github.com/benfred/py-spy)
prints ``Thread <tid> (<state>): "<name>"`` and one ``    <function> (<file>:<line>)`` line per
frame, native frames (``--native``) as ``    <symbol> (<library>)``; faulthandler
(https://docs.python.org/3/library/faulthandler.html) prints ``Thread 0x... (most recent call
first):`` or ``Current thread 0x...`` and ``  File "<file>", line <n> in <function>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Frame:
    function: str
    file: str
    line: int | None = None
    native: bool = False

    def where(self) -> str:
        """``train_step (train.py:42)``, the form py-spy prints and users recognise."""
        short = self.file.replace("\\", "/").split("/")[-1] if self.file else "?"
        return f"{self.function} ({short}{f':{self.line}' if self.line else ''})"


@dataclass
class Thread:
    name: str
    frames: list[Frame] = field(default_factory=list)  # innermost first
    current: bool = False  # faulthandler's "Current thread": the one the dump ran on

    @property
    def python_frames(self) -> list[Frame]:
        return [f for f in self.frames if not f.native]

    @property
    def is_main(self) -> bool:
        """The main thread: named so by py-spy, or (faulthandler) running the script."""
        if self.name == "MainThread":
            return True
        outer = self.python_frames[-1:] if self.python_frames else []
        return bool(outer) and outer[0].function in ("<module>", "_run_module_as_main",
                                                      "_run_code")


@dataclass
class RankStack:
    """One process of the job: its rank (when known), and its threads or why none."""

    pid: int | None
    rank: int | None
    threads: list[Thread] = field(default_factory=list)
    source: str = ""  # "py-spy", "faulthandler", "pasted"
    error: str | None = None  # why no stack could be read
    command: str = ""
    raw: str = ""  # the dump as read, for the support bundle

    @property
    def main(self) -> Thread | None:
        named = [t for t in self.threads if t.name == "MainThread"]
        if named:
            return named[0]
        scripted = [t for t in self.threads if t.is_main]
        return scripted[0] if scripted else (self.threads[0] if self.threads else None)


_SPY_THREAD = re.compile(r'^Thread (?:0x)?[0-9a-fA-F]+ \(([^)]*)\)(?::\s*"(.*)")?\s*$')
_SPY_FRAME = re.compile(r"^\s+(?P<fn>.+?) \((?P<file>[^():]+?)(?::(?P<line>\d+))?\)\s*$")
_SPY_PROCESS = re.compile(r"^Process (\d+): (.*)$")
_FH_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+) \(most recent call first\):")
_FH_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<fn>\S.*?)\s*$')
_NATIVE_FILE = re.compile(r"\.so(\.\d+)*$|^lib|\.dylib$")


def parse_py_spy(text: str, rank: int | None = None) -> list[RankStack]:
    """Every process in one or more ``py-spy dump`` outputs (``Process N:`` starts one)."""
    found: list[RankStack] = []
    current: RankStack | None = None
    thread: Thread | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        # Only three shapes of line count, each told by its first and last characters (a
        # pasted log's other lines are most of the text, so they are skipped unparsed).
        if line.startswith("Process "):
            process = _SPY_PROCESS.match(line)
        elif line.startswith("Thread ") or (line[:1].isspace() and line.endswith(")")):
            process = None
        else:
            continue
        if process:
            current = RankStack(int(process.group(1)), rank, source="py-spy",
                                command=process.group(2))
            found.append(current)
            thread = None
            continue
        head = _SPY_THREAD.match(line)
        if head:
            if current is None:
                current = RankStack(None, rank, source="py-spy")
                found.append(current)
            thread = Thread(head.group(2) or "")
            current.threads.append(thread)
            continue
        frame = _SPY_FRAME.match(line)
        if frame and thread is not None:
            file, number = frame.group("file"), frame.group("line")
            native = number is None and bool(_NATIVE_FILE.search(file))
            thread.frames.append(Frame(frame.group("fn"), file,
                                       int(number) if number else None, native))
    return [p for p in found if p.threads]


def parse_faulthandler(text: str, rank: int | None = None, pid: int | None = None
                       ) -> RankStack | None:
    """One process's faulthandler dump (every thread), None when the text holds none."""
    stack = RankStack(pid, rank, source="faulthandler")
    thread: Thread | None = None
    for raw in text.splitlines():
        head = _FH_THREAD.match(raw.strip())
        if head:
            thread = Thread(head.group(2), current=head.group(1) == "Current thread")
            stack.threads.append(thread)
            continue
        frame = _FH_FRAME.match(raw)
        if frame and thread is not None:
            thread.frames.append(Frame(frame.group("fn"), frame.group("file"),
                                       int(frame.group("line"))))
    stack.threads = [t for t in stack.threads if t.frames]
    return stack if stack.threads else None


def last_faulthandler_dump(text: str) -> str:
    """The last complete dump in a file a rank appended several to (one per SIGUSR1)."""
    starts = [m.start() for m in re.finditer(
        r"^(?:Current thread|Thread) 0x[0-9a-fA-F]+ \(most recent call first\):", text, re.M)]
    if not starts:
        return ""
    # Threads of one dump follow each other; a new dump starts after a blank line gap
    # with its first thread again. Group by the gaps between dumps: faulthandler writes
    # all threads of one dump at once, so the last dump is the tail after the last run of
    # thread headers that begins a new block.
    blocks = re.split(r"\n(?=\n*(?:Current thread|Thread) 0x)", text)
    dumps: list[list[str]] = []
    seen: set[str] = set()
    for block in blocks:
        header = re.search(r"(?:Current thread|Thread) (0x[0-9a-fA-F]+)", block)
        ident = header.group(1) if header else ""
        if not dumps or ident in seen:
            dumps.append([])
            seen = set()
        seen.add(ident)
        dumps[-1].append(block)
    return "\n".join(dumps[-1]) if dumps else ""


# What starts a stack dump in a pasted log: faulthandler's thread header, py-spy's
# process line (its thread lines carry a state in parentheses and a quoted name).
STACK_MARKERS = (b"(most recent call first):", b"\nPython v", b"): \"MainThread\"")
MAX_STACK_BYTES = 4 << 20


class StackText:
    """The stack dumps in a log read chunk by chunk: kept from the first marker on.

    A log without a dump costs a few ``bytes.find`` per chunk; one with dumps keeps at most
    ``MAX_STACK_BYTES`` of text from the first dump on, parsed once at the end.
    """

    def __init__(self) -> None:
        self.kept = bytearray()
        self.started = False

    def feed_chunk(self, chunk: bytes) -> None:
        if not self.started:
            at = min((i for i in (chunk.find(m) for m in STACK_MARKERS) if i != -1),
                     default=-1)
            if at == -1:
                return
            self.started = True
            start = chunk.rfind(b"\n", 0, max(0, chunk.rfind(b"\n", 0, at))) + 1
            chunk = chunk[start:]
        room = MAX_STACK_BYTES - len(self.kept)
        if room > 0:
            self.kept += chunk[:room]

    def stacks(self) -> list[RankStack]:
        """Every process dumped in the log: py-spy's ``Process`` blocks, else faulthandler
        dumps separated by other output, each numbered as a rank in the order pasted unless
        a ``rank N`` line just before it says otherwise."""
        if not self.kept:
            return []
        text = self.kept.decode("utf-8", "replace").replace("\r\n", "\n")
        spied = parse_py_spy(text)
        if spied:
            for index, stack in enumerate(spied):
                stack.rank, stack.source = _rank_before(text, stack.pid, index), "pasted"
            return spied
        found = []
        for index, block in enumerate(_faulthandler_blocks(text)):
            dumped = parse_faulthandler(block, index)
            if dumped is not None:
                dumped.source = "pasted"
                found.append(dumped)
        return found


_RANK_LINE = re.compile(r"\brank\s*[:=]?\s*(\d+)\b", re.I)


def _rank_before(text: str, pid: int | None, index: int) -> int:
    """The rank a pasted py-spy dump belongs to: ``RANK=N``/``rank N`` on the line before
    its ``Process`` line when the paste says so, else its place in the paste."""
    if pid is not None:
        at = text.find(f"Process {pid}:")
        before = text[:at].rstrip().splitlines()[-1:] if at > 0 else []
        found = _RANK_LINE.search(before[0]) if before else None
        if found:
            return int(found.group(1))
    return index


def _faulthandler_blocks(text: str) -> list[str]:
    """One text per process: a dump starts at a thread header that follows other output, or
    that names a thread the current dump already listed (another process's dump)."""
    blocks: list[list[str]] = []
    seen: set[str] = set()
    in_dump = False
    for line in text.splitlines():
        header = _FH_THREAD.match(line.strip())
        if header:
            if not in_dump or header.group(2) in seen:
                blocks.append([])
                seen = set()
            seen.add(header.group(2))
            in_dump = True
        elif line.strip() and not _FH_FRAME.match(line):
            in_dump = False
        if in_dump:
            blocks[-1].append(line)
    return ["\n".join(b) for b in blocks]


def keep_stacks(stacks: list[RankStack], folder: Path) -> None:
    """Each rank's stack as ``stack-rank<R>.txt``, headed by a ``rank R`` line right before
    py-spy's ``Process`` line, so ``diagnose`` numbers it as that rank when read back."""
    for stack in stacks:
        if not stack.raw or stack.rank is None:
            continue
        head = (f"rank {stack.rank} (pid {stack.pid}): read before the job was stopped "
                f"({stack.source})\n")
        try:
            (folder / f"stack-rank{stack.rank}.txt").write_text(head + stack.raw,
                                                                encoding="utf-8")
        except OSError:
            continue
