"""The parent side of the smoke-training job: launch it, watch it, stop it, judge it.

``run_smoke`` starts the DDP job (torchrun by default) in the interpreter being
diagnosed, tails every rank's event file, stops the whole process tree at the first of
three deadlines (a rank silent for the stall deadline, the wall-clock deadline, or the
launcher exiting), and turns what the ranks left behind into findings and measurements.
Whatever happens, nothing it started is alive when it returns: SIGTERM, SIGHUP and
SIGINT to the doctor during a run raise ``SmokeInterrupted`` so the cleanup still runs
(the previous handlers are restored afterwards).

Run directory: a temporary one (``ddp-doctor-smoke-*`` under $TMPDIR) is removed when the
run passes or is interrupted, and kept when it fails, for the user to read (its path is in
``run_dir`` of the result). A directory given with ``run_dir`` is never removed. With
``keep_run_dir`` (``--bundle``) a passed run's directory is kept as ``kept_run_dir`` of the
result, for the bundle to copy; the caller removes it afterwards.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from ddp_doctor.facts.seam import run_with_deadline
from ddp_doctor.facts.snapshot import Facts
from ddp_doctor.facts.view import FactsView
from ddp_doctor.forensics.capture import capture_stacks, gone_ranks
from ddp_doctor.forensics.flight import keep_records, request_dumps
from ddp_doctor.model import CheckResult, Evidence, Finding, Status, Step, status_of
from ddp_doctor.smoke import codes as C
from ddp_doctor.smoke.launch import (
    SmokeOptions,
    backend_for,
    child_env,
    free_port,
    launch_command,
    new_tag,
    node_layout,
    port_in_use,
    shim_dir,
    with_nproc,
    worker_args,
)
from ddp_doctor.smoke.monitor import Outcome, RankState, Reaper, rendezvous_peers, supervise
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

CHECK_ID, CHECK_TITLE, AREA = "smoke.train", "DDP smoke training", "smoke"
_PROBE = ("import json, torch; ok = torch.cuda.is_available(); print(json.dumps({'cuda': ok, "
          "'gpus': torch.cuda.device_count() if ok else 0, 'torch': torch.__version__, "
          "'cuda_build': torch.version.cuda}))")
# What a loaded NVIDIA driver leaves behind: the kernel module's version file and control
# node natively, the paravirtual GPU device under WSL2.
_DRIVER_MARKERS = ("/proc/driver/nvidia/version", "/dev/nvidiactl", "/dev/dxg")
_probed: dict[str, dict[str, Any] | Finding] = {}  # per interpreter, within one run_smoke


class SmokeUsageError(Exception):
    """Options that cannot work together (exit code 2)."""


class SmokeInterrupted(SystemExit):
    """The doctor got SIGTERM/SIGHUP/SIGINT during a run; exit status 128 + signal."""


_STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP", "SIGINT")
                      if hasattr(signal, n))


@contextmanager
def stop_signals_raise() -> Iterator[None]:
    """While inside, a stop signal raises SmokeInterrupted (once); old handlers come back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired: list[int] = []

    def handler(signum: int, _frame: Any) -> None:
        if not fired:  # a second signal must not interrupt the cleanup
            fired.append(signum)
            raise SmokeInterrupted(128 + signum)

    previous = {sig: signal.signal(sig, handler) for sig in _STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


class ProgressSink(Protocol):
    """Where live progress goes: the terminal's per-rank bars, plain lines for a CI log, or
    nothing (``-q``, or a report on stdout)."""

    def note(self, text: str) -> None: ...

    def begin(self, label: str, ranks: list[int], steps: int) -> None: ...

    def update(self, states: list[RankState]) -> None: ...

    def end(self) -> None: ...


@dataclass
class SmokeResult:
    """One smoke run (or a scaling pair): the JSON ``smoke`` object and its findings."""

    data: dict[str, Any]
    findings: list[Finding] = field(default_factory=list)
    kept_run_dir: str | None = None  # a passed run's temporary directory kept for --bundle
    # A multi-node run: every node's summary compared (Comparison.to_dict(), the Report's
    # ``nodes``), the same on every node because the ranks exchanged their summaries.
    nodes: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return bool(self.data.get("ok"))

    def check_result(self) -> CheckResult:
        """The run as one row of the report, so verdict and exit code count it."""
        if self.data.get("skipped"):
            return CheckResult(CHECK_ID, CHECK_TITLE, AREA, Status.SKIP, self.data["skipped"],
                               skip_reason=self.data["skipped"])
        return CheckResult(CHECK_ID, CHECK_TITLE, AREA, status_of(self.findings),
                           summarize(self.data),
                           findings=tuple(self.findings), duration_s=self.data.get("wall_s", 0))


def summarize(data: dict[str, Any]) -> str:
    """One line: ranks × steps, the loss, sync, speed."""
    if data.get("skipped"):
        return str(data["skipped"])
    if data.get("trainer") == "ultralytics":
        u = data.get("ultralytics") or {}
        loss = (f", box loss {data['loss_first']:.3g} → {data['loss_last']:.3g}"
                if data.get("loss_first") is not None else "")
        return (f"Ultralytics, {count(int(data.get('ranks') or 0), 'rank')} on "
                f"{data.get('device')}, {u.get('epochs_done', 0)}/{u.get('epochs', 0)} "
                f"epochs{loss}, {data.get('wall_s', 0):.1f} s")
    m = data.get("measurements") or {}
    shared = data.get("gpus_shared")
    where = (f"{count(int(shared), 'shared GPU')} (gloo)" if shared else data.get("device"))
    parts = [f"{count(int(data.get('ranks') or 0), 'rank')} on {where}, "
             f"{data.get('steps_done')}/{data.get('steps')} steps"]
    if data.get("loss_first") is not None and data.get("loss_last") is not None:
        parts.append(f"loss {data['loss_first']:.3g} → {data['loss_last']:.3g}"
                     + (" (not judged: too few steps)" if data.get("loss_judged") is False
                        else ""))
    if data.get("params_in_sync") is not None:
        parts.append("params in sync" if data["params_in_sync"] else "params differ")
    if m.get("images_per_s_total"):
        parts.append(f"{m['images_per_s_total']:.0f} img/s")
    parts.append(f"{data.get('wall_s', 0):.1f} s")
    return ", ".join(parts)


# Another trainer than the builtin job: options and progress in, a judged result out.
Trainer = Callable[[SmokeOptions, "ProgressSink | None"], SmokeResult]


def skipped(reason: str) -> SmokeResult:
    return SmokeResult({"ok": None, "skipped": reason})


def _probe(options: SmokeOptions) -> dict[str, Any] | Finding:
    """What the interpreter's torch sees; asked once per interpreter within a run_smoke."""
    if options.python not in _probed:
        _probed[options.python] = _ask_torch(options)
    return _probed[options.python]


def _ask_torch(options: SmokeOptions) -> dict[str, Any] | Finding:
    result = run_with_deadline([options.python, "-c", _PROBE], timeout=90)
    if result.ok:
        try:
            answer = json.loads(result.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            answer = None
        if isinstance(answer, dict):
            return answer
    return Finding(C.LAUNCH_FAILED, f"torch cannot be imported by {options.python}",
                   (Evidence("import torch", result.describe_failure(), options.python),),
                   (Step("Install torch in the interpreter you train with, or point the "
                         "doctor at it with --python.",
                         url="https://pytorch.org/get-started/locally/"),))


def resolve_device(options: SmokeOptions) -> tuple[str, int] | Finding:
    """The device and process count for this node: as given, else one rank per GPU or 2 CPU."""
    if options.device == "cpu":
        return "cpu", 1 if options.mode == "dp" else (options.nproc or 2)
    probe = _probe(options)
    if isinstance(probe, Finding):
        return probe
    gpus = int(probe.get("gpus") or 0)
    if options.device == "auto" and gpus == 0:
        return "cpu", 1 if options.mode == "dp" else (options.nproc or 2)
    nproc = 1 if options.mode == "dp" else (options.nproc or gpus)
    # gloo may put several ranks on one GPU (NCCL refuses two ranks on one device): the
    # explicit way to prove the multi-rank CUDA paths where fewer GPUs than ranks exist.
    shared = options.backend == "gloo" and options.mode == "ddp"
    if gpus == 0 or (options.mode == "ddp" and nproc > gpus and not shared):
        title = (f"The smoke job was asked to train on CUDA but {options.python} sees no "
                 "usable GPU" if gpus == 0 else
                 f"The smoke job needs {count(nproc, 'GPU')} but {options.python} sees only "
                 f"{gpus} usable")
        return Finding(C.NO_GPU, title, (Evidence("torch.cuda.device_count()", str(gpus),
                                                  "smoke probe"),),
                       (Step("See why GPUs are not usable.", command="ddp-doctor check"),
                        Step("Or run the smoke job on the CPU.",
                             command="ddp-doctor smoke --device cpu"),
                        *((Step("Or let the ranks share the GPUs over gloo (NCCL across "
                                "GPUs is then not proven).",
                                command=f"ddp-doctor smoke --nproc {nproc} --backend gloo"),)
                          if gpus else ())))
    return "cuda", nproc


def _shared_gpus(options: SmokeOptions, device: str, nproc: int) -> int | None:
    """How many GPUs this node's ranks share when there are fewer than ranks (gloo)."""
    if device != "cuda" or options.mode != "ddp":
        return None
    probe = _probe(options)
    gpus = int(probe.get("gpus") or 0) if isinstance(probe, dict) else 0
    return gpus if 0 < gpus < nproc else None


def _base_data(options: SmokeOptions, device: str, nproc: int, world: int) -> dict[str, Any]:
    return {
        "ok": False, "skipped": None, "device": device,
        "backend": backend_for(options, device),
        "launcher": "none" if options.mode == "dp" else options.launcher,
        "mode": options.mode, "model": options.model, "imgsz": options.imgsz,
        "batch": options.batch, "ranks": world, "local_ranks": nproc, "steps": options.steps,
        "steps_done": 0, "loss_first": None, "loss_last": None, "params_in_sync": None,
        "all_reduce_ok": None, "wall_s": 0.0, "exit_code": None, "command": None,
        "run_dir": None, "loss_judged": None, "measurements": None, "per_rank": [], "scaling": None,
    }


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
        data = _base_data(options, options.device, options.nproc or 0, 0)
        return SmokeResult(data, [resolved])
    device, nproc = resolved
    world = nproc * layout.nnodes if options.mode == "ddp" else 1
    data = _base_data(options, device, nproc, world)
    data["gpus_shared"] = _shared_gpus(options, device, nproc)
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
    out_path, err_path = run_dir / "launcher.stdout", run_dir / "launcher.stderr"
    started = time.monotonic()
    with stop_signals_raise():
        try:
            outcome = _launch_and_watch(cmd, env, run_dir, out_path, err_path, tag, ranks,
                                        started, wall, stall, progress, label, options.steps,
                                        port if multi else None)
        except BaseException:
            if own_dir:
                shutil.rmtree(run_dir, ignore_errors=True)
            raise
    if isinstance(outcome, OSError):
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
                      steps: int, peers_port: int | None = None) -> Outcome | OSError:
    """Start the launcher and supervise it; everything it started is ended on the way out.

    With ``peers_port`` (a multi-node run), a run stopped by a deadline first records who
    had reached the rendezvous on that port, while the processes still hold their
    connections: a node that never joined is named from that.
    """
    proc: subprocess.Popen[bytes] | None = None
    reaper: Reaper | None = None
    begun = False
    try:
        try:
            with open(out_path, "wb") as out, open(err_path, "wb") as err:
                proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                        env=env, cwd=str(run_dir), start_new_session=True)
        except OSError as exc:
            return exc
        reaper = Reaper(proc, tag)
        if progress is not None:
            begun = True
            progress.begin(label, [s.rank for s in ranks], steps)
        outcome = supervise(proc, reaper, ranks, started, wall, stall,
                            progress.update if progress is not None else None)
        if outcome.stopped_by is not None and peers_port is not None:
            outcome.peers = rendezvous_peers(reaper.alive(), peers_port)
        if outcome.stopped_by is not None:  # where each rank waits, before any is stopped
            if progress is not None:
                progress.note("reading every rank's stack before stopping the job")
            _read_stacks(outcome, reaper, ranks, run_dir)
    finally:
        if proc is not None:
            (reaper or Reaper(proc, tag)).stop()
        if begun and progress is not None:
            progress.end()
    if outcome.returncode is None:
        outcome.returncode = proc.returncode
    return outcome


def _read_stacks(outcome: Outcome, reaper: Reaper, ranks: list[RankState],
                 run_dir: Path) -> None:
    """Every live rank's stack (py-spy, else its faulthandler), and the ranks gone."""
    pids: dict[int, int] = {}
    files: dict[int, Path] = {}
    for local, state in enumerate(ranks):
        start = state.startup
        if isinstance(start.get("pid"), int):
            pids[start["pid"]] = state.rank
            files[start["pid"]] = Path(stacks_path(str(run_dir), local))
    alive = reaper.alive()
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


def cpu_fallback_reason(probe: dict[str, Any], environ: dict[str, str]) -> str:
    """Why torch saw no usable GPU, in the words a user can act on."""
    version = probe.get("torch") or "?"
    if not probe.get("cuda_build"):
        return f"torch {version} is a CPU-only build: it carries no CUDA runtime"
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1", "none", "NoDevFiles"):
        return f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU from the job"
    if not any(os.path.exists(marker) for marker in _DRIVER_MARKERS):
        return (f"no NVIDIA driver is loaded ({', '.join(_DRIVER_MARKERS)} are all missing), "
                f"so torch {version} (CUDA {probe['cuda_build']}) finds no GPU")
    return (f"torch {version} (CUDA {probe['cuda_build']}) sees no usable CUDA device: "
            "torch.cuda.is_available() is False although a driver is loaded")


def _not_proven(options: SmokeOptions, data: dict[str, Any]) -> Finding:
    """The warning that a run wanted GPUs, found none and trained on the CPU instead."""
    probe = _probe(options)
    why = (cpu_fallback_reason(probe, dict(os.environ)) if isinstance(probe, dict)
           else "torch could not be asked")
    ranks = data.get("ranks") or 0
    return Finding(
        C.GPU_NOT_PROVEN, "GPU training not proven: no usable GPU, so the smoke job ran on "
        "the CPU", (
            Evidence("asked for", "--device auto: the GPUs when torch can use them",
                     "smoke options"),
            Evidence("ran on", f"the CPU with gloo, {count(ranks, 'rank')}",
                     "smoke job"),
            Evidence("why no GPU", why, f"{options.python} -c 'import torch; ...'")),
        (Step("See the cause: the checks name it (driver, torch build, visible devices).",
              command="ddp-doctor check"),
         Step("Once the GPUs are usable, prove GPU training; --device cuda fails instead of "
              "falling back to the CPU.", command="ddp-doctor smoke --device cuda"),
         Step("If the CPU was what you wanted, say so and this warning goes away.",
              command="ddp-doctor smoke --device cpu")))


def proved(data: dict[str, Any], options: SmokeOptions) -> dict[str, Any]:
    """What a finished run demonstrated, for a CI step to gate on."""
    device = data.get("device")
    return {
        "gpu_training": bool(data.get("ok")) and device == "cuda",
        "device": device,
        "backend": data.get("backend"),
        "launcher": data.get("launcher"),
        "world_size": data.get("ranks"),
        "mixed_precision": bool(options.amp and device == "cuda"),
        "cpu_fallback": options.device == "auto" and device == "cpu",
        # NCCL between GPUs was exercised only when NCCL ran on two or more ranks that did
        # not share a GPU (a 1-rank NCCL job moves nothing between GPUs).
        "nccl_across_gpus": bool(data.get("ok")) and data.get("backend") == "nccl"
        and int(data.get("ranks") or 0) > 1,
        "gpus_shared": data.get("gpus_shared"),
    }


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
    _probed.clear()
    if progress is not None and options.device != "cpu":
        progress.note(f"asking torch in {options.python} which GPUs it can use")
    try:
        result = _run_smoke(options, progress, train, facts)
        if result.data.get("skipped"):
            return result
        result.data["proved"] = proved(result.data, options)
        if result.data["proved"]["cpu_fallback"]:  # the probe's answer says why: asked once
            result.findings.insert(0, _not_proven(options, result.data))
        return result
    finally:
        _probed.clear()


def _run_smoke(options: SmokeOptions, progress: ProgressSink | None,
               train: Trainer | None, facts: Facts | None = None) -> SmokeResult:
    if train is not None:
        return train(options, progress)
    if not options.scaling:
        return run_once(options, progress, facts=facts)
    resolved = resolve_device(options)
    if isinstance(resolved, Finding):
        return SmokeResult(_base_data(options, options.device, 0, 0), [resolved])
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
