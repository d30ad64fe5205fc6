"""Secret removal: names that hold secrets, credentials in URLs, token shapes in text."""

from __future__ import annotations

import pytest

from gpu_doctor.redact import REDACTED, is_secret_name, redact_text

# Tokens in their published shapes (random characters, not real credentials).
HF = "hf_" + "Q8rTzLm3VbNx7KpWc2YdHs9JfGa4UeRi6Oq1"
GHP = "ghp_" + "x7Kq2Lm9Tz4Rb8Nw3Vc6Yh1Jd5Gf0Ps2Ua7E"
GHS = "ghs_" + "Ab3Cd4Ef5Gh6Ij7Kl8Mn9Op0Qr1St2Uv3Wx4"
GITHUB_PAT = "github_pat_" + "11ABCDEFG0" + "a1B2c3D4e5F6g7H8i9J0" * 4
AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"  # AWS documentation's example key id
AWS_STS_ID = "ASIAY34FZKBOKMUTVV7A"
SLACK = "xoxb-" + "1234567890-0987654321-AbCdEfGhIjKlMnOp"
OPENAI = "sk-proj-" + "Ab12Cd34Ef56Gh78Ij90Kl12Mn34"
PEM = """-----BEGIN OPENSSH PRIVATE KEY-----
b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW
QyNTUxOQAAACDd3F8CmNmbTkq4Fh1sJ8c3yJzU5pF2Xy3b9N2l1w8AAAAJgAAAAAAAAAA
-----END OPENSSH PRIVATE KEY-----"""
RSA_PEM = """-----BEGIN RSA PRIVATE KEY-----
MIIEowIBAAKCAQEAvG1cQ8Zk2mJ3pQ9x
-----END RSA PRIVATE KEY-----"""


@pytest.mark.parametrize("name", [
    "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY",
    "AWS_ACCESS_KEY_ID", "AWS_SESSION_TOKEN", "GITHUB_TOKEN", "OPENAI_API_KEY", "NGC_API_KEY",
    "NVIDIA_API_KEY", "DOCKER_PASSWORD", "PGPASSWORD", "MLFLOW_TRACKING_PASSWORD",
    "GOOGLE_APPLICATION_CREDENTIALS", "AZURE_CLIENT_SECRET", "COMET_API_KEY", "KEY",
    "SSH_PRIVATE_KEY", "BASIC_AUTH", "SESSION_COOKIE", "hf_token", "Wandb_Api_Key",
])
def test_secret_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", [
    "CUDA_VISIBLE_DEVICES", "NCCL_DEBUG", "NCCL_IB_HCA", "NCCL_IB_PKEY", "NCCL_IB_GID_INDEX",
    "NCCL_IB_TIMEOUT", "NCCL_SOCKET_IFNAME", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "TORCH_DISTRIBUTED_DEBUG", "PYTORCH_CUDA_ALLOC_CONF", "MASTER_ADDR", "MASTER_PORT",
    "SLURM_JOB_ID", "LD_LIBRARY_PATH", "PATH", "KUBERNETES_SERVICE_HOST", "OMP_NUM_THREADS",
    "NVIDIA_VISIBLE_DEVICES", "WORLD_SIZE", "LOCAL_RANK", "CONDA_PREFIX",
])
def test_harmless_names(name):
    assert not is_secret_name(name)


@pytest.mark.parametrize(("text", "expected"), [
    ("https://ci-bot:hunter2@artifacts.example.com/torch-cache",
     "https://<redacted>@artifacts.example.com/torch-cache"),
    ("git clone https://x-access-token:s3cr3tT0ken@github.com/org/repo.git",
     "git clone https://<redacted>@github.com/org/repo.git"),
    ("Looking in indexes: https://__token__:pypi-AgEIcHlwaS5vcmc@pypi.example.org/simple",
     "Looking in indexes: https://<redacted>@pypi.example.org/simple"),
    ("postgresql://admin:pw@db.internal:5432/mlflow and redis://default:pw2@cache:6379/0",
     "postgresql://<redacted>@db.internal:5432/mlflow and redis://<redacted>@cache:6379/0"),
])
def test_url_credentials_are_cut(text, expected):
    assert redact_text(text) == expected


@pytest.mark.parametrize("token", [HF, GHP, GHS, GITHUB_PAT, AWS_KEY_ID, AWS_STS_ID, SLACK,
                                   OPENAI])
def test_token_shapes_in_free_text(token):
    text = f"OSError: 401 Client Error for token {token} (see the log)"
    assert redact_text(text) == f"OSError: 401 Client Error for token {REDACTED} (see the log)"


def test_private_key_blocks_removed_whole():
    text = f"config dump:\n{PEM}\nnext: {RSA_PEM}\nend"
    assert redact_text(text) == f"config dump:\n{REDACTED}\nnext: {REDACTED}\nend"


def test_many_secrets_in_one_traceback():
    text = (
        "Traceback (most recent call last):\n"
        f'  File "train.py", line 12, in <module>\n    login(token="{HF}")\n'
        f"requests.exceptions.HTTPError: https://user:{GHP}@git.example.com failed\n"
        f"aws: {AWS_KEY_ID}\n"
    )
    out = redact_text(text)
    for secret in (HF, GHP, AWS_KEY_ID):
        assert secret not in out
    assert out.count(REDACTED) == 3
    assert 'File "train.py", line 12, in <module>' in out


@pytest.mark.parametrize("text", [
    "CUDA_VISIBLE_DEVICES=0,1",
    "NCCL_DEBUG=INFO",
    "NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ens7:10.0.3.17<0>",
    "GPU-06e3d8e6-3f54-374a-8142-9752ca1f2316",
    "torch 2.4.1+cu121 git_version 38b96d3399a695e704ed39b60dac733c3fbf20e2",
    "huggingface_hub.hf_hub_download(repo_id='meta-llama/Llama-2-7b')",
    "http://proxy.corp.example:3128",
    "git@github.com:pytorch/pytorch.git",
    "https://download.pytorch.org/whl/cu124",
    "disk-usage-report-for-the-shared-volume-2024",
    "AKIA",  # too short to be a key id
    "",
])
def test_harmless_text_is_kept(text):
    assert redact_text(text) == text
