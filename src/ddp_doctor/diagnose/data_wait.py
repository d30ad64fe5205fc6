"""A training loop that spends most of each step waiting for its data, read from its own
progress lines.

The progress lines of most vision code bases print, beside the loss, how long a step took and
how much of it went to fetching the batch: torchvision's reference scripts and every code base
that copied their ``MetricLogger`` ("time: 0.4321  data: 0.0123", references/classification/
utils.py, ``log_every``: each the average over the last 20 steps of the time from one batch to
the next and of the part spent in the DataLoader's ``next``), detectron2's
``CommonMetricPrinter`` ("time: 0.4321  data_time: 0.0123" in v0.6, "time: 0.4321  last_time:
0.4400  data_time: 0.0123  last_data_time: 0.0100" later; detectron2/utils/events.py) and the
loggers modelled on them ("batch_time: 0.43s, data_time: 0.01s"). A healthy loop spends a few
percent of a step in data; where the data part is most of the step, the GPUs wait for the
input pipeline: too few (or too many) DataLoader workers for the CPU cores, a slow disk or
network file system, heavy decoding on the CPU. That is the commonest cause of multi-GPU
training that is slower than it should be (PyTorch's performance tuning guide,
https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html: "enable async data loading
and augmentation").

Why a reading of its own: a user asking why pre-training is slow pastes these lines and no
error (klauscc/VindLU#10: "time: 40.1906  data: 38.0570", 32 workers per GPU on a slow disk);
no rule reads them, and the words of the question may not say "slow". What it leaves out:
the first ``WARM_STEPS`` steps (their averages hold the first batch, which waits for the
workers to start; the step index may sit a line or two above a wrapped progress line) and
evaluation loops ("Test:", "Eval", "Val" headers: no optimizer step, so data is most of a
short step). A step's data time must be at least ``DATA_SHARE`` of its time in most of the
lines read; read from fewer than ``FEW_LINES`` lines the finding says it is low confidence.
diagnose asks it only where nothing else was found, no error line reports a failure (a
metric named "error" does not) and the text does not say the process was killed.
"""

from __future__ import annotations

import re
from statistics import median

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.diagnose.fallback import shows_a_failure
from ddp_doctor.diagnose.scan import ScanResult
from ddp_doctor.diagnose.similar import error_lines
from ddp_doctor.model import Evidence, Finding, Severity, Step
from ddp_doctor.wording import count

# "time: 40.1906  data: 38.0570", "time: 0.4321  last_time: 0.44  data_time: 0.0123",
# "batch_time: 0.43s, data_time: 0.01s", "iter_time: 0.43 (0.45), data_time: 0.01 (0.02)": the
# step's time, then the data's. Every run of separators is bounded: unbounded ones made a line
# of blanks after "time: 1" a quadratic search (0.5 s for 8,000 blanks).
_SEP = r"[ \t,|]{1,8}"
PROGRESS = re.compile(
    r"\b(?:batch_|iter_)?time[ \t]{0,3}[:=][ \t]{0,3}(?P<step>\d+(?:\.\d+)?)s?"
    r"(?:[ \t]{0,3}\([\d.]{1,12}s?\))?" + _SEP
    + r"(?:last_time[ \t]{0,3}[:=][ \t]{0,3}[\d.]{1,12}s?" + _SEP + r")?"
    r"data(?:_time)?[ \t]{0,3}[:=][ \t]{0,3}(?P<data>\d+(?:\.\d+)?)s?\b",
    re.IGNORECASE | re.ASCII)
# The step a progress line reports: "iter: 200", "Step [200/600]", "Iter: 200/90000", else the
# last "[  200/10175]" of the line (an epoch's "[3/100]" comes first where both are printed).
STEP_NAMED = re.compile(r"\b(?:iter(?:ation)?|step)\s*[:=]?\s*\[?\s*(?P<n>\d+)\b",
                        re.IGNORECASE | re.ASCII)
STEP_BRACKET = re.compile(r"\[\s*(?P<n>\d+)\s*/\s*\d+\s*\]", re.ASCII)
# An evaluation loop's header before the times (torchvision's "Test:", mmengine's
# "Epoch(val)" / "Iter(test)", others' "Eval"/"Val"): no backward pass, so data is most of a
# short step.
EVALUATION = re.compile(r"\b(?:test|eval\w*|val|valid\w*|inference)\b", re.IGNORECASE)
# A metric named "error" ("train error: 0.231", normalised "train error: <n>"), no failure
METRIC = re.compile(r"\berror\s*[:=]\s*(?:[\d.]+|<n>)\s*(?:[,;|]|$)", re.IGNORECASE)
LOOK_BACK = 3  # lines above a progress line where its step index and header may sit (wrapped)
WARM_STEPS = 20  # SmoothedValue's window: the averages of the first steps hold the first batch
DATA_SHARE = 0.5  # the data part of a step, at or above which the loop waits for its input
FEW_LINES = 3  # read from fewer lines, the finding says it is low confidence
MAX_LINES = 400  # progress lines read, at most
MAX_QUOTES = 2

DATA_BOUND = declare(
    "DIAG028", Category.PERFORMANCE_DEGRADED,
    "The training loop spends most of each step waiting for its data",
    what="The job's own progress lines give each step's time and the part of it spent "
         "fetching the batch (torchvision's MetricLogger 'time: ... data: ...', detectron2's "
         "'time: ... data_time: ...'), and the data part is half the step or more: the GPUs "
         "wait for the input pipeline.",
    why="Training runs at the speed the DataLoader delivers batches, not the GPUs': adding "
        "GPUs does not help, and each rank's workers compete for the same CPU cores and "
        "disk.",
    fix="Give the input pipeline what it lacks: DataLoader num_workers near the CPU cores per "
        "GPU (not far above), pin_memory=True and persistent_workers=True, OMP_NUM_THREADS=1 "
        "for the workers, the data on a local fast disk (or pre-decoded / packed into fewer "
        "files), lighter CPU augmentation; then check the data time falls.",
    severity=Severity.WARNING,
    docs_url="https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html")

STEPS: tuple[Step, ...] = (
    Step("See how many CPU cores each rank's workers share, and how busy they are while "
         "training (all cores busy: fewer workers or lighter decoding; idle: the disk).",
         command="nproc; top -b -n 1 | head -20"),
    Step("Measure the disk the data is read from (a network or spinning disk cannot feed "
         "several GPUs with small files).",
         command="df -h .; iostat -x 1 3"),
    Step("Time the DataLoader alone, without the model: if it delivers no faster than the "
         "training steps, the input pipeline is the limit.",
         command="python -c \"import time; from train import loader; t=time.time(); "
                 "[b for _, b in zip(range(100), loader)]; "
                 "print((time.time()-t)/100, 's/batch')\""),
)


def _step(text: str) -> int | None:
    """The step index ``text`` reports, or None."""
    named = STEP_NAMED.search(text)
    if named is not None:
        return int(named["n"])
    brackets = STEP_BRACKET.findall(text)
    return int(brackets[-1]) if brackets else None


def _warming_or_evaluating(lines: list[tuple[int, str]], at: int, times_at: int) -> bool:
    """Whether the progress line at index ``at`` (its times starting at ``times_at``) reports
    one of the first ``WARM_STEPS`` steps or an evaluation loop, judged on its text before the
    times and the ``LOOK_BACK`` lines above it back to the nearest step index (a progress line
    wrapped by the terminal or the issue form keeps its "[  200/10175]" a line or two above
    its "time:")."""
    for back in range(at, max(-1, at - LOOK_BACK - 1), -1):
        text = lines[back][1][:times_at] if back == at else lines[back][1]
        if EVALUATION.search(text):
            return True
        step = _step(text)
        if step is not None:
            return step < WARM_STEPS
    return False


def nothing_failed(scan: ScanResult) -> bool:
    """Whether no error line of the log reports a failure (a metric named "error" does not)."""
    return not shows_a_failure([line for line in error_lines(scan) if not METRIC.search(line)])


def data_bound(scan: ScanResult) -> Finding | None:
    """The performance finding of a log whose progress lines show steps spent mostly
    waiting for data, or None."""
    many = len(scan.documents) > 1
    read: list[tuple[float, str, str]] = []  # (data share, where, line)
    for context in scan.contexts:
        lines = context.numbered_lines()
        for at, (number, line) in enumerate(lines):
            found = PROGRESS.search(line)
            if found is None or _warming_or_evaluating(lines, at, found.start()):
                continue
            step, data = float(found["step"]), float(found["data"])
            if step <= 0 or data > step * 1.05:  # not a step and its data part
                continue
            where = f"{context.document} line {number}" if many else f"line {number}"
            read.append((data / step, where, line.strip()))
            if len(read) >= MAX_LINES:
                break
    if not read or median(share for share, _, _ in read) < DATA_SHARE:
        return None
    slowest = sorted(read, key=lambda r: -r[0])[:MAX_QUOTES]
    evidence = tuple(Evidence(where, text[:300], "the log") for _, where, text in slowest)
    share = median(s for s, _, _ in read)
    few = "LOW CONFIDENCE (few lines): " if len(read) < FEW_LINES else ""
    return Finding(
        DATA_BOUND,
        f"{few}The progress lines show {share:.0%} of each step spent waiting for data",
        (*evidence, Evidence("reading", f"data time / step time, median over "
                                        f"{count(len(read), 'progress line')}: {share:.0%} "
                                        f"(at or above {DATA_SHARE:.0%}: data-bound)")),
        STEPS, docs_url=DATA_BOUND.docs_url)
