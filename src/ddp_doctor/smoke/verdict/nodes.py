"""The nodes of a multi-node smoke job: do they agree, and which one never joined.

Every node's ranks gathered each node's record once after init (``train_smoke/nodeinfo.py``)
and its local rank 0 wrote them all in its event file, so every node's supervisor reads
the same records and judges them with ``nodes.compare_nodes``, the judgement
``ddp-doctor compare`` makes: every node reports the same NOD findings, each naming the
odd node with every node's value. A node that never joined left no record anywhere; it is
named from who had reached the rendezvous port when the run was stopped
(``monitor.rendezvous_peers``).
"""

from __future__ import annotations

from typing import Any, cast

from ddp_doctor.facts.driver_files import parse_module_version
from ddp_doctor.facts.nvml import decode_cuda_driver_version
from ddp_doctor.facts.sizing import nccl_version_text
from ddp_doctor.model import Evidence, Finding, Step
from ddp_doctor.nodes import Comparison, NodeSummary, compare_nodes
from ddp_doctor.nodes import codes as N
from ddp_doctor.nodes.summary import relevant_env
from ddp_doctor.smoke.monitor import RankState
from ddp_doctor.smoke.verdict.context import RunContext
from ddp_doctor.wording import count

# The worker's keys that NodeSummary holds as they come (the others are decoded below).
_AS_IS = ("host", "python", "torch", "torch_cuda", "torch_git", "cudnn", "gpu_count", "ranks",
          "gpu_models", "gpu_memory", "interfaces", "ib_active", "packages")


def node_records(ranks: list[RankState]) -> list[dict[str, Any]] | None:
    """Every node's record as this node's ranks received them, or None before the exchange."""
    for state in sorted(ranks, key=lambda s: s.rank):
        ended = state.ended("nodes")
        if ended is not None and isinstance(ended.get("nodes"), list):
            return [r for r in ended["nodes"] if isinstance(r, dict)]
    return None


def summary_from_worker(record: dict[str, Any]) -> NodeSummary:
    """A NodeSummary from a worker's record, decoded with the doctor's own probes' helpers."""
    out: dict[str, Any] = {k: record[k] for k in _AS_IS if record.get(k) is not None}
    if "torch" in out and "torch_cuda" not in out:
        out["torch_cuda"] = None  # a CPU build: known, not missing
    nccl = nccl_version_text(record.get("nccl"))
    if nccl:
        out["nccl"] = nccl
    driver = parse_module_version(str(record.get("driver") or ""))
    if driver:
        out["driver"] = driver
    code = record.get("cuda_driver")
    cuda_driver = decode_cuda_driver_version(code if isinstance(code, int) else None)
    if cuda_driver:
        out["cuda_driver"] = cuda_driver
    if isinstance(record.get("env"), dict):
        out["env"] = relevant_env({str(k): str(v) for k, v in record["env"].items()})
    return cast(NodeSummary, out)


def node_name(record: dict[str, Any]) -> str:
    """"node 1 (gpu-a7)": the node rank every node agrees on, and its host name."""
    host = record.get("host")
    return f"node {record.get('node_rank')}" + (f" ({host})" if host else "")


def judge_nodes(ranks: list[RankState]) -> Comparison | None:
    """The nodes compared, from the records this node's ranks received (None without)."""
    records = node_records(ranks)
    if not records:
        return None
    return compare_nodes([node_name(r) for r in records],
                         [summary_from_worker(r) for r in records], fewer_is_odd=True)


def _node_list(nodes: list[int]) -> str:
    return ", ".join(str(n) for n in nodes)


def missing_node_findings(ctx: RunContext) -> list[Finding]:
    """NOD014 for a multi-node run stopped while waiting for nodes that never joined.

    On node 0, which hosts the rendezvous store, the count of accepted connections says
    how many nodes' launchers arrived (one connection per node, its own included, for
    torchrun's agents and the spawn launcher alike); on any other node, whether the store
    on node 0 answered at all. With two nodes the missing one is always named; with more,
    node 0 can count the missing nodes but not tell which ranks they have (the store holds
    no node rank before every node is in), and says so. Empty when nothing shows a node
    missing (all members arrived, or the connections could not be read): the usual
    findings then apply.
    """
    peers = ctx.outcome.peers
    if ctx.nnodes < 2 or peers is None or peers.joined is None:
        return []
    # The nodes' launchers meet first (torchrun's agents; the spawn launcher's processes
    # agreeing on each node's rank count, train_smoke/spawn_layout.py) and start the ranks
    # only once every node is in: a rank that wrote anything means every node had joined.
    if any(s.events for s in ctx.ranks):
        return []
    spawn = ctx.options is not None and ctx.options.launcher == "spawn"
    members, per, unit = ctx.nnodes, 1, "node launcher" if spawn else "node agent"
    others = [n for n in range(ctx.nnodes) if n != ctx.node_rank]
    addr, port = ctx.master or ("MASTER_ADDR", "MASTER_PORT")
    evidence = [Evidence("this node", f"node {ctx.node_rank} of {ctx.nnodes}", "smoke options")]
    if ctx.node_rank == 0:
        arrived = peers.joined
        if arrived >= members:
            return []
        missing = (members - arrived + per - 1) // per
        evidence.append(Evidence(f"reached {addr}:{port}",
                                 f"{arrived} of {count(members, unit)}"
                                 + (f" (from {', '.join(peers.remote)})" if peers.remote
                                    else ""), "TCP connections of the rendezvous store"))
        if missing >= len(others):
            named = others
            title = (f"Node {_node_list(named)} never joined the job" if len(named) == 1 else
                     f"Nodes {_node_list(named)} never joined the job")
        else:
            named = []
            title = (f"{count(missing, 'node')} of nodes {_node_list(others)} never joined "
                     "the job (the store cannot tell which before all are in)")
    else:
        if peers.reached_host:
            if ctx.nnodes > 2:
                evidence.append(Evidence(f"reached {addr}:{port}", "yes: node 0 is up",
                                         "TCP connections"))
                return [_missing(ctx, [], "A node other than node 0 and this one never "
                                 "joined the job", evidence)]
            return []  # node 0 answered and only the two of us are expected: not missing
        named = [0]
        evidence.append(Evidence(f"reached {addr}:{port}", "no connection: node 0's "
                                 "rendezvous store never answered", "TCP connections"))
        title = "Node 0 never joined the job: its rendezvous store did not answer"
    evidence += [Evidence(f"rank {s.rank}", "never started (the launcher waits for every "
                          "node before it starts the ranks)" if not s.events else
                          f"waiting in {s.open_phase or s.where}", "event file")
                 for s in ctx.ranks]
    return [_missing(ctx, named, title, evidence)]


def _missing(ctx: RunContext, named: list[int], title: str,
             evidence: list[Evidence]) -> Finding:
    addr, port = ctx.master or ("MASTER_ADDR", "MASTER_PORT")
    steps = [Step(N.NODE_MISSING.fix),
             Step("Check that the missing node can reach the rendezvous port.",
                  command=f"nc -zv {addr} {port}")]
    if named:
        steps.append(Step(f"Start the same command on node {_node_list(named)}.",
                          command=ctx.rerun(node_rank=named[0])))
    return Finding(N.NODE_MISSING, title, tuple(evidence), tuple(steps),
                   affects=tuple(f"node:{n}" for n in named))
