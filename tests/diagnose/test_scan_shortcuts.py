"""The scan's shortcuts change nothing it finds.

The scan picks the lines that may hold a gate word by their letters (``LineGate``) and tests
the gates exactly on those, reads each chunk with at most one copy, and remembers lines: exactly
(the same raw line), and with digits read as 0 (the rules a line could match, the shape of
an exception, a line that said nothing). Each test here compares a shortcut with the plain
definition it stands for, on input built to hit its edges.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from ddp_doctor.categories import Category
from ddp_doctor.diagnose import literals, node_lines, normalize, scan, source
from ddp_doctor.diagnose.compose import compose
from ddp_doctor.diagnose.line_gate import LineGate
from ddp_doctor.diagnose.node_lines import NodeLines
from ddp_doctor.diagnose.normalize import byte_chunks
from ddp_doctor.diagnose.scan import Scanner, ScanResult
from ddp_doctor.diagnose.source import open_input
from ddp_doctor.logrules import GATES, RULES
from ddp_doctor.model import Code, Severity
from ddp_doctor.textfacts import SECTION_MARKERS
from tests.support.rules import FakeRule


def _rule(code_id: str, pattern: str, *anchors: str) -> FakeRule:
    code = Code(code_id, Category.UNKNOWN, f"summary of {code_id}", "what", "why", "fix",
                severity=Severity.ERROR)
    return FakeRule(code, re.compile(pattern, re.I), anchors)


# -- the gate search ---------------------------------------------------------------------

TRICKY = [
    "CUDA error: out of memory",  # upper case
    "cu-da and cu2da and c.u.d.a are no gate",  # a gate's letters split by other bytes
    "no module  named x; No Module Named y",
    "bad alloc, badalloc, Bad_Alloc",
    "torch- and pytorch version 2.1 and torch",
    "████▏ 42% 312/741 [01:12<01:39, 4.31it/s]",
    "frame one\rframe two with a Warning\rlast frame",
    "node-3:12:12 [3] NCCL INFO comm 0x5 rank 3 cudaDev 3 busId 1000",
    "",
    "plain noise line 12345",
    "\x1b[31mERR\x1b[0mOR split by colour",
    "KILLED by signal 9",
    "exitcode  : -9 (pid: 4242)",
]


def _reference_lines(chunk: bytes, words: tuple[bytes, ...]) -> list[int]:
    """The definition: the index of every line whose lowered bytes hold a word."""
    return [index for index, line in enumerate(chunk.split(b"\n"))
            if any(word.lower() in line.lower() for word in words)]


def _tricky_chunk(seed: int) -> bytes:
    rng = random.Random(seed)
    lines = []
    for _ in range(400):
        kind = rng.random()
        if kind < 0.3:  # runs of one warning, as a dense log has
            lines += [f"[rank{rng.randrange(8)}]: UserWarning: step {rng.randrange(99)}"] * 5
        elif kind < 0.7:
            lines.append(rng.choice(TRICKY))
        else:
            lines.append("".join(rng.choice("abcdeilmnortuw _-.0123456789")
                                 for _ in range(rng.randrange(60))))
    return "\n".join(lines).encode()  # the last line has no newline


@pytest.mark.parametrize("seed", range(6))
def test_the_line_gate_picks_every_line_holding_a_word_and_the_exact_test_keeps_only_them(
        seed: int) -> None:
    chunk = _tricky_chunk(seed)
    scanner = Scanner(RULES, GATES, SECTION_MARKERS)
    words = scanner._gate_words
    newlines, lines, (picked,) = LineGate((words,)).select(chunk)
    assert newlines == chunk.count(b"\n")
    assert lines == chunk.split(b"\n")
    reference = _reference_lines(chunk, words)
    assert set(reference) <= set(picked)  # a superset, in order
    assert picked == sorted(picked)
    assert [index for index in picked if scanner._holds_gate(lines[index])] == reference


def test_the_line_gate_tells_groups_apart_and_reads_letters_only() -> None:
    gate = LineGate(((b"cud", b"bad_alloc"), (b"NCCL INFO NET/Plugin",), (b"\nPython v",)))
    chunk = (b"cu-da\nc.u.d.a 42\nbad alloc\nCUDA\nnccl info net plugin\n12345\n"
             b"Python v3.11\nnothing here")
    newlines, lines, picked = gate.select(chunk)
    # letters only: "cu-da" and "c.u.d.a" look like "cud" and "bad alloc" like "bad_alloc";
    # the exact test (``_holds_gate`` for the gates) then drops them
    assert picked == [[0, 1, 2, 3], [4], [6]]
    assert newlines == 7 and lines[6] == b"Python v3.11"
    assert gate.select(b"12345\n67 89\n") == (2, [], [[], [], []])


def test_a_word_without_letters_picks_every_line() -> None:
    newlines, _, picked = LineGate(((b"::",), (b"error",))).select(b"a\nerror\n")
    assert newlines == 2
    assert picked == [[0, 1, 2], [1]]


def test_a_gate_split_by_other_bytes_is_no_candidate() -> None:
    scanner = Scanner(RULES, GATES, SECTION_MARKERS)
    lines = b"cu-da\nc.u.d.a 42\nbad alloc\nCUDA\n".split(b"\n")
    assert [line for line in lines if scanner._holds_gate(line)] == [b"CUDA"]


# -- chunks ----------------------------------------------------------------------------------

def _reference_chunks(blocks: list[bytes]) -> list[bytes]:
    """Whole lines per block: what was carried plus the block up to its last newline."""
    out, carry = [], b""
    for block in blocks:
        data = carry + block
        cut = data.rfind(b"\n") + 1
        if cut == 0:
            carry = data
            continue
        out.append(data[:cut])
        carry = data[cut:]
    return out + ([carry] if carry else [])


@pytest.mark.parametrize("seed", range(5))
def test_chunks_are_the_blocks_cut_at_their_last_newline(seed: int) -> None:
    rng = random.Random(seed)
    text = "".join(rng.choice(["short\n", "x" * 700, "a line\n", "\n", "é\r"])
                   for _ in range(300)).encode()
    blocks, at = [], 0
    while at < len(text):
        size = rng.choice([1, 7, 64, 500, 2000])
        blocks.append(text[at:at + size])
        at += size
    blocks.insert(rng.randrange(len(blocks)), b"")
    chunks = list(byte_chunks(iter(blocks)))
    assert chunks == _reference_chunks(blocks)
    assert b"".join(chunks) == text
    assert all(isinstance(chunk, bytes) for chunk in chunks)


def test_a_block_ending_a_line_is_handed_on_as_it_is() -> None:
    blocks = [b"one\ntwo\n", b"three", b" four\n"]
    assert list(byte_chunks(iter(blocks))) == [b"one\ntwo\n", b"three four\n"]


def test_an_endless_line_is_still_cut_to_its_last_frame(monkeypatch) -> None:
    monkeypatch.setattr(normalize, "MAX_LINE", 100)
    blocks = [b"start\n" + b"frame\r" * 40, b"frame\r" * 40 + b"last\nend\n"]
    # The first block's 240 bytes of frames are cut to the last one; the second block's
    # frames end with the line, so they are handed on whole (cleaning keeps the last).
    assert list(byte_chunks(iter(blocks))) == [b"start\n",
                                               b"frame\r" * 41 + b"last\nend\n"]


# -- remembered lines --------------------------------------------------------------------------

SIGKILL = _rule("TST101", r"signal 9 \(SIGKILL\)", "signal")
STEP = _rule("TST102", r"loss is nan at step 1\d\b", "nan")
OOM = _rule("TST103", r"CUDA out of memory", "memory")
EXIT = _rule("TST104", r"exitcode\s*:\s*-9\b", "exitcode")
BARE = _rule("TST105", r"AssertionError: assert .*batch", "error")

TWINS = """\
[rank0]: worker got signal 7 (SIGKILL) at step 100
[rank1]: worker got signal 9 (SIGKILL) at step 100
[rank2]: worker got signal 9 (SIGKILL) at step 101
loss is nan at step 21
loss is nan at step 12
loss is nan at step 12
\x1b[31mRuntimeError: CUDA out of \x1b[0mmemory on step 3
RuntimeError: CUDA out of memory on step 4
node1:10:10 [2] NCCL WARN CUDA out of memory on step 5
node1:11:11 [2] NCCL WARN CUDA out of memory on step 5
ValueError: step 3 has no labels
ValueError: step 4 has no labels
Warning: nothing to see at step 1
Warning: nothing to see at step 2
  rank      : 3 (local_rank: 3)
  exitcode  : -9 (pid: 4242)
  rank      : 5 (local_rank: 5)
  exitcode  : -1 (pid: 4243)
  exitcode  : -9 (pid: 4244)
    assert opt.batch % world == 1
AssertionError
    assert opt.batch % world == 2
AssertionError
PyTorch version: 2.1.0
Is debug build: False
"""


def _scan(path: Path, rules: tuple[FakeRule, ...]) -> ScanResult:
    scanner = Scanner(rules, ("signal", "nan", "memory", "exitcode", "error", "warn"),
                      ("pytorch version",))
    for document in open_input(str(path)).documents:
        scanner.scan(document)
    return scanner.result


def _summary(result: ScanResult) -> object:
    hits = {code: ([(q.line, q.text, q.rank) for q in h.quotes], sorted(h.ranks), h.count,
                   [r.code.id for r in h.rules], h.order) for code, h in result.hits.items()}
    return (hits, [(q.line, q.text, q.rank) for q in result.exceptions],
            [(s.first_line, s.lines) for s in result.sections], result.lines)


def test_lines_equal_but_for_digits_are_each_judged_on_their_own(tmp_path: Path,
                                                                  monkeypatch) -> None:
    path = tmp_path / "twins.log"
    path.write_text(TWINS * 3)
    rules = (SIGKILL, STEP, OOM, EXIT, BARE)
    result = _scan(path, rules)
    sigkill = result.hits["TST101"]
    assert [q.line for q in sigkill.quotes] == [2, 3]
    assert sorted(sigkill.ranks) == ["rank 1", "rank 2"] and sigkill.count == 6
    assert [q.line for q in result.hits["TST102"].quotes] == [5]
    assert result.hits["TST102"].count == 6
    # -9 twice, with its rank from the summary above each; -1 is no match
    assert [q.line for q in result.hits["TST104"].quotes] == [16, 19]
    assert sorted(result.hits["TST104"].ranks) == ["rank 3", "rank 5"]
    assert [q.line for q in result.hits["TST105"].quotes][:2] == [20, 21]
    assert [q.text for q in result.exceptions][-1] == "ValueError: step 4 has no labels"
    # The same log with nothing remembered from one line to the next finds the same.
    monkeypatch.setattr(scan, "MEMO_LINES", 0)
    assert _summary(_scan(path, rules)) == _summary(result)


def test_remembering_changes_nothing_on_real_rules(tmp_path: Path, monkeypatch) -> None:
    corpus = Path(__file__).resolve().parents[1] / "data" / "logs"
    names = ["accelerate-1316.log", "accelerate-223.log", "allennlp-697.log"]
    text = "".join((corpus / name).read_text(encoding="utf-8", errors="replace")
                   for name in names)
    path = tmp_path / "mixed.log"
    path.write_text(text * 2 + TWINS)
    remembered = _summary(_scan_real(path))
    monkeypatch.setattr(scan, "MEMO_LINES", 0)
    assert _summary(_scan_real(path)) == remembered


def _scan_real(path: Path) -> ScanResult:
    scanner = Scanner(RULES, GATES, SECTION_MARKERS)
    for document in open_input(str(path)).documents:
        scanner.scan(document)
    return scanner.result


# -- looking upward across a chunk boundary ----------------------------------------------------

def test_the_summary_rank_is_read_across_a_block_boundary(tmp_path: Path,
                                                          monkeypatch) -> None:
    monkeypatch.setattr(source, "BLOCK", 64)
    head = "n\n" * (source.SNIFF // 2)  # the sniffed first block, then 64-byte blocks
    for pad in range(0, 70, 9):  # the summary falls on every side of a block boundary
        log = (head + "n" * pad + "\n" + "  host      : node1\n  rank      : 3 (local_rank: 3)\n"
               "  exitcode  : -9 (pid: 4242)\n")
        path = tmp_path / "summary.log"
        path.write_text(log)
        finding = compose(_scan(path, (EXIT,)))[0][0]
        assert finding.affects == ("rank 3",), pad
        assert finding.evidence[0].label == f"line {source.SNIFF // 2 + 4}", pad


# -- the phrase test and the NCCL lines ------------------------------------------------------

@pytest.mark.parametrize("seed", range(4))
def test_a_phrase_test_answers_as_its_pattern_before_and_after_compiling(
        monkeypatch, seed: int) -> None:
    monkeypatch.setattr(literals, "COMPILE_AFTER", 20)
    rng = random.Random(seed)
    phrases = tuple(dict.fromkeys("".join(rng.choice("abc .0") for _ in range(rng.randrange(
        1, 6))) for _ in range(30)))
    test = literals.PhraseTest(phrases)
    pattern = literals.phrase_filter(phrases)
    for _ in range(60):  # 20 by ``in``, then by the compiled pattern
        data = "".join(rng.choice("abcd .0x") for _ in range(rng.randrange(30))).encode()
        assert test(data) is (pattern.search(data) is not None), data
    assert test._pattern is pattern


def _nodes_state(nodes: NodeLines) -> object:
    return nodes.hosts, nodes.channel_lines, nodes.transports, nodes.nccl_runs


@pytest.mark.parametrize("name", ["nccl-257.log", "nccl-426.log", "nccl-1637.log",
                                  "nccl-1837.log", "nccl-529.log"])
def test_the_nccl_lines_picked_by_the_gate_are_fed_as_the_whole_chunk_was(
        name: str, monkeypatch) -> None:
    monkeypatch.setattr(node_lines, "MAX_CHANNEL_LINES", 3)
    corpus = Path(__file__).resolve().parents[1] / "data" / "logs"
    chunk = (corpus / name).read_bytes() * 2
    whole, picked_only = NodeLines(), NodeLines()
    whole.feed_chunk(chunk)
    _, lines, (picked,) = LineGate(((*node_lines.MARKERS, node_lines.NCCL_TESTS_MARKER),)
                                   ).select(chunk)
    picked_only.feed_lines(chunk, lines, picked)
    assert _nodes_state(picked_only) == _nodes_state(whole)
    assert whole.hosts or whole.transports or whole.nccl_runs  # the log says something


def test_copies_counted_ahead_of_the_loop_count_as_reading_each_would(
        tmp_path: Path, monkeypatch) -> None:
    # Many small chunks, so that a chunk starts with lines already only counted (tallied)
    # and with shapes already known to say nothing: both are dropped before the loop.
    monkeypatch.setattr(source, "BLOCK", 512)
    rng = random.Random(7)
    lines = []
    for step in range(600):
        rank = rng.randrange(4)
        lines.append(rng.choice([
            f"[rank{rank}]: RuntimeError: CUDA out of memory on step {step % 3}",
            f"[rank{rank}]: UserWarning: nothing on step {step}",
            f"[rank{rank}]:[W reducer.cpp:1360] Warning: killed by signal 9",
            "plain noise 123",
        ]))
    path = tmp_path / "dense.log"
    path.write_text("\n".join(lines) + "\n" + TWINS)
    rules = (SIGKILL, STEP, OOM, EXIT, BARE)
    fast = _scan(path, rules)
    assert fast.hits["TST103"].count == sum("out of memory" in line for line in lines) + 4
    monkeypatch.setattr(scan, "MEMO_LINES", 0)
    assert _summary(_scan(path, rules)) == _summary(fast)


def test_a_guessing_phrase_test_says_maybe_until_compiled_then_answers_exactly(
        monkeypatch) -> None:
    monkeypatch.setattr(literals, "COMPILE_AFTER", 2)
    test = literals.PhraseTest(("out of memory", "nccl"), guess=True)
    assert test(b"plain noise") and test(b"plain noise")  # "maybe": the exact tests decide
    assert not test(b"plain noise") and test(b"cuda out of memory")


def test_the_rules_read_a_very_long_lines_start_and_end(tmp_path: Path) -> None:
    # Of a line longer than twice scan.READ_CHARS, its first and last READ_CHARS characters
    # are read: a message at either end is found, one in the middle is not (the patterns'
    # holes made a search of a 256 KB line take minutes).
    message = "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"
    pad = "x" * (3 * scan.READ_CHARS)
    found = {}
    for name, text in (("start", message + " " + pad), ("end", pad + " " + message),
                       ("middle", pad + " " + message + " " + pad)):
        path = tmp_path / f"{name}.log"
        path.write_text(text + "\n")
        scanner = Scanner(RULES, GATES, SECTION_MARKERS)
        for document in open_input(str(path)).documents:
            scanner.scan(document)
        found[name] = "LOG005" in scanner.result.hits
    assert found == {"start": True, "end": True, "middle": False}
