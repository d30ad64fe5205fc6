"""What one node is made of, in the few fields that decide whether nodes can train together.

A summary is a small JSON-able dict, so the smoke job's workers can exchange it over the
job's own process group and ``compare`` can build it from files. Every key is optional: a
JSON report knows less than a facts snapshot, and a value nobody could read is left out
rather than guessed (``agree`` never calls a missing value a difference).
"""

from __future__ import annotations

from typing import Any, Optional, TypedDict, Union, cast

from ddp_doctor.facts.sizing import nccl_version_text
from ddp_doctor.facts.snapshot import Facts
from ddp_doctor.facts.view import FactsView

PACKAGES = ("torchvision", "torchaudio", "ultralytics", "numpy", "accelerate", "deepspeed",
            "lightning", "pytorch-lightning", "transformers", "triton", "nvidia-nccl-cu11",
            "nvidia-nccl-cu12", "nvidia-nccl-cu13", "nvidia-cudnn-cu11", "nvidia-cudnn-cu12")
"""Packages whose versions should agree across nodes (those that change what ranks run)."""

NO_TORCH = "(no torch)"
"""The torch value of a node whose probe found no importable torch."""

ENV_PREFIXES = ("NCCL_", "TORCH_", "CUDA_VISIBLE_DEVICES", "TORCH_NCCL_", "GLOO_")
"""Variables that change how collectives run; compared name by name."""

_IGNORED_ENV = frozenset({"NCCL_DEBUG_FILE", "TORCH_HOME", "TORCHELASTIC_RUN_ID",
                          "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
                          "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE",
                          "TORCH_NCCL_ASYNC_ERROR_HANDLING_DEFAULT",
                          # Flight Recorder's dump paths: a file per node by nature (the
                          # smoke job always sets them, under its own run directory).
                          "TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"})
"""Set per process by torchrun, per node by nature, or harmless when they differ."""


class NodeSummary(TypedDict, total=False):
    host: str
    python: str  # "3.11.7"
    torch: str  # "2.5.1+cu124"
    torch_cuda: Optional[str]  # "12.4"; None for a CPU build
    torch_git: str
    cudnn: str
    nccl: str  # "2.21.5"
    driver: str  # "550.54.15"
    cuda_driver: str  # "12.4"
    gpu_count: int
    ranks: int  # processes this node runs in a smoke job (only from the job's exchange)
    gpu_models: list[str]
    gpu_memory: list[int]
    env: dict[str, str]
    interfaces: list[str]
    ib_active: list[str]  # "mlx5_0:1"
    packages: dict[str, str]
    kernel: str
    shm_bytes: int
    memory_limit: int
    net_plugin: str  # NCCL's network plugin, or "internal" (from NCCL INFO lines)
    nccl_network: str  # the network NCCL chose: "IB", "Socket", "IBext_v8", ...


def relevant_env(environ: dict[str, str]) -> dict[str, str]:
    """The variables of ``environ`` that nodes should agree on."""
    return {k: v for k, v in sorted(environ.items())
            if k.startswith(ENV_PREFIXES) and k not in _IGNORED_ENV}


def summary_from_facts(facts: Union[Facts, FactsView]) -> NodeSummary:
    """A node's summary from a facts snapshot (``--save-facts``, a bundle's facts.json)."""
    view = FactsView.of(facts)
    out: dict[str, Any] = {}
    os_fact, python, build = view.os(), view.python(), view.torch_build()
    _put(out, "host", os_fact.get("hostname"))
    _put(out, "python", python.get("version"))
    if view.torch().get("importable") or build.get("version"):
        _put(out, "torch", build.get("version"))
        out["torch_cuda"] = build.get("cuda")
        _put(out, "torch_git", build.get("git_version"))
    elif view.available("torch") and view.torch().get("probe", {}).get("completed", True):
        out["torch"] = NO_TORCH  # the probe ran and torch did not import: that is known
    libraries = view.torch_libraries()
    cudnn = libraries.get("cudnn_version")
    _put(out, "cudnn", str(cudnn) if cudnn else None)
    _put(out, "nccl", nccl_version_text(libraries.get("nccl_version")))
    nvml = view.nvml()
    _put(out, "driver", nvml.get("driver_version"))
    _put(out, "cuda_driver", nvml.get("cuda_driver_version"))
    gpus = view.nvml_gpus()
    if nvml.get("initialized") or gpus:
        out["gpu_count"] = len(gpus)
        out["gpu_models"] = [str(g.get("name") or "?") for g in gpus]
        out["gpu_memory"] = [int(g.get("memory_total") or 0) for g in gpus]
    elif view.torch_cuda().get("device_count") is not None:
        devices = view.cuda_devices()
        out["gpu_count"] = int(view.torch_cuda().get("device_count") or 0)
        out["gpu_models"] = [str(d.get("name") or "?") for d in devices]
    if view.available("env_vars"):
        out["env"] = relevant_env(dict(view.env_vars()))
    link = view.interconnect()
    if link.get("interfaces") is not None:
        out["interfaces"] = sorted(str(i.get("name")) for i in link.get("interfaces") or []
                                   if i.get("name"))
    if link.get("infiniband") is not None:
        out["ib_active"] = sorted(f"{p.get('device')}:{p.get('port')}"
                                  for p in link.get("infiniband") or [] if p.get("active"))
    if view.available("python"):
        versions = {}
        for name in PACKAGES:
            found = view.package_versions(name)
            if found:
                versions[name] = found[0]
        out["packages"] = versions
    _put(out, "kernel", os_fact.get("kernel"))
    host = view.host()
    shm = host.get("shm") or {}
    if shm.get("total"):
        out["shm_bytes"] = int(shm["total"])
    if host.get("cgroup_memory_limit"):
        out["memory_limit"] = int(host["cgroup_memory_limit"] or 0)
    return cast(NodeSummary, out)


def summary_from_report(data: dict[str, Any]) -> NodeSummary:
    """A node's summary from a JSON report's ``environment`` (less than a snapshot holds)."""
    env = data.get("environment") or {}
    out: dict[str, Any] = {}
    _put(out, "python", env.get("python"))
    _put(out, "torch", env.get("torch"))
    if env.get("torch"):
        out["torch_cuda"] = env.get("torch_cuda")
    _put(out, "driver", env.get("driver"))
    _put(out, "cuda_driver", env.get("driver_cuda"))
    gpus = env.get("gpus")
    if isinstance(gpus, list):
        out["gpu_count"] = len(gpus)
        out["gpu_models"] = [str(g or "?") for g in gpus]
    _put(out, "kernel", env.get("kernel"))
    return cast(NodeSummary, out)


def _put(out: dict[str, Any], key: str, value: Any) -> None:
    if value not in (None, ""):
        out[key] = value
