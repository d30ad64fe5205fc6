"""The one-line status under a supervised command's output, on a terminal.

A user watching ``ddp-doctor run`` wants to know, while nothing moves, how long the job has
run, how long it has been silent (a hung DDP job goes silent) and what it printed last. The
status line says that, redrawn in place on stderr below the command's own output.

The command's output must look exactly as it would without the doctor, progress bars
redrawn with carriage returns included, so its bytes are never re-buffered or re-wrapped
(rich's ``Live`` line-buffers what passes through it, which would hold a ``\\r`` bar back).
Instead, when both share a terminal, the status is erased before each chunk of output is
passed through and drawn again only when the output stands at the start of a line; while a
progress bar is being redrawn (the output stops mid-line) the bar is left alone, and the
status takes a fresh line only after the output has been silent for a while, which is when
the timer matters. The log file never sees the status.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from typing import IO, Optional

from rich.console import Console
from rich.text import Text

from ddp_doctor.diagnose.normalize import clean

ERASE = "\r\x1b[2K"
TAKE_LINE_AFTER_S = 5.0  # mid-line silence after which the status takes a line of its own
REDRAW_EVERY_S = 0.25
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def clock(seconds: float) -> str:
    """Seconds as m:ss or h:mm:ss, as a stopwatch shows them."""
    whole = int(max(seconds, 0.0))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def status_text(elapsed: float, silence: float, last_line: Optional[str],
                stall_s: Optional[float], timeout_s: Optional[float], width: int) -> Text:
    """The status as styled text that fits ``width`` cells: run time (of the timeout), the
    silence (of the stall deadline, yellow past half, red past 80%), the last line."""
    text = Text()
    text.append("ddp-doctor run ", style="bold")
    text.append(clock(elapsed), style="bold")
    if timeout_s is not None:
        text.append(f" of {clock(timeout_s)}", style="dim")
    text.append("  silent ", style="dim")
    style = ""
    if stall_s is not None:
        share = silence / stall_s
        style = "bold red" if share >= 0.8 else "yellow" if share >= 0.5 else ""
    text.append(clock(silence), style=style)
    if stall_s is not None:
        text.append(f" of {clock(stall_s)}", style="dim")
    if last_line:
        shown = _CONTROL.sub(" ", clean(last_line)).strip()
        if shown:
            text.append("  last: ", style="dim")
            text.append(shown)
    text.truncate(max(width - 1, 10), overflow="ellipsis")
    return text


def wanted(console: Console, disabled: bool) -> bool:
    """A status line only where a person watches: stderr on a real terminal, not dumb."""
    return (not disabled and console.is_terminal and not console.is_dumb_terminal
            and os.environ.get("TERM", "") != "dumb")


class StatusLine:
    """Draws and erases the status on stderr, in step with the command's output.

    ``shares_terminal`` is true when the output goes to the same terminal (the usual case);
    then a chunk of output first erases the status. Calls come from the reader thread (the
    output) and the watching thread (the clock), so every write holds one lock.
    """

    def __init__(self, console: Console, shares_terminal: bool,
                 stall_s: Optional[float] = None, timeout_s: Optional[float] = None) -> None:
        self.console = console
        self.shares_terminal = shares_terminal
        self.stall_s, self.timeout_s = stall_s, timeout_s
        self.lock = threading.Lock()
        self.shown = False
        self.at_line_start = True
        self.closed = False
        self.drawn = ""

    @property
    def stream(self) -> IO[str]:
        return self.console.file

    def around_output(self, write: Callable[[bytes], None], chunk: bytes) -> None:
        """Pass a chunk of the command's output through with the status out of its way."""
        with self.lock:
            if self.shares_terminal:
                self._erase()
            write(chunk)
            if chunk:
                self.at_line_start = chunk.endswith(b"\n")

    def draw(self, elapsed: float, silence: float, last_line: Optional[str]) -> None:
        """Redraw the status if the output allows it (see the module's docstring)."""
        with self.lock:
            if self.closed:
                return
            if self.shares_terminal and not self.at_line_start:
                if silence < TAKE_LINE_AFTER_S:
                    return
                self.stream.write("\n")  # the bar keeps its line; the status takes the next
                self.at_line_start = True
            text = status_text(elapsed, silence, last_line, self.stall_s, self.timeout_s,
                               self.console.width)
            if self.shown and text.plain == self.drawn:
                return  # the clock shows whole seconds: most ticks change nothing
            self.drawn = text.plain
            self.stream.write(ERASE)
            self.console.print(text, end="", soft_wrap=True, highlight=False)
            self.stream.flush()
            self.shown = True

    def close(self) -> None:
        """Erase the status for good: the report follows, and scrollback keeps no timer."""
        with self.lock:
            self._erase()
            self.closed = True

    def _erase(self) -> None:
        if self.shown:
            self.stream.write(ERASE)
            self.stream.flush()
            self.shown = False

