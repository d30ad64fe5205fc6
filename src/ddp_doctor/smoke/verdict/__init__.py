"""Judging a finished smoke run: failure findings, the pass criteria, and measurements.

Pure functions of what the run left behind (rank events, the launcher's and ranks'
stderr, the exit code and which deadline fired), so they can be tested on recorded runs.
One module per job: ``context`` (the ``RunContext`` they all read, rerun commands),
``failures`` (a failed, killed or stalled run), ``criteria`` (a run that ended cleanly:
did it train), ``nodes`` (a multi-node run: do the nodes agree, which one never joined)
``measurements`` (timings, throughput, bandwidth) and ``performance`` (the transport NCCL
chose and its bandwidth against the topology, slow ranks). The entry points
``smoke/run.py`` calls are re-exported here.
"""

from __future__ import annotations

from ddp_doctor.smoke.verdict.context import RunContext
from ddp_doctor.smoke.verdict.criteria import criteria_findings, loss_curve, loss_trend
from ddp_doctor.smoke.verdict.failures import failure_findings
from ddp_doctor.smoke.verdict.measurements import measurements, phase_timings
from ddp_doctor.smoke.verdict.nodes import judge_nodes

__all__ = [
    "RunContext",
    "criteria_findings",
    "failure_findings",
    "judge_nodes",
    "loss_curve",
    "loss_trend",
    "measurements",
    "phase_timings",
]
