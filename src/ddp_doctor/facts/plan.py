"""The launch plan: the job the user is about to run, as a fact the checks can read.

``--gpus N``, ``--global-batch B`` and ``--workers W`` describe the training, not the machine,
so they are not probed: the CLI turns them into the ``plan`` fact before the checks run,
for a live run and for a replayed ``--facts`` snapshot alike, and ``--save-facts`` keeps
it so a support engineer replays the customer's plan too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddp_doctor.facts.snapshot import FactRecord, Facts

if TYPE_CHECKING:  # the shapes are for the type checker: check imports this before its probe
    from ddp_doctor.facts.shapes import PlanFact

DEFAULT_SCRIPT = "train.py"


def make_plan(gpus: int | None = None, batch: int | None = None, workers: int | None = None,
              script: str = DEFAULT_SCRIPT) -> PlanFact:
    """The plan fact's value; ``None`` for what the user did not say."""
    return {"gpus": gpus, "batch": batch, "workers": workers, "script": script}


def is_empty(plan: PlanFact) -> bool:
    return all(plan.get(k) is None for k in ("gpus", "batch", "workers"))


def apply_plan(facts: Facts, plan: PlanFact) -> None:
    """Set the ``plan`` fact. An empty plan keeps a replayed snapshot's own plan, if any."""
    if is_empty(plan) and facts.available("plan"):
        return
    facts.add(FactRecord("plan", ok=True, value=dict(plan)))
