"""What one smoke run (or a scaling pair) returns: the JSON ``smoke`` object and its
findings, and the report row, the one-line summary and the ``proved`` block made of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ddp_doctor.model import CheckResult, Finding, Status, status_of
from ddp_doctor.smoke.launch import SmokeOptions, backend_for
from ddp_doctor.wording import count

CHECK_ID, CHECK_TITLE, AREA = "smoke.train", "DDP smoke training", "smoke"


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


def skipped(reason: str) -> SmokeResult:
    return SmokeResult({"ok": None, "skipped": reason})


def base_data(options: SmokeOptions, device: str, nproc: int, world: int) -> dict[str, Any]:
    """The ``smoke`` object before the run: every key, nothing measured yet."""
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
