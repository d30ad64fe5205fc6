"""The codes ``ddp-doctor run`` reports about the user's own job (RUN…).

The log's own findings (LOG…, DIAG…) say why a job failed when its output shows it; these
say *how* it ended, which the output alone cannot: an exit status, a silence the doctor
cut short, a wall-clock deadline.
"""

from __future__ import annotations

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare

RUN_URL = "https://pytorch.org/docs/stable/elastic/run.html"

COMMAND_FAILED = declare(
    "RUN001", Category.COMMAND_FAILED, "The supervised command failed",
    what="The command given to `ddp-doctor run` exited with a non-zero status or was killed "
         "by a signal. The evidence names the status and the cause the log diagnosis found "
         "first (its own finding follows, with the failure category).",
    why="A failed launcher usually means a rank died; its output, kept in the log, is what "
        "says which rank and why.",
    fix="Read the findings that follow (the log's cause first); the whole output is in the "
        "log file named in the evidence.",
    docs_url=RUN_URL)
OUTPUT_STALLED = declare(
    "RUN002", Category.COLLECTIVE_TIMEOUT, "The supervised command went silent (hang)",
    what="The command printed nothing for longer than --stall-timeout and was stopped with "
         "everything it started. The evidence holds the last line printed and, when lines "
         "carry rank prefixes, the last line of each rank.",
    why="A DDP job that stops printing is most often waiting in a collective that another "
        "rank never reached; left alone it holds every GPU until the process-group timeout "
        "(10 to 30 minutes by default) or forever.",
    fix="Compare the ranks' last lines: the rank that got least far is the one to look at. "
        "Re-run with --nccl-debug (NCCL_DEBUG=INFO, TORCH_DISTRIBUTED_DEBUG=DETAIL) to see "
        "which collective each rank is in; if the job is only slow to print, raise "
        "--stall-timeout.",
    docs_url="https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html")
TIMED_OUT = declare(
    "RUN003", Category.PERFORMANCE_DEGRADED, "The supervised command ran past --timeout",
    what="The command kept printing but was still running at the wall-clock deadline "
         "(--timeout), so it was stopped with everything it started.",
    why="A job that was expected to finish in this time is slower than planned: an "
        "overloaded or throttled machine, the CPU instead of the GPUs, or a deadline that "
        "is too short for the work.",
    fix="Read the last lines of the log for how far it got; raise --timeout if the job was "
        "simply longer, or use --until REGEX to stop at a known milestone.",
    docs_url=RUN_URL)
