"""``ddp-doctor run``: supervise the user's own job and diagnose it when it fails.

``supervise`` runs the command unchanged, copies its output through and into a log, ends
it (and everything it started) at the first deadline; ``judge`` turns how it ended into a
RUN finding and the log into the ``diagnose`` engine's findings. Gathering the machine's
facts and writing the reports belong to ``ddp_doctor.app.run``.
"""

from __future__ import annotations

from ddp_doctor.job.judge import diagnose_log, established, job_result, problem_results
from ddp_doctor.job.supervise import (
    NCCL_DEBUG_ENV,
    JobOptions,
    JobOutcome,
    supervise,
)

__all__ = ["NCCL_DEBUG_ENV", "JobOptions", "JobOutcome", "diagnose_log", "established",
           "job_result", "problem_results", "supervise"]
