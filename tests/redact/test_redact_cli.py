"""Redaction through the real commands: every output of a run, from one redacted Report."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import FACTS_DIR
from tests.support.cli import invoke

HOST = "gpu-v100-01"  # healthy_8x_v100_pcie's hostname
UUID_KNOWN = "GPU-" + "06e3d8e6-3f54-374a-8142-9752ca1f2316"  # its GPU 1
UUID_OTHER = "GPU-" + "7a1b2c3d-0000-4000-8000-00000000beef"  # a typo'd UUID in the env
HF = "hf_" + "Q8rTzLm3VbNx7KpWc2YdHs9JfGa4UeRi6Oq1"
GHP = "ghp_" + "x7Kq2Lm9Tz4Rb8Nw3Vc6Yh1Jd5Gf0Ps2Ua7E"
WANDB = "9f3c2b1a" * 5
AWS_ID = "AKIA" + "IOSFODNN7EXAMPLE"
PASSWORD = "hunter2-" + "c0rrect"
SECRETS = (HF, GHP, WANDB, AWS_ID, PASSWORD)


def _identified_machine(tmp_path):
    """The V100 server's facts with its identities where the report shows them."""
    data = json.loads((FACTS_DIR / "healthy_8x_v100_pcie.json").read_text())
    facts = data["facts"]
    facts["env_vars"]["value"]["CUDA_VISIBLE_DEVICES"] = f"{UUID_KNOWN},{UUID_OTHER}"
    python = facts["python"]["value"]
    python["executable"] = f"/home/alice/{HOST}/venv/bin/python"
    facts["host"]["value"]["disk"]["path"] = f"/scratch/{HOST}/alice"
    path = tmp_path / "identified.json"
    path.write_text(json.dumps(data))
    return path


def test_check_anonymize_shows_no_identity_and_stable_placeholders(tmp_path):
    facts = _identified_machine(tmp_path)
    plain = invoke("check", "--facts", str(facts), "--json", "-")
    for identity in (HOST, UUID_KNOWN, UUID_OTHER, "/home/alice"):
        assert identity in plain.stdout  # the identities really are in the report

    result = invoke("check", "--facts", str(facts), "--json", "-", "--anonymize")
    report = json.loads(result.stdout)
    assert result.exit_code == report["exit_code"] == plain.exit_code
    text = result.stdout
    for identity in (HOST, "06e3d8e6", "7a1b2c3d", "alice"):
        assert identity not in text
    # the same value maps to the same placeholder everywhere in the report
    visibility = next(c for c in report["checks"] if c["id"] == "visibility.devices")
    finding = visibility["findings"][0]
    assert "CUDA_VISIBLE_DEVICES='GPU-uuid-1,GPU-uuid-2'" in finding["title"]
    assert finding["evidence"][0]["value"] == "'GPU-uuid-1,GPU-uuid-2'"
    assert re.search(r"^1  cuda:0  GPU-uuid-1  ", finding["evidence"][1]["value"], re.M)
    assert report["environment"]["python_executable"] == "/home/user-1/host-1/venv/bin/python"
    assert "/scratch/host-1/user-1" in text
    assert text.count("GPU-uuid-1") >= 4 and text.count("host-1") >= 2
    # the console report of the same run is anonymized as well
    console = invoke("check", "--facts", str(facts), "--anonymize", "--verbose")
    assert HOST not in console.stdout and "06e3d8e6" not in console.stdout
    assert "GPU-uuid-1" in console.stdout


def _plant_secrets(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", HF)
    monkeypatch.setenv("WANDB_API_KEY", WANDB)
    monkeypatch.setenv("PYTHONPATH", f"/srv/code:/tmp/{GHP}")
    monkeypatch.setenv("TORCH_HOME", f"https://ci-bot:{PASSWORD}@cache.example.com/torch")
    # a value that a finding quotes: the NCCL check names the interface it cannot find
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", AWS_ID)


@pytest.mark.slow
@pytest.mark.spawns
def test_live_check_leaks_no_secret_in_any_output(tmp_path, monkeypatch):
    _plant_secrets(monkeypatch)
    markdown = tmp_path / "x.md"
    snapshot = tmp_path / "facts.json"
    result = invoke("check", "--json", "-", "--markdown", str(markdown),
                    "--save-facts", str(snapshot))
    report = json.loads(result.stdout)
    outputs = result.stdout + result.stderr + markdown.read_text() + snapshot.read_text()
    for secret in SECRETS:
        assert secret not in outputs
    # the planted values did reach the outputs, redacted
    assert "NCCL_SOCKET_IFNAME=<redacted>" in json.dumps(report)
    env = json.loads(snapshot.read_text())["facts"]["env_vars"]["value"]
    assert env["HF_TOKEN"] == env["WANDB_API_KEY"] == "<redacted>"
    assert env["TORCH_HOME"] == "https://<redacted>@cache.example.com/torch"
    assert env["PYTHONPATH"] == "/srv/code:/tmp/<redacted>"


SMOKE_LOG = f"""\
+ export WANDB_API_KEY={WANDB}
+ wandb login {WANDB}
+ torchrun --nproc_per_node 2 train.py --hf-token {HF}
node7:2211:2211 [0] NCCL INFO Bootstrap : Using eth0:10.0.3.17<0>
node7:2211:2290 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.0.3.18<41017> failed : Connection refused
[rank0]: Traceback (most recent call last):
[rank0]:   File "/home/alice/train.py", line 12, in <module>
[rank0]:     dist.barrier()
[rank0]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.1 token={GHP}
[rank0]: RuntimeError: CUDA error: out of memory while loading https://bot:{PASSWORD}@models.example.com/w.pt with AWS_ACCESS_KEY_ID={AWS_ID}
"""  # noqa: E501


def test_diagnose_quotes_log_lines_without_secrets(tmp_path):
    log = tmp_path / "smoke.log"
    log.write_text(SMOKE_LOG)
    markdown = tmp_path / "d.md"
    result = invoke("diagnose", str(log), "--json", "-", "--markdown", str(markdown))
    assert result.exit_code == 1, result.output
    outputs = result.stdout + result.stderr + markdown.read_text()
    for secret in SECRETS:
        assert secret not in outputs
    # the lines holding them are quoted, with the secret cut out
    assert "https://<redacted>@models.example.com/w.pt with AWS_ACCESS_KEY_ID=<redacted>" in outputs
    assert "NCCL version 2.18.1 token=<redacted>" in outputs
    assert "node7" in outputs and "10.0.3.18" in outputs  # not anonymized unless asked

    anonymous = invoke("diagnose", str(log), "--json", "-", "--anonymize")
    for identity in (*SECRETS, "node7", "10.0.3.18"):
        assert identity not in anonymous.stdout
    assert "host-1:2211:2290 [0] misc/socket.cc:484 NCCL WARN" in anonymous.stdout
    assert "Connect to ip-" in anonymous.stdout
