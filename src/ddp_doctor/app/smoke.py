"""``smoke``: the smoke-training job on its own, its options judged here, the policy's
smoke requirements applied.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Optional, TypeVar

from ddp_doctor import __version__
from ddp_doctor.app.outputs import emit, now_iso, progress_sink, remove_kept
from ddp_doctor.app.requests import Common, SmokeRequest, check_common, interpreter, load_policy
from ddp_doctor.model import Report
from ddp_doctor.policy.apply import apply_policy
from ddp_doctor.policy.load import Policy
from ddp_doctor.report.smoke import render_smoke_console
from ddp_doctor.smoke import device as smoke_device
from ddp_doctor.smoke import run as smoke_run
from ddp_doctor.smoke.launch import (
    CHOICES,
    LIMITS,
    MODEL_STRIDES,
    OptionsError,
    SmokeOptions,
    check_options,
    node_layout,
)
from ddp_doctor.smoke.ultralytics.trainer import run_ultralytics
from ddp_doctor.usage import (
    UsageError,
    one_of,
)

T = TypeVar("T")


def run_smoke(common: Common, request: SmokeRequest) -> int:
    """Train the small DDP job here and judge it (and the policy's smoke requirements)."""
    check_common(common)
    policy = _smoke_policy(common.config)
    options = _smoke_options(request, keep_run_dir=common.bundle is not None)
    if policy is not None and policy.wants_scaling:
        options = replace(options, scaling=True)
    try:
        check_options(options)
        node_layout(options, dict(os.environ))
        if request.python:
            options = replace(options, python=interpreter(request.python))
        if options.sync_bn and options.device == "auto":
            options = _sync_bn_device(options)
        if options.trainer == "ultralytics":
            result = smoke_run.run_smoke(options, progress_sink(common), run_ultralytics)
        else:
            result = smoke_run.run_smoke(options, progress_sink(common))
    except (smoke_run.SmokeUsageError, OptionsError) as exc:
        raise UsageError(str(exc)) from None
    try:
        report = Report(tool_version=__version__, created_at=now_iso(),
                        results=(result.check_result(),),
                        environment={"python_executable": options.python}, smoke=result.data,
                        nodes=result.nodes)
        if policy is not None:
            report = apply_policy(report, policy, None)
        emit(report, common, smoke_dir=result.kept_run_dir, view=render_smoke_console)
    finally:
        remove_kept(result.kept_run_dir)
    return report.exit_code(common.strict)


def _smoke_options(request: SmokeRequest, keep_run_dir: bool) -> SmokeOptions:
    """The typed options as SmokeOptions; each number's form is judged here, with its
    limits (``check_options`` then judges the values together)."""
    for name in CHOICES:
        one_of(f"--{name}", getattr(request, name), CHOICES[name])
    defaults = SmokeOptions()

    def whole(name: str, text: Optional[str]) -> Optional[int]:
        return LIMITS[name].whole_number(text)

    stall = LIMITS["stall_timeout"].number(request.stall_timeout)
    return SmokeOptions(
        device=request.device, nproc=whole("nproc", request.nproc),
        steps=_or(whole("steps", request.steps), defaults.steps),
        batch=_or(whole("batch", request.batch_per_process), defaults.batch),
        imgsz=_or(_imgsz(request.imgsz), defaults.imgsz),
        model=request.model, workers=whole("workers", request.workers),
        launcher=request.launcher, mode=request.mode, sync_bn=request.sync_bn,
        backend=request.backend,
        amp=request.amp, scaling=request.scaling,
        timeout=_or(LIMITS["timeout"].number(request.timeout), defaults.timeout),
        stall_timeout=stall, nnodes=whole("nnodes", request.nnodes),
        node_rank=whole("node_rank", request.node_rank), master_addr=request.master_addr,
        master_port=whole("master_port", request.master_port), keep_run_dir=keep_run_dir,
        trainer=request.trainer)


def _imgsz(text: Optional[str]) -> Optional[int]:
    """--imgsz's form only: its range comes with the nearest valid sizes (check_options)."""
    if text is not None and not text.strip().lstrip("+-").isdigit():
        raise UsageError(f"--imgsz {text!r}: not a whole number; use a multiple of "
                         f"{max(MODEL_STRIDES)}, {LIMITS['imgsz'].allowed}")
    return int(text) if text is not None else None


def _or(value: Optional[T], default: T) -> T:
    return default if value is None else value


def _sync_bn_device(options: SmokeOptions) -> SmokeOptions:
    """--sync-bn with --device auto: CUDA when torch sees GPUs, else a usage error."""
    resolved = smoke_device.resolve_device(options)
    if isinstance(resolved, tuple):
        check_options(options, resolved[0])
        return replace(options, device=resolved[0])
    return options  # torch is unusable: the smoke run reports it as a finding


def _smoke_policy(config: Optional[Path]) -> Optional[Policy]:
    """The policy's smoke requirements only: `smoke` gathers no facts to judge the others."""
    policy = load_policy(config)
    if policy is None:
        return None
    return replace(policy, min_gpus=None, min_driver_version=None, torch_versions=None)
