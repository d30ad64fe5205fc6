"""Slowness the user states in words, for a log in which no message names a cause.

A thread about slow multi-GPU training rarely holds an error: the user writes that training
"is very slow", "doesn't scale after 4 GPUs", "takes longer with 8 GPUs than with 2", or that
GPU utilisation "is ~40%", and pastes the command line. No rule reads such a log, so all 8
performance threads of the corpus were read as ``unknown`` (DIAG001) before this reader
existed, and 8 of the 9 of the unseen splits were missed. When nothing else matched, a statement of
slowness in the text is the best evidence there is: the lead is then ``performance_degraded``,
at low confidence and said to be, with the measurements that tell its usual causes apart.

Some users give numbers instead of words ("single GPU: 1.01s / iter", "2 GPUs: 3.84s /
iter"; "with nGPU=4 one batch takes 2.3s, with nGPU=1 only 0.48s"). A time per step should
stay about the same when GPUs are added under DDP (each rank steps through its own batch), and
a time per epoch should fall: so two timings of one kind for two GPU counts, where the larger
count steps at least 1.5 times slower (or takes as long per epoch, or iterates a third
slower), state slowness as plainly as the word does (``_timings``). Only a step's or an
epoch's time is read, from the clause that names it: a load time, an interval, a total or a
time so far says nothing of throughput. Timings are weaker evidence than the fallback's
reading of an error line, and come after it.

It never outranks a message: a log that fails with an error and also says "slow" is read by
its error. The phrases describe throughput in English, and in the words Chinese, Japanese and
Korean users write (split L's threads: "训练速度为原来的 1/5", "GPU 利用率波动非常大"); a line
that is a program's
output (a Python warning, a logger's prefix: ``PROGRAM_OUTPUT``) is not read: libraries warn
of slowness in healthy runs. A program's own words for its state (nvidia-smi's "HW Slowdown"
clock reason, a model's ``Bottleneck`` block, a ``slow_conv2d`` kernel) do not spell them.

Where the usual causes come from: PyTorch's performance tuning guide
(https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html: DataLoader workers and
pinned memory, one process per GPU, per-GPU batch size), NCCL's environment and
troubleshooting pages (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/
troubleshooting.html: peer-to-peer disabled or routed through the CPU, sockets instead of
InfiniBand) and NVML's clock event reasons (thermal and power throttling).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import islice

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.diagnose.scan import ScanResult
from ddp_doctor.model import Evidence, Finding, Severity, Step

# Each alternative is a way English states low throughput; the negative look-arounds keep
# identifiers (slow_conv2d, slow-tokenizer flags, SlowFast) out, and transformers' healthy
# "Using a slow image processor" / "slow tokenizer" notices.
SLOWNESS = re.compile(
    r"(?<![\w-])slow(?:er|ly|ness|s|ed|ing)?(?![\w-])(?!\s+(?:tokeni[sz]er|image|processor))"
    r"|\b(?:does(?:n'?t| not)|did(?:n'?t| not)|do(?:n'?t| not)|won'?t|can'?t|cannot|not|never"
    r"|no longer)\s+(?:\w+\s+)?(?:scale|speed\s*(?:it\s+)?up|faster|accelerate)\b"
    r"|\bno\s+(?:\w+\s+)?speed\s*-?\s*up\b"
    r"|\b(?:takes?|took|taking)\s+(?:\w+\s+){0,2}longer\b"
    # a speed or throughput stated lower or worse ("the speed is up to 50% LOWER than with a
    # single GPU": keras-team/keras#11342), not a learning rate or a loss
    r"|\b(?:speed|throughput|samples/s|it/s)\s+(?:is|was|are|were|gets?|got|becomes?)\s+"
    r"(?:(?!\b(?:not|no|never)\b|n't)[^.;,\n]){0,25}?\b(?:lower|worse|slower|dropp\w*|decreas\w*)\b"
    # the GPUs' utilisation (said, or left implicit), not a disk's, a CPU's or the memory's
    r"|(?:\bgpus?(?:['\u2019]s?)?\s+(?:usage\s+|load\s+)?(?:utili[sz](?:ation|ed)?|usage|load)"
    r"|(?<!disk )(?<!cpu )(?<!ram )(?<!memory )(?<!network )(?<!io )\butili[sz](?:ation|ed))\b"
    r"[^.\n]{0,40}?\b(?:is|was|stays?|remains?|of|at|only|around|about|below|under|~)\s*"
    r"(?:very\s+|quite\s+|only\s+|around\s+|about\s+|~\s*)?"
    r"(?:low|poor|(?<!\d)[1-5]?\d(?:\.\d+)?\s*%)"  # low, or under 60%
    r"|\b(?:low|poor)\s+gpu\s+(?:utili[sz]ation|usage|load)\b"
    # The same in the words of the users of Chinese, Japanese and Korean threads: slow
    # (Chinese 慢; Japanese 遅い/遅く; Korean 느리다/느려), a speed that fell to a fraction
    # or dropped (速度为原来的 1/5, 速度下降), and a utilisation that is low or swings
    # (利用率低, 利用率波动; 使用率が低い; 사용률이 낮). "慢慢" is "gradually", and 慢性
    # (chronic), 傲慢, 怠慢, 且慢 are other words; a speed "3 times the original" is a speed-up,
    # so only a fraction of the original is read.
    r"|(?<![慢傲怠且])慢(?![慢性])|遅[いくかっ]|느[려리림]"
    r"|速度[^。\n]{0,12}?(?:原来的[\s*]*(?:\d+\s*/\s*\d+|[一二三四五六七八九十几]分之|一半"
    r"|0?\.\d|\d{1,2}\s*%)|下降|降低|降到)"
    r"|(?:利用率|使用率)\s*(?:很|非常|比较|只有|仅|才|一直)?\s*(?:低|不高|波动)|使用率が低"
    r"|사용률이?\s*낮",
    re.IGNORECASE)
# What a program prints, not a user: a Python warning ("UserWarning: ... running slow"), its
# warnings.warn( source line, a logger's "file.py:123:" or "[WARNING]" prefix, glog's
# "W1128 12:00:00.0 ..." and TensorFlow's "2021-... W tensorflow/...". torch's DataLoader
# warns of "potential slowness/freeze", bitsandbytes of "slow inference or training speed",
# transformers of "slower generation": library advice, printed by healthy runs.
PROGRAM_OUTPUT = re.compile(
    r"\w*warning:|warnings\.warn|\.py:\d+|^\s*\[?(?:WARN|INFO|DEBUG)\w*\]?[\s:]"
    r"|^\s*[WIEF]\d{4}\s|^\s*\d{4}-\d\d-\d\d[ T][\d:.,]+\s*:?\s*[WIEF]\s",
    re.IGNORECASE)
MAX_QUOTES = 3
IN_WORDS = "slowness stated in words, not measured: a lead"
IN_TIMINGS = ("slowness stated in timings for two GPU counts, not measured here: a lead (a "
              "step should take about as long with more GPUs, an epoch less)")

STATED_SLOWNESS = declare(
    "DIAG150", Category.PERFORMANCE_DEGRADED,
    "Low confidence: the text says training is slow, and no message names a cause",
    what="No log rule matched, and the text states low throughput in words (training slower "
         "than expected or than on fewer GPUs, low GPU utilisation, no speed-up from more "
         "GPUs) or in timings for two GPU counts (a step much slower, an epoch no faster, "
         "with more GPUs). Nothing failed, so the log cannot say which of the usual causes "
         "it is.",
    why="A multi-GPU job that trains slower than its hardware should is most often fed too "
        "slowly (DataLoader workers, CPU cores per GPU), moves its gradients over a slow path "
        "(peer-to-peer off or through the CPU, sockets instead of InfiniBand), waits for a "
        "throttled or slow rank, or runs too small a batch per GPU for all-reduce to pay off.",
    fix="Measure before changing anything: the scaling of a known job on this machine, GPU "
        "utilisation while training, how the GPUs are connected and which transport NCCL "
        "picked, and whether a GPU throttles.",
    severity=Severity.WARNING,
    docs_url="https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html")

STEPS: tuple[Step, ...] = (
    Step("Measure how a known DDP job scales on this machine (1 rank against all of them).",
         command="ddp-doctor smoke --scaling"),
    Step("Watch utilisation while the real job trains: every GPU low and waiting means the "
         "input pipeline is the limit (raise DataLoader num_workers, pin_memory=True, "
         "persistent_workers=True; check the CPU cores each rank gets).",
         command="nvidia-smi dmon -s u -d 1"),
    Step("See how the GPUs are connected: PHB, NODE or SYS between two GPUs routes their "
         "traffic through the CPU.",
         command="nvidia-smi topo -m"),
    Step("See which transport NCCL picked: 'via P2P' or 'NVLS' inside a node; 'NET/Socket' "
         "across nodes where InfiniBand exists is the slow path.",
         command="NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH torchrun ... 2>&1 "
                 "| grep -E 'via|NET/'"),
    Step("Check for throttling, narrowed PCIe links and the other health checks.",
         command="ddp-doctor check"),
)


# A GPU count as users write it: "2 GPUs", "8x GPU", "single GPU", "nGPU=4". A model number
# before "GPU" ("GTX 980 GPU") is not a count (``_counts``).
GPU_COUNT = re.compile(
    r"\b(?P<n>\d{1,3})\s*(?:x\s*|\*\s*)?gpus?\b"
    r"|\b(?P<w>single|one|two|three|four|eight)\s+gpus?\b"
    r"|\bn_?gpus?\s*[=:]\s*(?P<m>\d{1,3})\b",
    re.IGNORECASE | re.ASCII)
MODEL_BEFORE = re.compile(r"(?:gtx|rtx|tesla|quadro|titan|geforce|radeon)\s*$", re.IGNORECASE)
WORDS = {"single": 1, "one": 1, "two": 2, "three": 3, "four": 4, "eight": 8}
# A duration ("1.01s / iter", "2.3 s per batch", "30 min per epoch", "1h 50min"), or an
# iteration rate ("3.5 it/s").
DURATION = re.compile(
    r"(?<![\w.])(?P<v>\d+(?:\.\d+)?)\s*(?P<u>ms|s|secs?|seconds?|mins?|minutes?|h|hrs?|hours?)\b"
    r"(?:\s*(?P<v2>\d+(?:\.\d+)?)\s*(?P<u2>mins?|minutes?|s|secs?|seconds?)\b)?"
    r"(?:\s*(?:/|per)\s*(?P<per>iter(?:ation)?s?|its?|steps?|batch(?:es)?|epochs?)\b)?"
    r"|(?<![\w.])(?P<r>\d+(?:\.\d+)?)\s*(?:it|iters?|steps?|batch(?:es)?)\s*/\s*s(?:ec)?\b",
    re.IGNORECASE | re.ASCII)  # ASCII: "ſ" (U+017F) folds to "s" under IGNORECASE alone
SECONDS = {"ms": 0.001, "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1, "min": 60,
           "mins": 60, "minute": 60, "minutes": 60, "h": 3600, "hr": 3600, "hrs": 3600,
           "hour": 3600, "hours": 3600}
STEP_WORDS = re.compile(r"\b(?:iter(?:ation)?s?|its?|steps?|batch(?:es)?)\b",
                        re.IGNORECASE | re.ASCII)
EPOCH_WORDS = re.compile(r"\bepochs?\b", re.IGNORECASE | re.ASCII)
# A duration that is not a step's or an epoch's although the clause names one: a load, an
# interval, a total, the time so far ("takes 40 s to load", "every 500 steps", "for 90 epochs
# in 30 hours", "at epoch 3 after 1 hour").
NOT_A_PERIOD = re.compile(r"\b(?:load\w*|every|total|after|so far|for \d+ (?:epochs?|steps?|"
                          r"iter\w*)|in all|overall|eval\w*|validat\w*|warm ?up|setup|"
                          r"startup|start-up|compil\w*)\b", re.IGNORECASE | re.ASCII)
MAX_LINE = 2000  # a statement is a sentence or a table row, not a minified dump
CLAUSE = re.compile(r"[;.](?=\s|$)")  # a sentence or clause ends (not a decimal point)
STEP_SLOWER = 1.5  # a step this much slower with more GPUs is a slowdown, not DDP's overhead
MAX_TIMED = 200  # lines with timings read, at most


def _seconds(duration: re.Match[str]) -> float | None:
    """The duration in seconds ("1h 50min" added up), or None where it is a model number's
    plural ("3090s": a bare "s" right after four or more digits, with no "/ iter")."""
    value, unit = duration["v"], duration["u"].lower()
    if unit == "s" and "." not in value and len(value) >= 4 and duration["per"] is None \
            and duration.group(0)[len(value)] == unit[0]:
        return None
    total = float(value) * SECONDS[unit]
    if duration["v2"]:  # the second part of "1h 50min"
        total += float(duration["v2"]) * SECONDS[duration["u2"].lower()]
    return total


def _kind(clause_kind: str | None, duration: re.Match[str]) -> str | None:
    """What a duration is the time of: "rate" (iterations per second), the period its own
    "/ iter" or "per epoch" names, else its clause's (``_clause_kind``)."""
    if duration["r"] is not None:
        return "rate"
    per = (duration["per"] or "").lower()
    if per:
        return "epoch" if per.startswith("epoch") else "step"
    return clause_kind


def _clause_kind(clause: str) -> str | None:
    """The period a clause's durations measure: "step" or "epoch" where it names one and only
    one, None where it names neither or both, or where a duration in it is a load, an
    interval, a total or a time so far (``NOT_A_PERIOD``)."""
    if NOT_A_PERIOD.search(clause):
        return None
    steps, epochs = bool(STEP_WORDS.search(clause)), bool(EPOCH_WORDS.search(clause))
    if steps != epochs:
        return "step" if steps else "epoch"
    return None


def _counts(clause: str) -> list[tuple[re.Match[str], int]]:
    """The GPU counts of a clause with their numbers (model numbers left out)."""
    found = []
    for count in GPU_COUNT.finditer(clause):
        if MODEL_BEFORE.search(clause[max(0, count.start() - 12):count.start()]):
            continue
        found.append((count, int(count["n"] or count["m"] or WORDS[count["w"].lower()])))
    return found


def _timed_counts(line: str) -> list[tuple[int, str, float]]:
    """(GPU count, kind, seconds or iterations per second) of each GPU count of ``line`` with
    its duration: in each clause, the one after the count where the clause names counts
    first ("1 GPU: 1.01s / iter"), else the one before ("10 hours on 1 GPU")."""
    found: list[tuple[int, str, float]] = []
    if len(line) > MAX_LINE:
        return found
    start = 0
    for end in [m.start() for m in CLAUSE.finditer(line)] + [len(line)]:
        clause, start = line[start:end], end + 1
        counts = _counts(clause)
        durations = list(DURATION.finditer(clause))
        if not counts or not durations:
            continue
        clause_kind = _clause_kind(clause)
        after = durations[0].start() > counts[0][0].start()
        for i, (count, n) in enumerate(counts):
            if after:
                stop = counts[i + 1][0].start() if i + 1 < len(counts) else len(clause)
                duration = next((d for d in durations if count.end() <= d.start() < stop), None)
            else:
                begin = counts[i - 1][0].end() if i else 0
                duration = next((d for d in reversed(durations)
                                 if begin <= d.start() and d.end() <= count.start()), None)
            if duration is None:
                continue
            kind = _kind(clause_kind, duration)
            value = float(duration["r"]) if duration["r"] is not None else _seconds(duration)
            if kind is not None and value is not None:
                found.append((n, kind, value))
    return found


def _slower(kind: str, fewer: tuple[float, float], more: tuple[float, float]) -> bool:
    """Whether the timings with more GPUs state a slowdown against those with fewer, each
    (least, most): even the best with more GPUs against the worst with fewer."""
    if kind == "step":
        return more[0] >= STEP_SLOWER * fewer[1]
    if kind == "rate":
        return more[1] * STEP_SLOWER <= fewer[0]
    return more[0] >= fewer[1]  # an epoch should take less with more GPUs


def _timings(lines: list[tuple[str, int, str]]) -> list[tuple[str, int, str]]:
    """The lines whose timings for two GPU counts state a slowdown (``_slower``), or []."""
    # (kind, count) -> (least, most, the first line of the count)
    seen: dict[tuple[str, int], tuple[float, float, tuple[str, int, str]]] = {}
    for where in lines[:MAX_TIMED]:
        for n, kind, value in _timed_counts(where[2]):
            low, high, first = seen.get((kind, n), (value, value, where))
            seen[(kind, n)] = (min(low, value), max(high, value), first)
    for (kind, n), (low, high, where) in sorted(seen.items()):
        for (other_kind, m), (low2, high2, where2) in sorted(seen.items()):
            if other_kind == kind and m > n and _slower(kind, (low, high), (low2, high2)):
                return sorted({where, where2}, key=lambda w: (w[0], w[1]))
    return []


def written_lines(scan: ScanResult) -> Iterator[tuple[str, int, str]]:
    """(document, line, text) of each line a user may have written, in the order read: the
    head's lines, then the tail's past the head's end, whole (``numbered_lines`` without the
    rules' window), less the lines a program printed (``PROGRAM_OUTPUT``). The statements of
    stated_memory are read from the same lines."""
    for context in scan.contexts:
        for number, line in context.numbered_lines(window=False):
            if not PROGRAM_OUTPUT.search(line):
                yield context.document, number, line


def _lines(scan: ScanResult) -> Iterator[tuple[str, int, str]]:
    """``written_lines``, each stripped."""
    return ((document, number, line.strip()) for document, number, line in written_lines(scan))


def statement_evidence(scan: ScanResult,
                       statements: list[tuple[str, int, str]]) -> tuple[Evidence, ...]:
    """The quoted statements (document, line, text) as evidence: "line N", or "doc line N"
    where the input held several documents."""
    many = len(scan.documents) > 1
    return tuple(
        Evidence(f"{document} line {line}" if many else f"line {line}", text[:300], document)
        for document, line, text in statements)


def _finding(scan: ScanResult, statements: list[tuple[str, int, str]],
             stated: str) -> Finding | None:
    """The low-confidence performance lead quoting ``statements``, or None without any."""
    if not statements:
        return None
    return Finding(
        STATED_SLOWNESS,
        "LOW CONFIDENCE: no message names a cause; the text says training is slow",
        (*statement_evidence(scan, statements), Evidence("reading", stated)),
        STEPS, docs_url=STATED_SLOWNESS.docs_url)


def stated_slowness(scan: ScanResult) -> Finding | None:
    """The low-confidence performance lead of a log whose text states slowness in words, or
    None."""
    found = list(islice((where for where in _lines(scan) if SLOWNESS.search(where[2])),
                        MAX_QUOTES))
    return _finding(scan, found, IN_WORDS)


def stated_timings(scan: ScanResult) -> Finding | None:
    """The low-confidence performance lead of a log whose timings for two GPU counts state a
    slowdown (``_timings``), or None. Weaker evidence than words, and than the fallback's
    reading of an error line: diagnose asks it last."""
    timed = [where for where in _lines(scan)
             if GPU_COUNT.search(where[2]) and DURATION.search(where[2])]
    return _finding(scan, _timings(timed)[:MAX_QUOTES], IN_TIMINGS)
