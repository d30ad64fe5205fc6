"""The parent side of the smoke-training job: launch it, watch it, stop it, judge it.

``run_smoke`` starts the DDP job (torchrun by default) in the interpreter being
diagnosed, tails every rank's event file, stops the whole process tree at the first of
three deadlines (a rank silent for the stall deadline, the wall-clock deadline, or the
launcher exiting), and turns what the ranks left behind into findings and measurements.
Whatever happens, nothing it started is alive when it returns: SIGTERM, SIGHUP and
SIGINT to the doctor during a run raise ``Interrupted`` so the cleanup still runs, and
are forwarded to the job (``ddp_doctor.process``). Which device it trains on is
``device.py``'s; what it returns, ``result.py``'s.

Run directory: a temporary one (``ddp-doctor-smoke-*`` under $TMPDIR) is removed when the
run passes or is interrupted, and kept when it fails, for the user to read (its path is in
``run_dir`` of the result). A directory given with ``run_dir`` is never removed. With
``keep_run_dir`` (``--bundle``) a passed run's directory is kept as ``kept_run_dir`` of the
result, for the bundle to copy; the caller removes it afterwards.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from ddp_doctor.facts.snapshot import Facts
from ddp_doctor.facts.view import FactsView
from ddp_doctor.forensics.capture import capture_stacks, gone_ranks
from ddp_doctor.forensics.flight import keep_records, request_dumps
from ddp_doctor.model import Evidence, Finding, Status, Step, status_of
from ddp_doctor.process.signals import StopRequest, stop_signals_raise
from ddp_doctor.process.tree import ProcessTree
from ddp_doctor.smoke import codes as C
from ddp_doctor.smoke.device import forget, not_proven, resolve_device, shared_gpus
from ddp_doctor.smoke.launch import (
    TORCHRUN_LOGS,
    SmokeOptions,
    child_env,
    free_port,
    launch_command,
    new_tag,
    node_layout,
    port_in_use,
    shim_dir,
    torchrun_log_dir,
    with_nproc,
    worker_args,
)
from ddp_doctor.smoke.monitor import Outcome, RankState, rendezvous_peers, supervise
from ddp_doctor.smoke.progress import ProgressSink
from ddp_doctor.smoke.result import SmokeResult, base_data, proved, skipped
from ddp_doctor.smoke.verdict import (
    RunContext,
    criteria_findings,
    failure_findings,
    judge_nodes,
    loss_curve,
    loss_trend,
    measurements,
    phase_timings,
)
from ddp_doctor.smoke.verdict.performance import performance
from ddp_doctor.train_smoke.events import event_path, stacks_path, stderr_path
from ddp_doctor.wording import count


class SmokeUsageError(Exception):
    """Options that cannot work together (exit code 2)."""


# Names other modules import from here, kept while they do: the result and the progress
# sink (app/, tests/), which live in result.py and progress.py.
_base_data = base_data
__all__ = ["ProgressSink", "SmokeResult", "SmokeUsageError", "Trainer", "job_world",
           "proved", "run_once", "run_smoke", "skipped"]


# Another trainer than the builtin job: options and progress in, a judged result out.
Trainer = Callable[[SmokeOptions, "ProgressSink | None"], SmokeResult]


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def run_once(options: SmokeOptions, progress: ProgressSink | None = None,
             label: str = "smoke", facts: Facts | None = None) -> SmokeResult:
    """One launch of the job on this node, judged; with ``facts`` (``doctor``) its speed is
    also judged against the machine's links and each GPU's state."""
    layout = node_layout(options, dict(os.environ))
    if layout.nnodes > 1 and layout.master_port is None:
        raise SmokeUsageError("--nnodes > 1 needs --master-port (the same on every node)")
    resolved = resolve_device(options)
    if isinstance(resolved, Finding):
        data = base_data(options, options.device, options.nproc or 0, 0)
        return SmokeResult(data, [resolved])
    device, nproc = resolved
    world = nproc * layout.nnodes if options.mode == "ddp" else 1
    data = base_data(options, device, nproc, world)
    data["gpus_shared"] = shared_gpus(options, device, nproc)
    wall, stall, pg = options.deadlines()
    port = layout.master_port
    if port is None:
        port = free_port()
    elif layout.node_rank == 0 and options.mode == "ddp" and port_in_use(port):
        finding = Finding(C.PORT_TAKEN, f"Port {port} given by --master-port is already in use",
                          (Evidence("master port", str(port), "bind() failed: EADDRINUSE"),),
                          (Step("See which process holds it.",
                                command=f"ss -ltnp 'sport = :{port}'"),
                           Step("Use another port, or leave --master-port out to get a free "
                                "one.")))
        return SmokeResult(data, [finding])

    own_dir = options.run_dir is None
    run_dir = Path(options.run_dir or tempfile.mkdtemp(prefix="ddp-doctor-smoke-"))
    run_dir.mkdir(parents=True, exist_ok=True)
    tag = new_tag()
    workers = options.workers if options.workers is not None else (2 if device == "cuda" else 1)
    multi = layout.nnodes > 1 and options.mode == "ddp"
    cmd = launch_command(options, layout, port, nproc,
                         worker_args(options, run_dir, tag, device, workers, pg,
                                     exchange_nodes=multi and options.node_exchange))
    data["command"] = " ".join(cmd)
    # Each node expects its ranks to follow nproc x node_rank; the ranks report their real
    # numbers (nodes may run different counts), and the states take those on.
    expected_first = layout.node_rank * nproc if options.mode == "ddp" else 0
    ranks = [RankState(expected_first + local, event_path(str(run_dir), local))
             for local in range(nproc if options.mode == "ddp" else 1)]
    nccl_run = data["backend"] == "nccl"
    env = child_env(shim_dir(run_dir), nproc, run_dir if nccl_run else None)
    env["PET_LOG_DIR"] = str(torchrun_log_dir(run_dir))
    out_path, err_path = run_dir / "launcher.stdout", run_dir / "launcher.stderr"
    started = time.monotonic()
    with stop_signals_raise() as request:
        try:
            outcome = _launch_and_watch(cmd, env, run_dir, out_path, err_path, tag, ranks,
                                        started, wall, stall, progress, label, options.steps,
                                        port if multi else None, request)
        except BaseException:
            if own_dir:
                shutil.rmtree(run_dir, ignore_errors=True)
            raise
        finally:
            shutil.rmtree(run_dir / TORCHRUN_LOGS, ignore_errors=True)
    if isinstance(outcome, OSError):
        if own_dir:  # nothing ran: nothing to read, and the result names no directory
            shutil.rmtree(run_dir, ignore_errors=True)
        return SmokeResult(data, [Finding(C.LAUNCH_FAILED, f"The smoke job could not start: "
                                          f"{outcome.strerror or outcome}",
                                          (Evidence("command", data["command"], ""),))])
    world = job_world(ranks, world)
    first_rank = min(s.rank for s in ranks)
    data["ranks"] = world
    ctx = RunContext(ranks, outcome, options.steps, world,
                     _read(err_path) + "\n" + _read(out_path),
                     {s.rank: _read(Path(stderr_path(str(run_dir), local)))
                      for local, s in enumerate(ranks)},
                     stall, wall, options.mode, data["backend"], options,
                     (layout.master_addr, port), layout.nnodes if multi else 1,
                     layout.node_rank)
    clean = outcome.stopped_by is None and outcome.returncode == 0
    findings = (criteria_findings(ctx) if clean else
                failure_findings(ctx, first_rank))
    comparison = judge_nodes(ranks) if multi else None
    if comparison is not None:  # the same records on every node: the same findings
        findings += comparison.findings
    _fill(data, ctx, outcome.started)
    rank_texts = [_read(err_path), _read(out_path), *ctx.rank_stderr.values()]
    perf, slow = performance(ranks, data["measurements"] or {}, run_dir, rank_texts,
                             dict(os.environ), nccl_run,
                             FactsView.of(facts) if facts is not None else None,
                             layout.nnodes if multi else 1, options.sync_bn)
    data.update(perf)
    if clean:  # a run that failed has its cause; its speed is not the news
        findings += slow
        data["loss_judged"] = not any(f.code is C.LOSS_NOT_JUDGED for f in findings)
    data.update(ok=status_of(findings) is not Status.FAIL,
                wall_s=round(outcome.wall_s, 3), exit_code=outcome.returncode,
                stopped_by=outcome.stopped_by, run_dir=str(run_dir))
    kept = None
    if data["ok"] and own_dir:
        if options.keep_run_dir:
            kept = str(run_dir)
        else:
            shutil.rmtree(run_dir, ignore_errors=True)
        data["run_dir"] = None
    return SmokeResult(data, findings, kept_run_dir=kept,
                       nodes=comparison.to_dict() if comparison is not None else None)


def job_world(ranks: list[RankState], expected: int) -> int:
    """The job's world size as its ranks saw it; ``expected`` before any rank said so.

    Differs from this node's nproc x nnodes when the nodes run different numbers of ranks.
    """
    seen = {s.world_size for s in ranks if s.world_size}
    return seen.pop() if len(seen) == 1 else expected


def _launch_and_watch(cmd: list[str], env: dict[str, str], run_dir: Path, out_path: Path,
                      err_path: Path, tag: str, ranks: list[RankState], started: float,
                      wall: float, stall: float, progress: ProgressSink | None, label: str,
                      steps: int, peers_port: int | None = None,
                      request: StopRequest | None = None) -> Outcome | OSError:
    """Start the launcher and supervise it; everything it started is ended on the way out
    (with the signal the doctor was sent, in ``request``, forwarded first).

    With ``peers_port`` (a multi-node run), a run stopped by a deadline first records who
    had reached the rendezvous on that port, while the processes still hold their
    connections: a node that never joined is named from that.
    """
    tree: ProcessTree | None = None
    begun = False
    try:
        try:
            with open(out_path, "wb") as out, open(err_path, "wb") as err:
                tree = ProcessTree.start(cmd, tag, env, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=err, cwd=str(run_dir))
        except OSError as exc:
            return exc
        if progress is not None:
            begun = True
            progress.begin(label, [s.rank for s in ranks], steps)
        outcome = supervise(tree, ranks, started, wall, stall,
                            progress.update if progress is not None else None)
        if outcome.stopped_by is not None and peers_port is not None:
            outcome.peers = rendezvous_peers(tree.alive(), peers_port)
        if outcome.stopped_by is not None:  # where each rank waits, before any is stopped
            if progress is not None:
                progress.note("reading every rank's stack before stopping the job")
            _read_stacks(outcome, tree, ranks, run_dir)
    finally:
        if tree is not None:
            tree.stop(request=request)
        if begun and progress is not None:
            progress.end()
    if outcome.returncode is None:
        outcome.returncode = tree.proc.returncode
    return outcome


def _read_stacks(outcome: Outcome, tree: ProcessTree, ranks: list[RankState],
                 run_dir: Path) -> None:
    """Every live rank's stack (py-spy, else its faulthandler), and the ranks gone."""
    pids: dict[int, int] = {}
    files: dict[int, Path] = {}
    for local, state in enumerate(ranks):
        start = state.startup
        if isinstance(start.get("pid"), int):
            pids[start["pid"]] = state.rank
            files[start["pid"]] = Path(stacks_path(str(run_dir), local))
    alive = tree.alive()
    outcome.stacks = capture_stacks(alive, pids, files)
    outcome.gone = gone_ranks({rank: pid for pid, rank in pids.items()}, alive)
    # Each rank's Flight Recorder (train_smoke/flight.py), written beside its event file.
    outcome.flight = request_dumps(run_dir, len(pids))
    keep_records(outcome.flight, run_dir)
    for stack in outcome.stacks:  # kept with the run for the user and the support bundle
        if stack.raw and stack.rank is not None:
            with contextlib.suppress(OSError):
                (run_dir / f"stack-rank{stack.rank}.txt").write_text(stack.raw,
                                                                     encoding="utf-8")


def _fill(data: dict[str, Any], ctx: RunContext, started: float) -> None:
    curve = loss_curve(ctx.ranks)
    if curve:
        trend = loss_trend(curve)
        data.update(loss_first=round(trend.first, 6), loss_last=round(trend.last, 6),
                    loss_trend=trend.to_dict())
    data["steps_done"] = min((s.steps_done for s in ctx.ranks), default=0)
    checks = [s.ended("checksum") for s in ctx.ranks]
    if all(checks) and checks and ctx.mode == "ddp":  # one replica (dp) has nothing to compare
        data["params_in_sync"] = all(c.get("in_sync") for c in checks if c)
    reduces = [s.ended("all_reduce_check") for s in ctx.ranks]
    if all(reduces) and reduces:
        data["all_reduce_ok"] = all(r.get("ok") for r in reduces if r)
    data["measurements"] = measurements(ctx.ranks, started)
    data["per_rank"] = [{"rank": s.rank, "steps_done": s.steps_done, "phase": s.where,
                         "done": s.done, "phases": phase_timings(s, started)}
                        for s in ctx.ranks]


def run_smoke(options: SmokeOptions, progress: ProgressSink | None = None,
              train: Trainer | None = None, facts: Facts | None = None) -> SmokeResult:
    """The smoke job, with what it proved; a run that wanted GPUs and found none says so.

    ``train`` runs another trainer instead of the builtin job (``--trainer ultralytics``:
    ``smoke.ultralytics.trainer.run_ultralytics``, which builds on this module, hence
    passed in rather than imported here).

    With ``scaling``, on 1 rank then on N, with speedup and efficiency. ``facts`` (what
    ``doctor`` gathered) let the verdict judge the transport and bandwidth against the
    topology and name a slow rank's GPU state.
    """
    forget()
    if progress is not None and options.device != "cpu":
        progress.note(f"asking torch in {options.python} which GPUs it can use")
    try:
        result = _run_smoke(options, progress, train, facts)
        if result.data.get("skipped"):
            return result
        result.data["proved"] = proved(result.data, options)
        if result.data["proved"]["cpu_fallback"]:  # the probe's answer says why: asked once
            result.findings.insert(0, not_proven(options, result.data))
        return result
    finally:
        forget()


def _run_smoke(options: SmokeOptions, progress: ProgressSink | None,
               train: Trainer | None, facts: Facts | None = None) -> SmokeResult:
    if train is not None:
        return train(options, progress)
    if not options.scaling:
        return run_once(options, progress, facts=facts)
    resolved = resolve_device(options)
    if isinstance(resolved, Finding):
        return SmokeResult(base_data(options, options.device, 0, 0), [resolved])
    device, nproc = resolved
    if nproc < 2:  # 1 rank against 1 rank measures noise, not scaling: run it once
        once = run_once(with_nproc(options, nproc, device), progress, facts=facts)
        once.data["scaling"] = {
            "ranks": nproc, "images_per_s_1": None, "images_per_s_n": None, "speedup": None,
            "efficiency": None,
            "not_measured": ("--mode dp trains in one process; scaling compares 1 and N "
                             "DDP ranks" if options.mode == "dp" else
                             f"only {count(nproc, 'rank')} can run on {device} here; scaling "
                             "needs 2 or more"),
        }
        return once
    single = run_once(replace(with_nproc(options, 1, device), keep_run_dir=False), progress,
                      "1 rank")
    full = run_once(with_nproc(options, nproc, device), progress, f"{nproc} ranks",
                    facts=facts)
    one = (single.data.get("measurements") or {}).get("images_per_s_total")
    many = (full.data.get("measurements") or {}).get("images_per_s_total")
    speedup = many / one if one and many else None
    full.data["scaling"] = {
        "ranks": nproc, "images_per_s_1": one, "images_per_s_n": many,
        "speedup": round(speedup, 3) if speedup else None,
        "efficiency": round(speedup / nproc, 3) if speedup else None,
    }
    seen = {f.code.id for f in full.findings}
    full.findings += [f for f in single.findings if f.code.id not in seen]
    full.data["ok"] = bool(full.data["ok"]) and bool(single.data["ok"])
    full.data["wall_s"] = round(full.data["wall_s"] + single.data["wall_s"], 3)
    return full
