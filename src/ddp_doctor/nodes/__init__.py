"""Do the nodes of a multi-node job agree? One summary per node, one judgement for all.

``summary`` says what a node is made of (from a facts snapshot, or from the smoke job's
worker on that node), ``agree`` compares the summaries field by field against the
majority and turns each difference that matters into a NOD finding (``codes``). ``compare``
and the multi-node smoke job both judge through ``agree``, so a difference means the same
whether it was found in files or inside the job.
"""

from ddp_doctor.nodes.agree import Comparison, Row, compare_nodes
from ddp_doctor.nodes.summary import NodeSummary, summary_from_facts, summary_from_report

__all__ = ["Comparison", "NodeSummary", "Row", "compare_nodes", "summary_from_facts",
           "summary_from_report"]
