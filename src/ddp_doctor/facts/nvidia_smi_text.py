"""The raw text of ``nvidia-smi -q`` and ``nvidia-smi topo -m``, for the support bundle.

The checks read NVML directly (``nvml.py``); a support engineer, though, reads
``nvidia-smi`` output, and the bundle must not run anything after the checks (every
artifact comes from the one gather). So when a bundle is asked for, this probe keeps the
two texts as the ``nvidia_smi_text`` fact, gathered with the other facts.

Both commands talk to the driver and hang with it, so each has a deadline, and ``topo``
is not tried after ``-q`` timed out: the same driver would keep it waiting too. On WSL 2
``nvidia-smi`` lives in ``/usr/lib/wsl/lib``, often not on PATH
(https://docs.nvidia.com/cuda/wsl-user-guide/index.html), so it is looked for there too.
``nvidia-smi topo -m`` is not supported on WSL; its error is kept as the reason.
Command reference: https://docs.nvidia.com/deploy/nvidia-smi/index.html
"""

from __future__ import annotations

from typing import Any

from ddp_doctor.facts.seam import Env

NVIDIA_SMI_TEXT_TIMEOUT_S = 20.0
WSL_NVIDIA_SMI = "/usr/lib/wsl/lib/nvidia-smi"
MAX_CHARS = 2 << 20  # 8 GPUs of `-q` are ~100 kB; a runaway output is cut, not kept whole


def _cut(text: str) -> str:
    if len(text) <= MAX_CHARS:
        return text
    return text[:MAX_CHARS] + f"\n[cut by ddp-doctor: {len(text) - MAX_CHARS} more characters]\n"


def probe_nvidia_smi_text(env: Env, timeout_s: float = NVIDIA_SMI_TEXT_TIMEOUT_S
                          ) -> dict[str, Any]:
    """``{"q": text|None, "topo": text|None, "errors": {"q": why|None, "topo": why|None}}``."""
    value: dict[str, Any] = {"command": "nvidia-smi", "q": None, "topo": None,
                             "errors": {"q": None, "topo": None}}
    binary = "nvidia-smi"
    result = env.run([binary, "-q"], timeout=timeout_s)
    if result.not_found and env.exists(WSL_NVIDIA_SMI):
        binary = WSL_NVIDIA_SMI
        result = env.run([binary, "-q"], timeout=timeout_s)
    value["command"] = binary
    if result.ok:
        value["q"] = _cut(result.stdout)
    else:
        value["errors"]["q"] = result.describe_failure()
        if result.not_found or result.timed_out:
            value["errors"]["topo"] = (f"not tried: {binary} -q failed ("
                                       f"{'not found' if result.not_found else 'timed out'})")
            return value
    topo = env.run([binary, "topo", "-m"], timeout=timeout_s)
    if topo.ok:
        value["topo"] = _cut(topo.stdout)
    else:
        value["errors"]["topo"] = topo.describe_failure()
    return value
