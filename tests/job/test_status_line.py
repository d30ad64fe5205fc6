"""The live status line of ``ddp-doctor run``: drawn under the output, out of its way.

The unit tests drive ``StatusLine`` with a rich console writing to a buffer, and check
what a terminal would be sent. The last test runs the real command on a pseudo-terminal.
"""

from __future__ import annotations

import io
import os
import re
import select
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from ddp_doctor.job.status_line import (
    ERASE,
    TAKE_LINE_AFTER_S,
    StatusLine,
    clock,
    status_text,
    wanted,
)


def terminal(width: int = 80) -> tuple[Console, io.StringIO]:
    screen = io.StringIO()
    return Console(file=screen, force_terminal=True, width=width, color_system=None,
                   highlight=False), screen


def recorder() -> tuple[list[bytes], object]:
    written: list[bytes] = []
    return written, written.append


def test_clock_reads_like_a_stopwatch() -> None:
    assert clock(0) == "0:00"
    assert clock(59.9) == "0:59"
    assert clock(61) == "1:01"
    assert clock(3600 + 62) == "1:01:02"
    assert clock(-3) == "0:00"


def test_the_text_names_time_silence_deadlines_and_the_last_line() -> None:
    text = status_text(125, 42, "\x1b[32mEpoch 3/10\x1b[0m  loss 0.5", stall_s=300,
                       timeout_s=3600, width=120)
    assert text.plain == ("ddp-doctor run 2:05 of 1:00:00  silent 0:42 of 5:00  "
                          "last: Epoch 3/10  loss 0.5")


def test_silence_turns_yellow_then_red_as_the_stall_deadline_nears() -> None:
    def silence_style(silent: float) -> str:
        text = status_text(0, silent, None, stall_s=100, timeout_s=None, width=80)
        start = text.plain.index("silent ") + len("silent ")
        return " ".join(str(span.style) for span in text.spans if span.start == start)

    assert silence_style(10) == ""
    assert silence_style(60) == "yellow"
    assert silence_style(85) == "bold red"


def test_the_text_never_wraps_on_a_narrow_terminal() -> None:
    text = status_text(5, 1, "x" * 500, None, None, width=40)
    assert len(text.plain) <= 39
    assert text.plain.endswith("…")


def test_the_status_is_erased_before_output_and_redrawn_at_a_line_start() -> None:
    console, screen = terminal()
    line = StatusLine(console, shares_terminal=True)
    written, write = recorder()
    line.draw(1, 0, None)
    assert screen.getvalue().startswith(ERASE + "ddp-doctor run 0:01")
    before = len(screen.getvalue())
    line.around_output(write, b"Epoch 1/3\n")  # type: ignore[arg-type]
    assert written == [b"Epoch 1/3\n"]
    assert screen.getvalue()[before:] == ERASE  # erased before the output went through
    line.draw(2, 0, "Epoch 1/3")
    assert screen.getvalue().endswith("last: Epoch 1/3")


def test_a_progress_bar_mid_line_is_left_alone_until_the_output_falls_silent() -> None:
    console, screen = terminal()
    line = StatusLine(console, shares_terminal=True)
    _, write = recorder()
    line.around_output(write, b"\r  12/100 [=====>    ]")  # type: ignore[arg-type]
    line.draw(3, 1.0, None)
    assert screen.getvalue() == ""  # drawing now would overwrite the bar
    line.draw(9, TAKE_LINE_AFTER_S + 0.1, None)
    assert screen.getvalue().startswith("\n" + ERASE + "ddp-doctor run 0:09")


def test_an_unchanged_status_is_not_redrawn() -> None:
    console, screen = terminal()
    line = StatusLine(console, shares_terminal=True)
    line.draw(1.1, 0.2, "a")
    first = screen.getvalue()
    line.draw(1.6, 0.7, "a")
    assert screen.getvalue() == first
    line.draw(2.1, 1.2, "a")
    assert screen.getvalue() != first


def test_on_a_terminal_of_its_own_the_status_is_not_erased_for_output() -> None:
    console, screen = terminal()
    line = StatusLine(console, shares_terminal=False)
    _, write = recorder()
    line.draw(1, 0, None)
    drawn = screen.getvalue()
    line.around_output(write, b"half a line")  # type: ignore[arg-type]
    assert screen.getvalue() == drawn
    line.draw(2, 0.5, None)  # mid-line output elsewhere does not hold it back
    assert screen.getvalue().endswith("ddp-doctor run 0:02  silent 0:00")


def test_close_erases_it_and_nothing_is_drawn_after() -> None:
    console, screen = terminal()
    line = StatusLine(console, shares_terminal=True)
    line.draw(1, 0, None)
    line.close()
    assert screen.getvalue().endswith(ERASE)
    size = len(screen.getvalue())
    line.draw(5, 0, "late")
    assert len(screen.getvalue()) == size


def test_only_a_real_terminal_gets_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERM", "xterm-256color")
    assert wanted(terminal()[0], disabled=False)
    assert not wanted(terminal()[0], disabled=True)
    assert not wanted(Console(file=io.StringIO()), disabled=False)  # a pipe or a file
    monkeypatch.setenv("TERM", "dumb")
    assert not wanted(terminal()[0], disabled=False)


SCRIPT = r"""
import sys, time
print("Epoch 1/2 starting", flush=True)
for i in range(4):
    sys.stdout.write(f"\r  step {i}/4"); sys.stdout.flush(); time.sleep(0.2)
print("", flush=True)
print("Epoch 2/2 starting", flush=True)
time.sleep(2.5)
print("done", flush=True)
"""


def _on_a_pty(tmp_path: Path, *options: str) -> bytes:
    import pty

    log = tmp_path / "out.log"
    pid, fd = pty.fork()
    if pid == 0:  # the child: the doctor, on the pseudo-terminal
        os.environ["TERM"] = "xterm"
        os.environ["COLUMNS"] = "100"
        try:
            os.execv(sys.executable, [sys.executable, "-m", "ddp_doctor", "run", *options,
                                      "--log", str(log), "--", sys.executable, "-c", SCRIPT])
        finally:
            os._exit(127)
    screen = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        screen += chunk
    os.waitpid(pid, 0)
    assert log.read_bytes().count(b"Epoch") == 2
    assert b"ddp-doctor run" not in log.read_bytes()  # the log never sees the status
    return screen


@pytest.mark.spawns
def test_a_real_run_on_a_terminal_shows_the_status_and_the_output_unchanged(tmp_path):
    screen = _on_a_pty(tmp_path, "--stall-timeout", "30")
    # The bar's frames reach the terminal as the command wrote them (the pty adds \r to \n).
    assert b"\r  step 0/4\r  step 1/4\r  step 2/4\r  step 3/4\r\n" in screen
    shown = re.sub(rb"\x1b\[[0-9;]*m", b"", screen)  # colours off: what the text says
    assert b"Epoch 2/2 starting\r\n" + ERASE.encode() + b"ddp-doctor run 0:0" in shown
    assert b"last: Epoch 2/2 starting" in shown
    assert b" of 0:30" in screen
    after = screen[screen.rindex(b"done\r\n"):]
    assert b"ddp-doctor run 0:" not in after  # erased for good before the report


@pytest.mark.spawns
def test_no_status_turns_it_off(tmp_path):
    screen = _on_a_pty(tmp_path, "--no-status")
    assert b"Epoch 2/2 starting" in screen
    assert b"silent" not in screen
