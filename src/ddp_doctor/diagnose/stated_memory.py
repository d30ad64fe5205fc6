"""Host memory running out, stated in words, for a log in which no message names a cause.

When the kernel's OOM killer ends a training process, the process prints nothing: the shell
may print "Killed", the launcher an exit code of -9, and often the user pastes neither and
writes what they saw instead ("the process got killed while loading the model", "it dies
without an error message", "RAM usage keeps increasing until the machine crashes"; in Chinese
"进程被killed", "超内存", "内存不足"). The kernel's own report is read by the rules (LOG038) and
the shell's and launchers' by LOG007; this reader takes the user's statement as the best
evidence left, as a low-confidence host-memory lead that says so, with the commands that
confirm it (the kernel log, the memory the job peaks at).

Why it is safe enough to lead: a process killed without a word is, on Linux, most often the OOM
killer's doing (the kernel's memory-management concepts,
https://docs.kernel.org/admin-guide/mm/concepts.html#oom-killer: when memory cannot be
reclaimed, the kernel picks a task and kills it; SIGKILL cannot be caught, signal(7)). In the
corpus, all 8 threads whose text states it so were host memory; 3 of them (split W's studied
half, which this reader was written after) had no other line. It never outranks a message: a
log that fails with an error and also says "killed" is read by its error. A program's own
output ("Killed" alone, a logger's line) is not a statement
(``stated_slowness.PROGRAM_OUTPUT``); a GPU's memory ("GPU memory", "VRAM", Chinese 显存) is
not the host's.
"""

from __future__ import annotations

import re
from itertools import islice

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.diagnose.scan import ScanResult
from ddp_doctor.diagnose.stated_slowness import statement_evidence, written_lines
from ddp_doctor.model import Evidence, Finding, Severity, Step

# Each alternative is a way users state that the process was killed without a message
# (``KILLED``) or that the host's memory ran out (``RAM_GONE``). A clean exit ("exits without
# any error") is no kill, and "full" or "not enough" near "RAM" says so only as "RAM is full" /
# "RAM is not enough" ("256GB of RAM and not enough GPUs", "RAM 1TB, full log below" do not).
KILLED = re.compile(
    r"\b(?:process(?:es)?|job|training|program|script|python|worker|run)\s+(?:\w+\s+){0,2}"
    r"(?:was|were|got|gets|get|is|being|has been)\s+killed\b"
    r"|\b(?:dies|died|crash(?:es|ed)?)\s+without\s+(?:an?y?\s+)?(?:error|message|traceback)"
    # the system named as the killer: "every time the system kills the process"
    r"|\b(?:system|kernel|os|linux)\s+kill(?:s|ed)\s+(?:the\s+|my\s+|our\s+)?"
    r"(?:process|job|training|program|script)"
    # Chinese: killed (被kill, 被杀)
    r"|被\s*(?:kill(?:ed)?|杀)|进程被?杀",
    re.IGNORECASE)
RAM_GONE = re.compile(
    r"\b(?:ram|host memory|system memory|cpu memory|main memory)\b[^.\n]{0,40}?"
    r"(?:\b(?:is|was|are|were|gets?|got|becomes?)\s+(?:full|not enough|insufficient)\b"
    r"|\b(?:exhaust\w*|runs? out|ran out|crash\w*|explod\w*|overflow\w*|blows? up|maxed"
    r"|keeps? (?:increas|grow)\w*|leak\w*))"
    r"|\b(?:run|ran|running|runs)\s+out\s+of\s+(?:ram|host memory|system memory|cpu memory)\b"
    # the job's memory (its usage, it) going past the RAM: "used memory ... surpasses available
    # RAM"; not a dataset larger than the RAM
    r"|\b(?:memory|usage|consumption|it)\b[^.\n]{0,60}?\b(?:exceed\w*|surpass\w*)\s+"
    r"(?:the\s+)?(?:available\s+)?(?:ram|host memory|system memory)\b"
    # Chinese: memory (内存, the host's) short, overflowing, full or leaking; "over the memory"
    # (超内存), "memory blew up" (爆内存)
    r"|内存(?:不足|溢出|不够|爆了|爆掉|泄漏|泄露|占满|耗尽|被占满)|超内存|爆内存",
    re.IGNORECASE)
# Memory that is not the host's, just before the statement: the GPU's ("GPU's RAM", "GPU’s",
# "GPUs' RAM", "GPU 0 RAM", "graphics card RAM", "CUDA内存", 显卡内存, 显存) and shared memory
# (/dev/shm, 共享内存); or named just after it ("the RAM of the GPU").
NOT_HOST = re.compile(r"(?:gpu|cuda|vram|video|graphics|shared|显卡|显|共享)s?['’]?s?\W{0,3}"
                      r"(?:\d+\W{0,2})?(?:(?:card|device)\W{0,2})?$", re.IGNORECASE)
OF_THE_GPU = re.compile(r"\b(?:of|on|in)\s+(?:the\s+|my\s+|each\s+)?(?:gpus?|device|graphics)\b",
                        re.IGNORECASE)
# A condition right after a kill ("the OS kills the process if it uses too much memory")
CONDITION_AFTER = re.compile(r"^\W{0,3}(?:if|unless|when(?:ever)?)\b", re.IGNORECASE)
# A statement denied or supposed: "not", "no", "never" just before or inside it ("there is no
# RAM leak", "memory is not exhausted"), or a condition ("if it uses too much memory", "make
# sure ... does not exceed").
NEGATED = re.compile(r"\b(?:not|no|never|nothing|if|would|could|might|whether|unless)\b|n['’]t\b",
                     re.IGNORECASE)
# A kill the user or the system meant: by hand, by a scheduler's time limit, by the launcher
# after another rank failed, by a watchdog or a timeout. Not the OOM killer's doing.
OTHER_KILL = re.compile(
    r"\bby\s+(?:me|myself|hand|the\s+scheduler|slurm|torchrun|the\s+launcher|the\s+watchdog)\b"
    r"|\bctrl\W{0,2}c\b|time\s?limit|timeout|timed\s+out|another\s+rank|\bnccl\b|sigterm|sigint"
    r"|超时",
    re.IGNORECASE)
MAX_QUOTES = 3
MAX_LINE = 2000  # a statement is a sentence, not a minified dump

STATED_HOST_MEMORY = declare(
    "DIAG151", Category.HOST_OUT_OF_MEMORY,
    "Low confidence: the text says the process was killed or the host's memory ran out",
    what="No log rule matched, and the text states in words that the training process was "
         "killed or died without an error, or that the host's memory (RAM) ran out. That is "
         "what the kernel's OOM killer leaves behind: it ends a process with SIGKILL, which "
         "the process cannot report.",
    why="Host memory runs out where every rank loads the whole checkpoint or dataset into "
        "RAM, DataLoader workers each copy it, or a model is built on the CPU before it moves "
        "to the GPU; the job dies at the same point each time.",
    fix="Confirm it in the kernel log, then lower the host memory the job peaks at: load "
        "checkpoints with mmap or one rank at a time, build the model on the GPU or the "
        "'meta' device, use fewer DataLoader workers, or give the machine (or container) more "
        "memory and swap.",
    severity=Severity.WARNING,
    docs_url="https://docs.kernel.org/admin-guide/mm/concepts.html#oom-killer")

STEPS: tuple[Step, ...] = (
    Step("Look for the OOM killer naming the process at the time it died.",
         command="sudo dmesg -T | grep -i -E 'killed process|out of memory' | tail -5"),
    Step("Watch the host memory while the job starts and runs (used climbing to total, then "
         "the process gone, is the OOM killer).",
         command="free -g -s 5"),
    Step("Inside a container, compare the job's peak with the container's memory limit.",
         command="cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory.peak 2>/dev/null"),
)


def _stated(pattern: re.Pattern[str], line: str) -> bool:
    """Whether ``pattern`` states it on ``line``: a match not about another memory
    (``NOT_HOST`` before it, ``OF_THE_GPU`` in or after it), not denied or supposed
    (``NEGATED`` in the match or the 20 characters before it, ``CONDITION_AFTER``), on a line
    that names no other reason for a kill (``OTHER_KILL``)."""
    for found in pattern.finditer(line):
        before = line[max(0, found.start() - 20):found.start()]
        after = line[found.end():found.end() + 24]
        if (NOT_HOST.search(line[max(0, found.start() - 16):found.start()])
                or OF_THE_GPU.match(after.lstrip(" ,")) or OF_THE_GPU.search(found.group())
                or NEGATED.search(before) or NEGATED.search(found.group())
                or CONDITION_AFTER.search(after)):
            continue
        return not OTHER_KILL.search(line)
    return False


def states_a_kill(line: str) -> bool:
    """Whether ``line`` states that the process was killed without a message."""
    return _stated(KILLED, line)


def states_host_memory(line: str) -> bool:
    """Whether ``line`` states that the process was killed without a message or that the
    host's memory ran out."""
    return states_a_kill(line) or _stated(RAM_GONE, line)


def stated_kill(scan: ScanResult) -> bool:
    """Whether the text states anywhere that the process was killed without a message."""
    return any(len(line) <= MAX_LINE and states_a_kill(line)
               for _, _, line in written_lines(scan))


def stated_host_memory(scan: ScanResult) -> Finding | None:
    """The low-confidence host-memory lead of a log whose text states that the process was
    killed or the host's memory ran out, or None."""
    statements = ((document, number, line.strip())
                  for document, number, line in written_lines(scan)
                  if len(line) <= MAX_LINE and states_host_memory(line))
    found = list(islice(statements, MAX_QUOTES))
    if not found:
        return None
    return Finding(
        STATED_HOST_MEMORY,
        "LOW CONFIDENCE: no message names a cause; the text says the process was killed or "
        "the host's memory ran out",
        (*statement_evidence(scan, found),
         Evidence("reading", "host memory stated in words, not measured: a lead")),
        STEPS, docs_url=STATED_HOST_MEMORY.docs_url)
