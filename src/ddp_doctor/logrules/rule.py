"""The Rule interface every log rule speaks, and the gate vocabulary that makes scanning cheap.

A log of 1 GB must scan at tens of MB/s, so no rule's regular expression is run on every
line. Each rule names *anchors*: lowercase words from the small shared ``GATES`` vocabulary,
at least one of which is in every line the rule can match. The engine finds every gate in
one pass over the text and tries a rule only on lines that hold one of its anchors.
That is why the patterns here spell an anchor word out literally in each alternative (a
test checks it), and why ``nccl`` is not a gate: NCCL's INFO lines are floods, so a rule
reading an NCCL line anchors on another of its words ("warn", "fail", "refused").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, TypeVar, Union

from ddp_doctor.categories import Category
from ddp_doctor.model import Code, Step

_R = TypeVar("_R", bound=Any)

GATES: tuple[str, ...] = (
    "error", "warn", "fail", "memory", "killed", "exitcode", "signal", "cud", "nvidia", "nvrm",
    "time", "refused", "numpy", "no module named", "bad_alloc", ".cc:", "undefined symbol",
    "exception", "process group", "command not found", "ncclmaxsharedmem", "incompatible",
    "oom-kill", "dynamo hit config", "gpu count", "nvcc fatal", "exits with return code",
    "communication broadband", "daemon", "xid", "fallen off the bus", "+cpu", "exit code",
    "exited with code", "invalid config", "interface found", "event queue overflow",
    "rbac_access_denied", "fbgemm_gpu", "not accessible", "due to shape mismatches",
    "disabled between", "out of resource", "unknown backend", "triton installation",
    "zlibwapi", "terminated abruptly", "caught stopiteration",
)
"""Lowercase substrings; a line is a candidate for a rule when it contains one of the
rule's anchors (compare against the lowercased line). "cud" stands for both "cuda" and
"cudnn"; ".cc:" is the file:line of NCCL's error trace ("NCCL INFO misc/socket.cc:567 -> 2"),
printed without any other gate; "undefined symbol" is the dynamic loader's line, which users
often paste without the ImportError before it (facebookresearch/detectron2#3710,
Dao-AILab/flash-attention#928); "exception" is the word the exception classes named
*Exception share when nothing else on their line is a gate (Lightning's
MisconfigurationException, torch.multiprocessing's ProcessRaisedException).

The last seven let catalogued messages be read when they are pasted without an ``Error:``
or exception prefix, each spelled by the message itself: torch's "Default process group has
not been initialized" (distributed_c10d.py raises it as a ValueError that users paste
alone), the shells' "torchrun: command not found" (bash) and "command not found: torchrun"
(zsh), NCCL's INFO line "ncclMaxSharedMem N exceeds device/fn maxSharedMem M" (2.25, a GPU
generation its kernels were not built for: NVIDIA/nccl#1637), pip's "X requires Y, but you
have Z which is incompatible" (pip/_internal/commands/install.py), the kernel's
"invoked oom-killer" / "oom-kill:constraint=" lines (mm/oom_kill.c) and torch.compile's
"torch._dynamo hit config.cache_size_limit (8)", which glog prints as "W1128 ..." with no
other gate (torch/_dynamo/convert_frame.py). "gpu count" is PaddlePaddle's "Device id must be
less than GPU count, but received id is: 3. GPU count is: 1"
(paddle/phi/backends/gpu/cuda/cuda_info.cc), which users paste without the
``InvalidArgumentError:`` before it (PaddlePaddle/PaddleOCR#15497). "nvcc fatal" is the prefix
the CUDA compiler driver puts before its refusals ("nvcc fatal   : Unsupported gpu
architecture 'compute_86'"), none of which spells another gate (the `nvcc` catalogue). "exits with
return code" is DeepSpeed's launcher naming the first rank that failed ("... exits with return
code = -9", deepspeed/launcher/launch.py), whose long command list a terminal or an issue
form wraps, leaving the code on a line of its own after the "[ERROR]"
(CASIA-LMC-Lab/AnomalyGPT#43). "communication broadband" is accelerate's refusal of RTX 40xx
GPUs under an old driver ("... doesn't support faster communication broadband via P2P or
IB"), pasted without its NotImplementedError (QwenLM/Qwen-VL#447). "daemon" is Open MPI's
launcher failing to start or reach its daemons ("ORTE was unable to reliably start one or more
daemons", "A process or daemon was unable to complete a TCP connection"), help texts whose
first line spells no other gate (the `openmpi` catalogue). "xid" and "fallen off the bus" are
the GPU driver's fault reports as users paste them without the kernel's "NVRM:" ("Xid
(PCI:0000:3b:00): 79 - GPU has fallen off the bus" from a monitor or a write-up; a Lambda
engineer's notes on Xid 119 then 79). "+cpu" is the CPU-only torch wheel's local version tag,
named in system reports that print no error ("torch_version: 1.13.1+cpu",
brycedrennan/imaginAIry#398). "exit code" and "exited with code" are how kubectl, srun and
a container runtime report a process SIGKILL ended (status 137, the `kernel` catalogue).
"invalid config" opens NCCL's refusals of a communicator's settings, which torch prints after
"Last error:" on a line of their own, without NCCL's "WARN" (LOG113: an older libnccl than
torch's). "interface found" ends NCCL's warnings that it found no network interface to use
("Bootstrap : no socket interface found", "NET/Socket : No usable listening interface found",
"Net : No interface found in the same subnet as remote address %s"), which torch prints the
same way after "Last error:". After blind split M: "event queue overflow" is the
Slingshot NIC's "Cassini Event Queue overflow detected." (libfabric's CXI provider, the
`libfabric` catalogue), quoted without libfabric's "<warn>" prefix (allenai/OLMo's LOG.md);
"rbac_access_denied" is Envoy's response detail when an Istio sidecar refuses a pod's
connection (the `envoy` catalogue); "fbgemm_gpu" names TorchRec's kernel library, whose
failure to load fbgemm_gpu prints without an error word ("File fbgemm_gpu_py.so not found",
meta-pytorch/torchrec#557); "not accessible" is NVSHMEM's "Peer GPU N is not accessible,
exiting" (the `nvshmem` catalogue). After blind split N: "due to shape mismatches" is
accelerate's debug-mode refusal of a collective whose tensors differ in shape across
processes, printed on the line after its DistributedOperationException; "disabled between"
is NCCL's INFO line "P2P is disabled between connected GPUs" (graph/paths.cc), pasted as the
evidence of a slow job, whose "P2P" holds a digit. After blind split O: "out of resource" is
Triton's OutOfResources ("out of resource: shared memory, Required: N, Hardware limit: M",
triton/runtime/errors.py), which the autotuner and torch.compile print after a class name
with no other gate word (the `triton` catalogue). After blind split P: "unknown backend" is
JAX's refusal when it has no GPU platform ("Unknown backend: 'gpu' requested, but no platforms
that are instances of gpu are present"), quoted without its RuntimeError. "triton
installation" is torch.compile's TritonMissing ("torch._inductor.exc.TritonMissing: Cannot
find a working triton installation", torch/_inductor/exc.py), whose class name holds no other
gate (the `torch` catalogue, LOG129). After blind split U: "zlibwapi" is the zlib DLL cuDNN 8
on Windows cannot find ("Could not locate zlibwapi.dll. Please make sure it is in your library
path!"), printed alone by the cuDNN library (the `cudnn` catalogue, LOG033). After blind split
W: "terminated abruptly" is concurrent.futures' BrokenProcessPool ("A process in the process
pool was terminated abruptly while the future was running or pending.",
Lib/concurrent/futures/process.py), whose class name spells no gate (the `python` catalogue,
LOG006), and "caught stopiteration" is nn.DataParallel re-raising a replica's StopIteration
("StopIteration: Caught StopIteration in replica 0 on device 0.", torch 1.5 and later: the
`torch` catalogue, LOG083). No gate
may hold a digit: the scan remembers a line that said nothing by its shape (digits read as 0) only
while every gate is digit-free (``diagnose/scan.py``, ``_digit_free_gates``); a first try,
"p2p or ib", made the realistic log of ``bench/diagnose_throughput.py`` 1.3 times slower.

How many there may be: the scan finds every gate in one pass over a chunk's distinct lines
of letters (``diagnose/line_gate.py``), so a gate costs one ``bytes.find`` over those few
distinct lines per chunk, plus the exact test on the lines its letters pick. What keeps
that cost bounded is not a count but what the words pick: none may pick a line of the noise
a long training log is made of (``diagnose/synthetic.py``: progress bars, metric rows, NCCL
INFO channel lines), which tests/diagnose/test_logrules.py holds, and ``nccl`` is never a
gate (NCCL's INFO lines are floods). Going from 18 gates to these 24 (and one more section
marker) cost nothing outside the noise on bench/diagnose_throughput.py's logs, timed as
whole processes in alternating pairs against the 18-gate tree, CPU-time ratio new/old,
median of 7 pairs: 1.03 on a 128 MB realistic log (pairs ranged 0.89-1.20), 1.05 on a
16 MB worst case (0.76-1.17); with the first 23 gates alone, 0.96 and 0.97. The 25th,
"gpu count", and the 26th, "nvcc fatal", came after that measurement and pass the same noise
test, as do "exits with return code", "communication broadband" and "daemon" after them
(29 in all); the gates of the day they came, timed the same way against the tree before them
(5 pairs, realistic 256 MB log), cost 1.01."""

# What a line's own wording says about how serious it is, whatever rule matched it. Every
# process of a job prints the same import-time warnings (torch's "UserWarning: Failed to
# initialize NumPy" from torch/csrc/utils/tensor_numpy.cpp, FutureWarnings of the libraries,
# c10's "[W socket.cpp:...]" and glog "W1125 ..." lines); a rank that died prints a
# traceback's final exception (c10/core/impl/alloc_cpu.cpp's "RuntimeError: [enforce fail at
# alloc_cpu.cpp:...] ... DefaultCPUAllocator: can't allocate memory"), a signal or an exit
# code. A cause read only from the first kind never outranks a cause read from the second.
WARNING_LINE = re.compile(
    r"\b[A-Z]\w*Warning: "  # Python's warnings module: UserWarning, FutureWarning, ...
    r"|^\s*\[?W\d{4} \d\d:\d\d"  # glog, as torch's Python and C++ loggers print it
    r"|^\s*\[W [\w.\-]+:\d+\]"  # c10's TORCH_WARN: "[W reducer.cpp:1300] Warning: ..."
    r"|^\s*(?:[\d/:.,T-]+ ){0,2}\[?WARNING\b"  # logging's level name, timestamps first
    r"|^\s*warnings\.warn\(")
FATAL_LINE = re.compile(
    r"^\s*(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Interrupt)\b(?::|\s*$)"
    r"|(?i:exitcode\s*:\s*-?[1-9]|\bsignal \d+ \(sig[a-z]+\)|terminated with signal"
    r"|^\s*killed\s*$|\bbus error\b|\bsegmentation fault\b|\(core dumped\)"
    r"|return code\s*=\s*-?[1-9]|non-zero exit status|\bterminate called\b"
    r"|^\s*abort(?:ed|ing)\b)")


def is_warning_line(line: str) -> bool:
    """Whether a line is a warning (and not also a fatal report)."""
    return bool(WARNING_LINE.search(line)) and not FATAL_LINE.search(line)


def is_fatal_line(line: str) -> bool:
    """Whether a line reports that a process failed: an exception, a signal, an exit code."""
    return bool(FATAL_LINE.search(line))


ANY_ERROR = "*"
"""``symptom_of`` wildcard: any other error-severity finding that is not itself a
``*``-symptom explains this line."""


ULTRALYTICS = "ultralytics"
"""The ``yolo`` command and ``ultralytics`` package (YOLOv8 and later): options are
``key=value`` (``device=0,1 batch=32 workers=4``)."""
YOLOV5 = "yolov5"
"""``train.py`` of YOLOv5 and the repositories built on it (YOLOv7, YOLOR, YOLOv9, forks):
argparse options (``--device 0,1 --batch-size 32 --workers 4``)."""
TRAINERS: tuple[str, ...] = (ULTRALYTICS, YOLOV5)


@dataclass(frozen=True)
class Variant:
    """A narrower reading of a rule's match, with the remediation that fits it.

    One signature can mean different things: "Expected all tensors to be on the same
    device" naming ``cuda:0 and cpu`` is an input left on the CPU, naming ``cuda:0 and
    cuda:1`` is a rank bound to the wrong GPU. And the same fix is typed differently in each
    trainer (``batch=16`` for ``yolo train``, ``--batch-size 16`` for YOLOv5's train.py).
    A variant applies when ``line`` (if set) is found in the matched line and ``trainer``
    (if set) is the trainer the log shows; its ``steps`` then replace the rule's, and its
    ``alternatives``/``decide`` replace the rule's when given. ``code`` gives a reading
    whose meaning differs its own code; only a line variant may set it, since the code is
    fixed when the line is read. ``examples`` are lines the ``line`` pattern must match.
    """

    steps: tuple[Step, ...]
    line: re.Pattern[str] | None = None
    trainer: str | None = None
    code: Code | None = None
    alternatives: tuple[str, ...] | None = None
    decide: tuple[Step, ...] | None = None
    examples: tuple[str, ...] = ()


@dataclass(frozen=True)
class Explains:
    """A relation between findings: the declaring rule's code is the cause of ``codes``.

    When a lead of one of ``codes`` and a finding of the declaring code are in the same log,
    the declaring finding leads and the lead's lines become its consequences
    (``diagnose/relations.py`` applies it). ``reason`` says why, in a sentence, with its
    source. The inverse of ``Rule.symptom_of``, for a cause that is only a warning by
    itself (Gloo's loopback fallback) and so is never a root the fold would pick.
    """

    codes: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class ReadAs:
    """A relation that needs environment evidence: in a log that shows ``environment``
    (one of the whole-log readings ``diagnose/context.py`` names: ``"wsl"``,
    ``"container"``, ...), a lead of one of ``leads`` (code ids) or of one of
    ``categories`` is read as ``code``. Declared beside the knowledge it concerns: on the
    rule of the lead (``leads`` and ``code`` left empty there mean the rule's own code)
    or on the rule of the reading. ``reason`` says why.
    """

    environment: str
    reason: str
    code: str = ""
    leads: tuple[str, ...] = ()
    categories: tuple[Category, ...] = ()


Relation = Union[Explains, ReadAs]


@dataclass(frozen=True)
class Rule:
    """A signature: what one failure looks like in a single log line, and what it means.

    ``pattern`` is searched in one line whose rank prefix is already stripped.
    ``symptom_of`` lists code ids (or ``"*"``) whose presence in the same log makes this
    rule's lines consequences of that finding rather than a finding of their own.
    ``alternatives`` name the other causes the text cannot exclude (each starts with a
    category id), and ``decide`` says exactly what to run to tell them apart.
    ``variants`` (first match wins) give the remediation that fits a particular line or
    trainer; ``read`` and ``for_trainer`` apply them.
    ``catalogue`` names the message catalogue a rule was made from (``catalogue.py``; empty
    for a hand-written rule) and ``specificity`` how many literal characters its template
    spells: they settle which reading of a line stands (``decided``).
    ``relations`` declare how this rule's code stands to others beyond ``symptom_of``
    (``Explains``, ``ReadAs``), each with its reason. ``bare_message`` is the message as
    users paste it without its exception type (an issue title): no gate word marks it, so
    it is looked for in a log where nothing else was read.
    """

    code: Code
    pattern: re.Pattern[str]
    anchors: tuple[str, ...]
    steps: tuple[Step, ...] = ()
    examples: tuple[str, ...] = ()
    symptom_of: tuple[str, ...] = ()
    alternatives: tuple[str, ...] = ()
    decide: tuple[Step, ...] = ()
    variants: tuple[Variant, ...] = ()
    catalogue: str = ""
    specificity: int = 0
    relations: tuple[Relation, ...] = ()
    bare_message: re.Pattern[str] | None = None

    def read(self, line: str) -> Rule:
        """This rule as it applies to one matched line.

        The first variant that needs only the line and finds it sets the code and the
        remediation. Trainer variants whose line condition fails are dropped, and so are
        those without one when a line variant applied (the line is the more specific), so
        that ``for_trainer`` later sees only the variants that fit this line.
        """
        if not self.variants:
            return self
        fits = [v for v in self.variants if v.line is None or v.line.search(line)]
        reading = next((v for v in fits if v.trainer is None and v.line is not None), None)
        kept = tuple(v for v in fits if v.trainer is not None
                     and (reading is None or v.line is not None))
        if reading is None:
            return self if kept == self.variants else replace(self, variants=kept)
        return _applied(self, reading, kept)

    def for_trainer(self, trainer: str | None) -> Rule:
        """This rule with the remediation written for ``trainer`` (one of ``TRAINERS``),
        when it has one; unchanged otherwise."""
        reading = next((v for v in self.variants if v.trainer is not None
                        and v.trainer == trainer), None)
        return self if reading is None else _applied(self, reading, ())


def _applied(rule: Rule, variant: Variant, kept: tuple[Variant, ...]) -> Rule:
    """``rule`` with ``variant``'s code and remediation."""
    return replace(rule, code=variant.code or rule.code, steps=variant.steps,
                   alternatives=rule.alternatives if variant.alternatives is None
                   else variant.alternatives,
                   decide=rule.decide if variant.decide is None else variant.decide,
                   variants=kept)


def decided(rules: list[_R]) -> list[_R]:
    """Of the rules that match one line, those whose reading of it stands.

    A hand-written rule was written for the lines it reads, so one that matches decides the
    line and catalogue entries (rules with a ``catalogue``) add nothing to it; a generic
    wrapper that is a symptom of any error (``"*"``: "unhandled cuda error") decides
    nothing, so the entry that reads the cause in the same line stands beside it. Of
    several entries one that is not itself such a wrapper, then the most specific one
    (``specificity``), is the reading: NCCL's "Cuda failure '%s'" gives way to the CUDA
    message quoted inside it. Works on anything
    with those attributes (the scan's ``RuleLike``), keeping order.
    """
    if len(rules) < 2 and not any(getattr(r, "catalogue", "") for r in rules):
        return rules
    written = [r for r in rules if not getattr(r, "catalogue", "")]
    if any(ANY_ERROR not in (getattr(r, "symptom_of", ()) or ()) for r in written):
        return written
    entries = [r for r in rules if getattr(r, "catalogue", "")]
    if not entries:
        return rules
    best = max(entries, key=lambda r: (ANY_ERROR not in (getattr(r, "symptom_of", ()) or ()),
                                       int(getattr(r, "specificity", 0))))
    return [r for r in rules if r is best or not getattr(r, "catalogue", "")]


@dataclass(frozen=True)
class Match:
    """A rule that matched, with the line of text that matched it."""

    rule: Rule
    line: str


def rx(*alternatives: str) -> re.Pattern[str]:
    """One case-insensitive pattern from alternatives, each of which spells an anchor."""
    return re.compile("|".join(f"(?:{a})" for a in alternatives), re.IGNORECASE)
