"""Secret removal: names that hold secrets, credentials in URLs, token shapes in text."""

from __future__ import annotations

import pytest

from ddp_doctor.redact.secrets import REDACTED, is_secret_name, redact_text

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


# --- secrets inside logs, configs and command lines -----------------------------------

WANDB_LEGACY = "9f3c2b1a" * 5  # 40 hex characters, the legacy W&B key shape
WANDB_NEW = "wandb_v1_" + "Zq8Xw7Vu6Ts5Rq4Po3Nm2Lk1Jh0Gf9Ed8Cb7Az6Yx5" + "Wv4Ut3Sr2Qp1On0Ml9Kj8Ih7G"
GLPAT = "glpat-" + "z7Xq2Lm9Tz4Rb8Nw3Vc6"
PYPI = "pypi-AgEIcHlwaS5vcmc" + "CJGE3ZjA1ZTJhLTk0YjYtNDQ5Zi05ZTc3LWFmNmRmODlhNzE4MQ"
NVAPI = "nvapi-" + "Zx9Qw8Er7Ty6Ui5Op4As3Df2Gh1Jk0Lz"
HF_ORG = "api_org_" + "Q8rTzLm3VbNx7KpWc2YdHs9JfGa4UeRi6O"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "EXAMPLEKEY"  # AWS documentation's example
BEARER = "eyJhbGciOiJIUzI1NiJ9" + ".eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlLXBhcnQ"
ENCRYPTED_PEM = ("-----BEGIN ENCRYPTED PRIVATE KEY-----\n"
                 "MIIFHDBOBgkqhkiG9w0BBQ0wQTApBgkqhkiG9w0BBQwwHAQI\n"
                 "-----END ENCRYPTED PRIVATE KEY-----")
CUT_PEM = ("-----BEGIN EC PRIVATE KEY-----\n"
           "MHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRTBnVJk5oGiLHaNJgHJVoAoGCCqGSM49\n"
           "AwEHoUQDQgAEpLuUmOvf9jIb8yS3jLvDNLZ2WgT0Q3D9o+pNZ0iY5r0")


@pytest.mark.parametrize(("text", "secret", "kept"), [
    (f"export WANDB_API_KEY={WANDB_LEGACY}", WANDB_LEGACY, "export WANDB_API_KEY="),
    (f'HF_TOKEN="{HF}" torchrun train.py', HF, "torchrun train.py"),
    (f"NGC_API_KEY='{NVAPI}'", NVAPI, "NGC_API_KEY="),
    (f"aws_secret_access_key = {AWS_SECRET}", AWS_SECRET, "aws_secret_access_key = "),
    (f'{{"WANDB_API_KEY": "{WANDB_LEGACY}", "NCCL_DEBUG": "INFO"}}', WANDB_LEGACY,
     '"NCCL_DEBUG": "INFO"'),
    (f"{{'hf_token': 'abc{WANDB_LEGACY}', 'lr': 0.01}}", WANDB_LEGACY, "'lr': 0.01"),
    ("env:\n  - DOCKER_PASSWORD: c0rrect-h0rse\n  - NCCL_DEBUG: INFO", "c0rrect-h0rse",
     "NCCL_DEBUG: INFO"),
    ("python train.py --hf-token s3cretvalue42 --epochs 3", "s3cretvalue42", "--epochs 3"),
    ("python train.py --api-key=s3cretvalue42 --epochs 3", "s3cretvalue42", "--epochs 3"),
    (f"wandb login {WANDB_LEGACY}", WANDB_LEGACY, "wandb login "),
    (f"wandb login --relogin {WANDB_NEW}", WANDB_NEW, "wandb login --relogin "),
    (f"wandb login --host https://wandb.corp.example local-{WANDB_LEGACY}", WANDB_LEGACY,
     "https://wandb.corp.example"),
    (f"wandb.login(key='{WANDB_LEGACY}')", WANDB_LEGACY, "wandb.login(key="),
    (f"machine api.wandb.ai\n  login user\n  password {WANDB_LEGACY}", WANDB_LEGACY,
     "machine api.wandb.ai"),
    (f"[default]\naws_access_key_id={AWS_KEY_ID}\n", AWS_KEY_ID, "[default]"),
    (f"Access key ID,Secret access key\n{AWS_KEY_ID},{AWS_SECRET}", AWS_SECRET,
     "Access key ID,Secret access key"),
    (f"curl -H 'Authorization: Bearer {BEARER}' https://api.example.com", BEARER,
     "https://api.example.com"),
    ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA==", "Authorization: "),
    (f"git push https://oauth2:{GLPAT}@gitlab.example.com/ml/train.git", GLPAT,
     "@gitlab.example.com/ml/train.git"),
    (f"remote: https://{GHP}@github.com/org/repo.git", GHP, "@github.com/org/repo.git"),
    (f"twine upload -p {PYPI} dist/*", PYPI, "twine upload -p "),
    (f"token {GLPAT} rejected", GLPAT, "rejected"),
    (f"org token {HF_ORG} is deprecated", HF_ORG, "is deprecated"),
    (f"key:\n{ENCRYPTED_PEM}\nend", "MIIFHDBOBgkqhkiG9w0BBQ0w", "\nend"),
    (f"log cut here: {CUT_PEM}\n[truncated]", "MHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRTBnVJk5",
     "[truncated]"),
    # found by review: how scripts set tokens, printenv-style tables, JWTs
    (f'os.environ["WANDB_API_KEY"] = "{WANDB_LEGACY}"', WANDB_LEGACY, 'os.environ["WANDB_API'),
    (f'os.environ.setdefault("HF_TOKEN", "abc{WANDB_LEGACY}")', WANDB_LEGACY, "setdefault("),
    (f"AWS_SECRET_ACCESS_KEY {AWS_SECRET}\nNCCL_DEBUG INFO", AWS_SECRET, "NCCL_DEBUG INFO"),
    ("CI_JOB_JWT=eyJhbGciOiJSUzI1NiJ9." + "eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlc2ln",
     "eyJzdWIiOiIxMjM0NTY3ODkwIn0", "CI_JOB_JWT="),
    ("id_token: eyJhbGciOiJSUzI1NiJ9." + "eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlc2ln",
     "eyJzdWIiOiIxMjM0NTY3ODkwIn0", "id_token"),
])
def test_secrets_in_logs_configs_and_command_lines(text, secret, kept):
    out = redact_text(text)
    assert secret not in out
    assert REDACTED in out
    assert kept in out


@pytest.mark.parametrize("name", ["--hf-token", "api-key", "wandb.api_key", "GITHUB_PAT",
                                  "SENTRY_DSN", "AUTHORIZATION", "db_passwd", "SMTP_PASS",
                                  "aws_session_token"])
def test_more_secret_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["AUTHOR", "TOKENIZERS_PARALLELISM", "max_tokens", "PWD",
                                  "NCCL_IB_PKEY", "num_tokens_per_batch", "SLURM_JOB_NODELIST"])
def test_names_that_only_look_secret(name):
    assert not is_secret_name(name)


@pytest.mark.parametrize("text", [
    "TOKENIZERS_PARALLELISM=false max_tokens=128 use_auth_token=True",
    "HF_TOKEN=$HF_TOKEN torchrun train.py",
    "env: {HF_TOKEN: ${{ secrets.HF_TOKEN }}}",
    "Author: Soumith Chintala\nAuthor-email: soumith@pytorch.org",
    "commit 38b96d3399a695e704ed39b60dac733c3fbf20e2 (HEAD -> main)",
    "nvcr.io/nvidia/pytorch@sha256:" + "4f3a9c0b" * 8,
    "md5 d41d8cd98f00b204e9800998ecf8427e  weights.pt",
    "NCCL INFO Channel 00/02 :    0   1 busId 1b000 pci 0000:1b:00.0",
    "wandb: Tracking run with wandb version 0.17.0",
    "wandb: Currently logged in as: alice. Use `wandb login --relogin` to force relogin",
    "password: null",
    "torch 2.4.1+cu121 cuDNN 9.1.0.70 NCCL 2.20.5 driver 550.54.15",
])
def test_ordinary_log_lines_are_kept(text):
    assert redact_text(text) == text


@pytest.mark.parametrize("text", [
    "NCCL_SOCKET_IFNAME=eth0 HF_TOKEN= python train.py --epochs 3",  # an empty assignment
    "PATH /usr/local/cuda/bin:/usr/bin",
    "MASTER_ADDR 10.0.0.1",
    "CUDA_VISIBLE_DEVICES 0,1,2,3",
])
def test_ordinary_values_next_to_names_are_kept(text):
    assert redact_text(text) == text


def test_json_reports_are_not_read_as_name_value_pairs():
    """"status": "pass",\\n "summary": ... is JSON, not a PASS variable set to "summary"."""
    import json

    text = json.dumps({"checks": [{"status": "pass", "summary": "driver 535, 8 GPUs"},
                                  {"token_count": 5, "note": "KEY  value"}]}, indent=2)
    assert redact_text(text) == text
    assert redact_text('["pass", "hunter2-correct-horse"]') == '["pass", "hunter2-correct-horse"]'
