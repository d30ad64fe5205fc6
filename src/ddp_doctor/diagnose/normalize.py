"""Bytes in, clean text chunks out: what a terminal showed, not what it was sent.

Logs pasted into tickets carry colour codes, tqdm progress bars redrawn with carriage
returns, Windows line ends and the odd byte that is not UTF-8. Each chunk handed on ends
at a line boundary, so line numbers stay exact and no line is split between chunks; a
"line" that never ends (a progress bar redrawn for an hour with only CRs) is cut at a
bounded length so memory stays flat.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator

MAX_LINE = 1 << 20  # a single line longer than this is cut: nobody pastes a 1 MB error line

# CSI sequences (colours, cursor moves), OSC sequences (titles, links) and the short
# two-byte escapes, as ECMA-48 defines them.
_ANSI = re.compile(r"\x1b(?:\[[0-9;?<=>!]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\)|[@-Z\\-_])")


def _last_frames(text: str) -> str:
    """Each line that holds bare carriage returns, reduced to its last non-empty frame.

    Everything before a carriage return was overwritten on screen (a progress bar's
    earlier frames). Only lines holding a CR are touched, found with ``str.find``: a
    regular expression tried at every position is a hundred times slower on big logs.
    """
    parts: list[str] = []
    done = 0
    at = text.find("\r")
    while at != -1:
        start = text.rfind("\n", 0, at) + 1
        end = text.find("\n", at)
        end = len(text) if end == -1 else end
        frames = text[start:end].split("\r")
        parts.append(text[done:start])
        parts.append(next((frame for frame in reversed(frames) if frame), ""))
        done = end
        at = text.find("\r", end)
    parts.append(text[done:])
    return "".join(parts)


def clean(text: str) -> str:
    """One chunk of text as a terminal would have shown it."""
    if "\r" in text:
        text = _last_frames(text.replace("\r\n", "\n"))
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    return text


def byte_chunks(blocks: Iterator[bytes], encoding: str = "utf-8") -> Iterator[bytes]:
    """UTF-8 chunks of whole lines (the last one may lack its newline), still raw.

    The scan searches raw bytes: ASCII lowering and ``bytes.find`` run at memory speed
    whatever the text holds, while a ``str`` with one progress-bar block character is
    stored two bytes per character and lowers ten times slower. Only the lines a rule may
    match are decoded and cleaned (``clean_line``). Splitting at ``\n`` is safe in UTF-8:
    no multi-byte character contains that byte. Other encodings (UTF-16 from PowerShell)
    are re-encoded first.
    """
    decoder = None if encoding == "utf-8" else \
        codecs.getincrementaldecoder(encoding)(errors="replace")
    carry = b""  # the start of a line the previous blocks did not end (never a newline)
    for block in blocks:
        if decoder is not None:
            block = decoder.decode(block).encode("utf-8", "replace")
        cut = block.rfind(b"\n") + 1
        if cut == 0:
            # A line with no end yet: keep only its last frame, bounded; its earlier bytes
            # were overwritten on screen or are beyond any quote. No newline is invented,
            # so line numbers stay those of the file.
            data = carry + block
            carry = _tail_frame(data) if len(data) > MAX_LINE else data
            continue
        # One copy at most of a 4 MiB block: none when it ends a line and nothing is carried.
        if carry:
            whole = b"".join((carry, memoryview(block)[:cut]))
        else:
            whole = block if cut == len(block) else block[:cut]
        carry = block[cut:]
        if len(carry) > MAX_LINE:
            carry = _tail_frame(carry)
        yield whole
    if decoder is not None:
        carry += decoder.decode(b"", final=True).encode("utf-8", "replace")
    if carry:
        yield carry


def clean_line(raw: bytes) -> str:
    """One raw line as the terminal showed it: decoded, last progress frame, no colours."""
    return clean(raw.decode("utf-8", "replace"))


def text_chunks(blocks: Iterator[bytes], encoding: str = "utf-8") -> Iterator[str]:
    """Decoded, cleaned chunks of whole lines (for small inputs and tests)."""
    for chunk in byte_chunks(blocks, encoding):
        yield clean(chunk.decode("utf-8", "replace"))


def _tail_frame(data: bytes) -> bytes:
    """The last frame of an endless progress line, bounded to MAX_LINE bytes."""
    last_cr = data.rfind(b"\r", 0, len(data) - 1)
    if last_cr != -1:
        data = data[last_cr + 1:]
    return data[-MAX_LINE:]
