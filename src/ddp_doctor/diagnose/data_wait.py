"""A training loop that spends most of each step waiting for its data, read from its own
progress lines.

The progress lines of most vision code bases print, beside the loss, how long a step took and
how much of it went to fetching the batch: torchvision's reference scripts and every code base
that copied their ``MetricLogger`` ("time: 0.4321 (0.4512)  data: 0.0123 (0.0150)",
references/classification/utils.py, ``log_every``: the time from one batch to the next, and
the part of it spent in the DataLoader's ``next``), detectron2's ``CommonMetricPrinter``
("time: 0.4321  data_time: 0.0123", detectron2/utils/events.py) and the loggers modelled on
them ("batch_time: 0.43s, data_time: 0.01s"; mmcv's "time: 0.432, data_time: 0.012"). A
healthy loop spends a few percent of a step in data; where the data part is most of the
step, the GPUs wait for the input pipeline: too few (or too many) DataLoader workers for the
CPU cores, a slow disk or network file system, heavy decoding on the CPU. That is the
commonest cause of multi-GPU training that is slower than it should be (PyTorch's performance
tuning guide, https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html: "enable async
data loading and augmentation").

Why a reading of its own: a user asking why pre-training is slow pastes these lines and no
error (klauscc/VindLU#10: "time: 40.1906  data: 38.0570", 32 workers per GPU on a slow disk);
no rule reads them, and the words of the question may not say "slow". The first logged step is
left out (it includes starting the workers), and a step's data time must be at least
``DATA_SHARE`` of its time in most of the lines read. diagnose asks it only where nothing else
was found, before the statements of slowness in words.
"""

from __future__ import annotations

import re
from statistics import median

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.diagnose.scan import ScanResult
from ddp_doctor.model import Evidence, Finding, Severity, Step
from ddp_doctor.wording import count

# "time: 40.1906  data: 38.0570", "time: 0.4321 (0.4512)  data: 0.0123 (0.0150)",
# "time: 0.4321  data_time: 0.0123", "batch_time: 0.43s, data_time: 0.01s",
# "iter_time: 0.43 (0.45), data_time: 0.01 (0.02)": the step's time, then the data's.
PROGRESS = re.compile(
    r"\b(?:batch_|iter_)?time\s*[:=]\s*(?P<step>\d+(?:\.\d+)?)\s*s?(?:\s*\([\d.]+\s*s?\))?"
    r"[\s,|]+data(?:_time)?\s*[:=]\s*(?P<data>\d+(?:\.\d+)?)\s*s?\b",
    re.IGNORECASE | re.ASCII)
# The step a progress line reports: "[  200/10175]", "iter: 200", "Iter: 200/90000".
STEP_INDEX = re.compile(r"\[\s*(?P<bracket>\d+)\s*/\s*\d+\s*\]|\biter(?:ation)?\s*[:=]?\s*"
                        r"(?P<iter>\d+)\b", re.IGNORECASE | re.ASCII)
DATA_SHARE = 0.5  # the data part of a step, at or above which the loop waits for its input
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


def _first_step(line: str) -> bool:
    """Whether the progress line reports the loop's first step (index 0), whose data time
    includes starting the workers."""
    index = STEP_INDEX.search(line)
    return index is not None and int(index["bracket"] or index["iter"]) == 0


def data_bound(scan: ScanResult) -> Finding | None:
    """The performance finding of a log whose progress lines show steps spent mostly
    waiting for data, or None."""
    many = len(scan.documents) > 1
    read: list[tuple[float, str, str]] = []  # (data share, where, line)
    for context in scan.contexts:
        for number, line in context.numbered_lines():
            found = PROGRESS.search(line)
            if found is None or _first_step(line):
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
    return Finding(
        DATA_BOUND,
        f"The progress lines show {share:.0%} of each step spent waiting for data",
        (*evidence, Evidence("reading", f"data time / step time, median over "
                                        f"{count(len(read), 'progress line')}: {share:.0%} "
                                        f"(at or above {DATA_SHARE:.0%}: data-bound)")),
        STEPS, docs_url=DATA_BOUND.docs_url)
