"""--anonymize: stable placeholders for hosts, users, homes, addresses, GPU UUIDs, serials."""

from __future__ import annotations

import json
import re

import pytest

from ddp_doctor.checklist import load_catalogue
from ddp_doctor.facts.snapshot import FactRecord, Facts, load_facts, save_facts
from ddp_doctor.model import CheckResult, Evidence, Finding, Report, Status, Step
from ddp_doctor.redact.redactor import Redactor
from ddp_doctor.redact.secrets import REDACTED
from ddp_doctor.runner import build_report
from tests.conftest import FACTS_DIR

UUID_A = "GPU-" + "06e3d8e6-3f54-374a-8142-9752ca1f2316"
UUID_B = "GPU-" + "7a1b2c3d-0000-4000-8000-00000000beef"
HF = "hf_" + "Q8rTzLm3VbNx7KpWc2YdHs9JfGa4UeRi6Oq1"


def anonymizer() -> Redactor:
    return Redactor(anonymize=True)


@pytest.mark.parametrize("text", [
    "driver 535.104.05, CUDA 12.2, NCCL version 2.18.1+cuda12.1",
    "cuDNN 9.1.0.70",
    "nvidia-cudnn-cu12==9.1.0.70",
    "nvidia-cudnn-cu12          9.1.0.70",
    "opencv-python 4.10.0.84",
    "Version: 4.10.0.84",
    "libcudnn9-cuda-12 9.1.0.70-1",
    "tensorrt 10.0.1.6",
    "v1.2.3.4",
    "NVML 13.595.71.05 and driver 11.470.129.06",  # leading zeros: not addresses
    "1.2.3.4.5",
    "torch 2.4.1+cu121 git_version 38b96d3399a695e704ed39b60dac733c3fbf20e2",
    "nvcr.io/nvidia/pytorch@sha256:" + "4f3a9c0b" * 8,
    "NCCL INFO Channel 00/02 : 0 1 busId 1b000 pci 00000000:1B:00.0 at 12:34:56",
    "c10d::ProcessGroupNCCL::allreduce and x[1::2] and std::vector",
    "connect to 127.0.0.1:29500, listen on 0.0.0.0 and ::1, netmask 255.255.255.0",
    "brd ff:ff:ff:ff:ff:ff link/loopback 00:00:00:00:00:00",
    "/usr/local/cuda-12.4/lib64:/opt/conda/lib /root/.cache/torch",
    "Serial Number : N/A",
])
def test_versions_hashes_and_paths_are_not_identities(text):
    redactor = anonymizer()
    assert redactor.text(text) == text
    assert redactor.summary() == {}


def test_addresses_get_stable_placeholders():
    redactor = anonymizer()
    first = redactor.text("MASTER_ADDR=10.0.3.17 NCCL INFO Using eth0:10.0.3.18<0> "
                          "ib0:fe80::5a6b:4b03:f3:a2c4%ib0<0> ether 3c:ec:ef:12:34:56")
    assert first == ("MASTER_ADDR=ip-1 NCCL INFO Using eth0:ip-2<0> ib0:ip-3%ib0<0> "
                     "ether mac-1")
    second = redactor.text("ssh root@10.0.3.18; arp 3C-EC-EF-12-34-56 at 10.0.3.17:29500; "
                           "peer [2001:db8::7]:29500")
    assert second == "ssh root@ip-2; arp mac-1 at ip-1:29500; peer [ip-4]:29500"
    assert redactor.summary() == {"ip address": 6, "mac address": 2}


def test_gpu_uuids_serials_and_homes():
    redactor = anonymizer()
    text = (f"GPU 0: Tesla V100 (UUID: {UUID_A})\nGPU 1: Tesla V100 (UUID: {UUID_B})\n"
            f"CUDA_VISIBLE_DEVICES={UUID_B},MIG-{UUID_A[4:]}\n"
            "    Serial Number                         : 1654922001234\n"
            "/home/alice/venv/bin/python C:\\Users\\Bob\\envs /Users/carol/x "
            "/mnt/c/Users/Bob/data /home/alice/.cache")
    assert redactor.text(text) == (
        "GPU 0: Tesla V100 (UUID: GPU-uuid-1)\nGPU 1: Tesla V100 (UUID: GPU-uuid-2)\n"
        "CUDA_VISIBLE_DEVICES=GPU-uuid-2,MIG-uuid-1\n"
        "    Serial Number                         : serial-1\n"
        "/home/user-1/venv/bin/python C:\\Users\\user-2\\envs /Users/user-3/x "
        "/mnt/c/Users/user-2/data /home/user-1/.cache")
    assert redactor.summary() == {"gpu uuid": 4, "home path": 5, "serial number": 1}


def test_redacting_twice_changes_and_counts_nothing():
    redactor = anonymizer()
    once = redactor.text(f"HF_TOKEN={HF} /home/alice 10.1.2.3 {UUID_A} host 3c:ec:ef:12:34:56")
    counts = redactor.summary()
    assert redactor.text(once) == once
    assert redactor.summary() == counts


def test_without_anonymize_only_secrets_go():
    redactor = Redactor()
    text = f"/home/alice on 10.1.2.3 sees {UUID_A}, token {HF}"
    assert redactor.text(text) == f"/home/alice on 10.1.2.3 sees {UUID_A}, token {REDACTED}"
    assert redactor.summary() == {"secret token": 1}


def _facts(**records: object) -> Facts:
    facts = Facts()
    for name, value in records.items():
        facts.add(FactRecord(name=name, ok=True, value=value))
    return facts


def test_identities_learned_from_facts_are_replaced_anywhere():
    facts = _facts(
        os={"hostname": "dgx-a100-17.cluster.example", "system": "Linux"},
        env_vars={"USER": "jdoe", "HOME": "/home/jdoe", "HF_TOKEN": REDACTED},
        nvml={"gpus": [{"index": 0, "uuid": UUID_A, "serial": "1324321012345",
                        "processes": [{"pid": 7, "username": "mlops"}]},
                       {"index": 1, "uuid": None, "serial": "N/A"}]},
        torch={"cuda": {"devices": [{"index": 0, "uuid": UUID_A[4:]}]}},
    )
    redactor = Redactor.for_run(facts, anonymize=True)
    text = ("ssh jdoe@dgx-a100-17 'nvidia-smi' on DGX-A100-17.cluster.example: board 1324321012345,"
            f" uuid {UUID_A[4:]}, owner mlops, /scratch/jdoe/run1")
    assert redactor.text(text) == (
        "ssh user-1@host-1 'nvidia-smi' on host-1: board serial-1, uuid GPU-uuid-1, "
        "owner user-2, /scratch/user-1/run1")
    # the same values in the snapshot get the same placeholders
    snapshot = json.dumps(redactor.facts(facts))
    for identity in ("dgx-a100", "jdoe", "mlops", "1324321012345", "06e3d8e6"):
        assert identity not in snapshot.lower()
    assert '"hostname": "host-1"' in snapshot and '"uuid": "GPU-uuid-1"' in snapshot
    assert '"serial": "N/A"' in snapshot


def test_generic_account_names_are_kept_as_words_but_not_in_homes():
    facts = _facts(env_vars={"USER": "user", "HOME": "/home/user"})
    redactor = Redactor.for_run(facts, anonymize=True)
    assert (redactor.text("the user of /home/user/venv")
            == "the user of /home/user-1/venv")


def test_nccl_log_prefixes_name_hosts():
    redactor = anonymizer()
    log = ("node7:2211:2211 [0] NCCL INFO Bootstrap : Using eth0:10.0.3.17<0>\n"
           "[rank1]: node8:2212:2290 [1] misc/socket.cc:484 NCCL WARN Connect to node7 failed\n")
    assert redactor.text(log) == (
        "host-1:2211:2211 [0] NCCL INFO Bootstrap : Using eth0:ip-1<0>\n"
        "[rank1]: host-2:2212:2290 [1] misc/socket.cc:484 NCCL WARN Connect to host-1 failed\n")


def test_version_keys_and_labels_keep_dotted_quads():
    redactor = anonymizer()
    data = {"packages": {"opencv-python": [{"version": "4.10.0.84"}]},
            "cudnn_version": "9.1.0.70", "address": "9.1.0.70"}
    assert redactor.value(data) == {"packages": {"opencv-python": [{"version": "4.10.0.84"}]},
                                    "cudnn_version": "9.1.0.70", "address": "ip-1"}
    evidence = anonymizer().value(Evidence("cuDNN version", "9.1.0.70", "torch"))
    assert evidence == Evidence("cuDNN version", "9.1.0.70", "torch")


def test_secret_keys_lose_their_whole_value():
    redactor = Redactor()
    data = {"env": {"DOCKER_PASSWORD": "plain words", "NCCL_DEBUG": "INFO", "API_KEY": ""},
            "evidence": [Evidence("HF_TOKEN", "abc", "environment")]}
    assert redactor.value(data) == {
        "env": {"DOCKER_PASSWORD": REDACTED, "NCCL_DEBUG": "INFO", "API_KEY": ""},
        "evidence": [Evidence("HF_TOKEN", REDACTED, "environment")]}
    assert redactor.summary() == {"secret variable": 2}


def test_report_is_rebuilt_with_every_string_redacted():
    finding = Finding(code=_any_code(), title=f"GPU {UUID_A} on /home/alice failed",
                      evidence=(Evidence("log", f"HF_TOKEN={HF} at 10.9.8.7", "smoke"),),
                      remediation=(Step("Reset it.", command=f"nvidia-smi -r -i {UUID_A}"),))
    report = Report(tool_version="0", created_at="now",
                    results=(CheckResult("x", "X", "gpu", Status.FAIL, "bad", (finding,)),),
                    smoke={"ranks": [{"host": "10.9.8.7", "stderr": f"token={HF}"}]})
    redactor = anonymizer()
    out = redactor.report(report)
    assert isinstance(out, Report) and out.results[0].status is Status.FAIL
    text = json.dumps(out.to_dict())
    for identity in (UUID_A, "alice", "10.9.8.7", HF):
        assert identity not in text
    assert out.results[0].findings[0].title == "GPU GPU-uuid-1 on /home/user-1 failed"
    assert out.results[0].findings[0].remediation[0].command == "nvidia-smi -r -i GPU-uuid-1"
    assert out.smoke == {"ranks": [{"host": "ip-1", "stderr": f"token={REDACTED}"}]}
    assert redactor.summary() == {"gpu uuid": 2, "home path": 1, "ip address": 2,
                                  "secret variable": 2}


def _any_code():
    catalogue = load_catalogue()
    return catalogue.specs[0].codes[0]


def test_every_fixture_anonymizes_its_own_identities(tmp_path):
    """For each recorded machine: the report and saved snapshot hold none of its identities."""
    catalogue = load_catalogue()
    for path in sorted(FACTS_DIR.glob("*.json")):
        facts = load_facts(path)
        os_fact = facts.get("os") or {}
        nvml = facts.get("nvml") or {}
        identities = {os_fact.get("hostname")} | {g.get("uuid") for g in nvml.get("gpus") or []}
        for iface in (facts.get("interconnect") or {}).get("interfaces") or []:
            identities |= {a["address"] for a in iface.get("addresses") or []}
        identities -= {None, "127.0.0.1", "::1"}
        redactor = Redactor.for_run(facts, anonymize=True)
        report = redactor.report(build_report(catalogue, facts, facts_source=path.name))
        out = tmp_path / path.name
        save_facts(facts, out, redactor)
        written = out.read_text() + json.dumps(report.to_dict())
        for identity in identities:  # as a whole word: "fedora" may stay in "fedoraproject"
            assert not re.search(rf"(?<![\w.-]){re.escape(identity)}(?![\w-])",
                                 written), (path.name, identity)
        assert "/home/" not in written.replace("/home/user-", ""), path.name
        assert load_facts(out).available("os")  # still a usable snapshot
