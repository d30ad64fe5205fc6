"""The environment variables that change how CUDA, NCCL and torch behave.

Only relevant names are kept (CUDA_*, NCCL_*, TORCH_*, PYTORCH_*, OMP_*, ...), and the
value of any name that looks like a secret is replaced before it is stored, so a
saved facts file or report can be attached to a ticket as it is.
"""

from __future__ import annotations

from ddp_doctor.facts.seam import Env
from ddp_doctor.redact.secrets import is_secret_name, redact_text

RELEVANT_PREFIXES = (
    "CUDA_", "NCCL_", "TORCH_", "PYTORCH_", "OMP_", "NVIDIA_", "CUBLAS_", "CUDNN_",
    "MASTER_", "SLURM_", "WSL_", "KUBERNETES_", "GLOO_", "TORCHELASTIC_",
)
RELEVANT_NAMES = frozenset({
    "LD_LIBRARY_PATH", "LD_PRELOAD", "PATH", "PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX",
    "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MKL_NUM_THREADS",
    "container", "HF_TOKEN", "WANDB_API_KEY",
})


def is_relevant(name: str) -> bool:
    return name in RELEVANT_NAMES or name.startswith(RELEVANT_PREFIXES)


def probe_environ(env: Env) -> dict[str, str]:
    """Relevant variables with secret values replaced by a marker."""
    kept = {}
    for name, value in sorted(env.environ().items()):
        if not is_relevant(name):
            continue
        kept[name] = "<redacted>" if is_secret_name(name) else redact_text(value)
    return kept
