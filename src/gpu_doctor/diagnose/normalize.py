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
_ANSI = re.compile(r"\x1b(?:\[[0-9;?<=>!]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
# Everything up to a bare carriage return that is followed by more text on the same line
# was overwritten on screen (a progress bar's earlier frames).
_OVERWRITTEN = re.compile(r"[^\n\r]*\r+(?=[^\n\r])")


def clean(text: str) -> str:
    """One chunk of text as a terminal would have shown it."""
    if "\r" in text:
        text = text.replace("\r\n", "\n")
        text = _OVERWRITTEN.sub("", text)
        text = text.replace("\r", "")
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    return text


def text_chunks(blocks: Iterator[bytes], encoding: str = "utf-8") -> Iterator[str]:
    """Decoded, cleaned chunks of whole lines (the last one may lack its newline)."""
    decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
    carry = ""
    for block in blocks:
        text = carry + decoder.decode(block)
        cut = text.rfind("\n") + 1
        if cut == 0:
            if len(text) > MAX_LINE:
                yield clean(_tail_frame(text)) + "\n"
                carry = ""
            else:
                carry = text
            continue
        carry = text[cut:]
        if len(carry) > MAX_LINE:
            carry = _tail_frame(carry)
        yield clean(text[:cut])
    text = carry + decoder.decode(b"", final=True)
    if text:
        yield clean(text)


def _tail_frame(text: str) -> str:
    """The last frame of an endless progress line, bounded to MAX_LINE characters."""
    last_cr = text.rfind("\r", 0, len(text) - 1)
    if last_cr != -1:
        text = text[last_cr + 1:]
    return text[-MAX_LINE:]
