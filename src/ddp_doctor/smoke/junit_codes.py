"""Which of the smoke job's codes fail which of its pass criteria, for the JUnit report.

The JUnit renderer shows one test case per criterion (``report.junit.CRITERIA``); which
finding fails which case is the smoke job's knowledge, written here beside its codes and
handed to the renderer by whoever renders (``app/outputs.py``): a renderer lies under the
smoke job and never imports it.
"""

from __future__ import annotations

from ddp_doctor.report.junit import SmokeCodes
from ddp_doctor.smoke import codes as C

SMOKE_CODES = SmokeCodes(
    fails={
        "smoke.all_steps": frozenset({C.STEPS_MISSING.id}),
        "smoke.loss_finite": frozenset({C.LOSS_NOT_FINITE.id}),
        "smoke.loss_falls": frozenset({C.LOSS_FLAT.id, C.LOSS_NOT_JUDGED.id}),
        "smoke.ranks_in_sync": frozenset({C.PARAMS_DIFFER.id, C.PARAMS_DIFFER_GLOO.id}),
        "smoke.all_reduce": frozenset({C.ALLREDUCE_WRONG.id, C.ALLREDUCE_WRONG_GLOO.id}),
    },
    loss_not_finite=C.LOSS_NOT_FINITE.id,
    loss_not_judged=C.LOSS_NOT_JUDGED.id,
)
