"""Environment probe: only the variables that change CUDA/NCCL/torch, secrets redacted."""

from __future__ import annotations

from ddp_doctor.facts.environment_variables import is_relevant, probe_environ
from tests.support.fakes import FakeEnv

HF_TOKEN = "hf_" + "Q8rTzLm3VbNx7KpWc2YdHs9JfGa4UeRi6Oq1"  # 34 characters, the real shape
GHP_TOKEN = "ghp_" + "x7Kq2Lm9Tz4Rb8Nw3Vc6Yh1Jd5Gf0Ps2Ua7E"

# A DDP job on a Slurm node in a container, with the credentials people keep in their shell.
TRAINING_SHELL = {
    # relevant, harmless: kept exactly
    "CUDA_VISIBLE_DEVICES": "0,1",
    "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    "NCCL_DEBUG": "INFO",
    "NCCL_IB_HCA": "mlx5_0,mlx5_1",
    "NCCL_IB_GID_INDEX": "3",
    "NCCL_IB_PKEY": "0",  # an InfiniBand partition key index, not a secret
    "NCCL_SOCKET_IFNAME": "ens7",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
    "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    "OMP_NUM_THREADS": "8",
    "MASTER_ADDR": "10.0.3.17",
    "MASTER_PORT": "29500",
    "WORLD_SIZE": "16",
    "RANK": "3",
    "LOCAL_RANK": "3",
    "SLURM_JOB_ID": "4242",
    "NVIDIA_VISIBLE_DEVICES": "all",
    "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
    "LD_LIBRARY_PATH": "/usr/local/nvidia/lib:/usr/local/nvidia/lib64",
    "PATH": "/opt/conda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin",
    "VIRTUAL_ENV": "/opt/venv",
    "container": "podman",
    # relevant, secret by name: value replaced
    "HF_TOKEN": HF_TOKEN,
    "WANDB_API_KEY": "0123456789abcdef0123456789abcdef01234567",
    "NVIDIA_API_KEY": "nvapi-Zx9Qw8Er7Ty6Ui5Op4As3Df2Gh1Jk0Lz",
    # relevant name, credentials inside the value: only those cut out
    "TORCH_HOME": "https://ci-bot:hunter2@artifacts.example.com/torch-cache",
    "PYTHONPATH": f"/srv/code:/tmp/{GHP_TOKEN}",
    # irrelevant: dropped whatever they hold
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE",
    "GITHUB_TOKEN": GHP_TOKEN,
    "HOME": "/root",
    "TERM": "xterm-256color",
    "SSH_AUTH_SOCK": "/tmp/ssh-XXXX/agent.1234",
    "LANG": "C.UTF-8",
}


def test_probe_environ_keeps_relevant_and_redacts_secrets():
    facts = probe_environ(FakeEnv(env=TRAINING_SHELL))
    assert facts == {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "HF_TOKEN": "<redacted>",
        "LD_LIBRARY_PATH": "/usr/local/nvidia/lib:/usr/local/nvidia/lib64",
        "LOCAL_RANK": "3",
        "MASTER_ADDR": "10.0.3.17",
        "MASTER_PORT": "29500",
        "NCCL_DEBUG": "INFO",
        "NCCL_IB_GID_INDEX": "3",
        "NCCL_IB_HCA": "mlx5_0,mlx5_1",
        "NCCL_IB_PKEY": "0",
        "NCCL_SOCKET_IFNAME": "ens7",
        "NVIDIA_API_KEY": "<redacted>",
        "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
        "NVIDIA_VISIBLE_DEVICES": "all",
        "OMP_NUM_THREADS": "8",
        "PATH": "/opt/conda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin",
        "PYTHONPATH": "/srv/code:/tmp/<redacted>",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "RANK": "3",
        "SLURM_JOB_ID": "4242",
        "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
        "TORCH_HOME": "https://<redacted>@artifacts.example.com/torch-cache",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "VIRTUAL_ENV": "/opt/venv",
        "WANDB_API_KEY": "<redacted>",
        "WORLD_SIZE": "16",
        "container": "podman",
    }
    assert list(facts) == sorted(facts)
    text = repr(facts)
    for secret in (HF_TOKEN, GHP_TOKEN, "hunter2", "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI",
                   "0123456789abcdef0123456789abcdef01234567", "nvapi-"):
        assert secret not in text


def test_is_relevant():
    for name in ("CUDA_HOME", "NCCL_P2P_DISABLE", "TORCHELASTIC_RUN_ID", "GLOO_SOCKET_IFNAME",
                 "WSL_DISTRO_NAME", "KUBERNETES_SERVICE_HOST", "CUBLAS_WORKSPACE_CONFIG",
                 "CUDNN_LOGINFO_DBG", "LD_PRELOAD", "CONDA_PREFIX", "MKL_NUM_THREADS"):
        assert is_relevant(name), name
    for name in ("HOME", "USER", "AWS_SECRET_ACCESS_KEY", "cuda_visible_devices", "XCUDA_X",
                 "SSH_AUTH_SOCK", "PS1"):
        assert not is_relevant(name), name


def test_empty_environment():
    assert probe_environ(FakeEnv(env={})) == {}
