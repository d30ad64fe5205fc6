"""``diagnose`` with the real rule table: what the whole log says about one error.

Each scenario is the shape of a real thread (cited): the same error line means a
different cause depending on the job around it, a bare exception names its cause only in
the source line above it, and a ticket's collect_env turns into facts the checks judge.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ddp_doctor.diagnose import diagnose
from ddp_doctor.diagnose.literals import phrase_pattern, required_literals
from ddp_doctor.diagnose.normalize import clean
from ddp_doctor.diagnose.rank_prefixes import split_rank
from ddp_doctor.logrules import GATES, RULES

LOGS = Path(__file__).parents[1] / "data" / "logs"
TEXT = Path(__file__).parents[1] / "fixtures" / "text"

FAILED_OR_TIMED_OUT = (
    "[E ProcessGroupNCCL.cpp:455] Some NCCL operations have failed or timed out. Due to the "
    "asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
    "corrupted/incomplete data.\n")
SYSTEM_ERROR = ("RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/"
                "ProcessGroupNCCL.cpp:1191, unhandled system error, NCCL version 2.14.3\n")


def lead(tmp_path: Path, text: str, name: str = "job.log"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return diagnose(str(path)).report.results[0].findings[0]


# -- literal prefilters: a speed-up that must never hide a match ----------------------------

def test_factored_alternatives_keep_their_whole_phrases() -> None:
    import re
    pattern = re.compile(r"(?:cuda error: the provided ptx)|(?:cuda_error_unsupported_ptx)",
                         re.IGNORECASE)
    assert required_literals(pattern) == ("cuda error: the provided ptx",
                                          "cuda_error_unsupported_ptx")


def test_no_literal_means_always_tested() -> None:
    import re
    assert required_literals(re.compile(r"\d+\w?", re.IGNORECASE)) is None
    assert required_literals(re.compile(r"\d+ GiB", re.IGNORECASE)) == (" gib",)
    assert required_literals(re.compile("out of memory")) is None  # case-sensitive: unknown


def _corpus_lines() -> list[str]:
    lines: list[str] = []
    for path in sorted(LOGS.glob("*.log")):
        text = clean(path.read_text(encoding="utf-8", errors="replace"))
        lines += [split_rank(line)[1] for line in text.split("\n")]
    for rule in RULES:
        lines += list(rule.examples)
    return lines


@pytest.mark.slow  # every rule over every distinct corpus line: ~3 s of CPU on an idle machine
def test_every_line_a_rule_matches_holds_its_literal_and_a_gate() -> None:
    """Over every corpus line and rule example: a match implies the prefilters pass."""
    misses = []
    literals_of = [required_literals(rule.pattern) for rule in RULES]
    for line in dict.fromkeys(_corpus_lines()):  # a third of the lines repeat
        low = line.lower()
        for rule, literals in zip(RULES, literals_of, strict=True):
            if not rule.pattern.search(line):
                continue
            if literals is not None and not any(word in low for word in literals):
                misses.append((rule.code.id, line[:80], "literal"))
            if not any(gate in low for gate in rule.anchors if gate in GATES):
                misses.append((rule.code.id, line[:80], "gate"))
    assert misses == []


def test_every_rule_spells_a_phrase_so_the_scan_keeps_its_line_filter() -> None:
    """One rule without a phrase (a pattern whose branches the literal reader gives up on)
    turns off the byte-level filter for every line of every log: the worst-case log of
    bench/diagnose_throughput.py went from 18 to 5 MB/s when the Xid rule lost its own."""
    assert [rule.code.id for rule in RULES if required_literals(rule.pattern) is None] == []


def test_phrase_tree_finds_exactly_the_lines_holding_a_phrase() -> None:
    phrases = sorted({w for rule in RULES for w in required_literals(rule.pattern) or ()})
    tree = phrase_pattern(phrases)
    for line in _corpus_lines():
        low = line.lower()
        assert (tree.search(low) is not None) == any(p in low for p in phrases), line


# -- one line, many meanings ----------------------------------------------------------------

def test_failed_or_timed_out_across_nodes_is_the_network(tmp_path: Path) -> None:
    """karpathy/nanoGPT#55: two nodes, only this line; NCCL_IB_DISABLE=1 fixed it."""
    log = ("$ torchrun --nproc_per_node=8 --nnodes=2 --node_rank=0 --master_addr=10.1.1.1 "
           "--master_port=1234 train.py\n" + FAILED_OR_TIMED_OUT)
    finding = lead(tmp_path, log)
    assert finding.code.category.value == "nccl_network"
    assert finding.evidence[0].label == "line 1" and "--nnodes=2" in finding.evidence[0].value
    assert any(s.command and "NCCL_IB_DISABLE=1" in s.command for s in finding.remediation)
    alternative = [e.value for e in finding.evidence if e.label == "other possible cause"]
    assert any(a.startswith("collective_timeout") for a in alternative)


def test_failed_or_timed_out_on_one_node_stays_a_timeout(tmp_path: Path) -> None:
    assert lead(tmp_path, FAILED_OR_TIMED_OUT).code.category.value == "collective_timeout"


def test_system_error_with_docker_bridges_is_the_interface(tmp_path: Path) -> None:
    """NVIDIA/nccl#697: NCCL listed bond0 plus br-*/veth* bridges; NCCL_SOCKET_IFNAME fixed it."""
    log = (SYSTEM_ERROR + "INFO NET/Socket : Using\n[0]bond0:192.168.1.161<0>\n"
           "[1]br-05ab815fa14e:172.19.0.1<0>\n[2]veth6163fba:fe80::b878<0>\n")
    finding = lead(tmp_path, log)
    assert finding.code.category.value == "nccl_network"
    assert finding.remediation[0].command.startswith("NCCL_SOCKET_IFNAME=")


def test_system_error_after_a_shm_warning_is_shared_memory(tmp_path: Path) -> None:
    log = ("node1:31:31 [0] NCCL WARN Error while creating shared memory segment "
           "/dev/shm/nccl-9NQbBl (size 9637888)\n" + SYSTEM_ERROR
           + "[1]br-05ab815fa14e:172.19.0.1<0>\n")
    assert lead(tmp_path, log).code.category.value == "nccl_shared_memory"


@pytest.mark.parametrize(("first", "then", "category"), [
    (FAILED_OR_TIMED_OUT, SYSTEM_ERROR, "collective_timeout"),  # neuralmagic/sparseml#1246
    (SYSTEM_ERROR, FAILED_OR_TIMED_OUT, "nccl_shared_memory"),
])
def test_symptoms_of_each_other_resolve_to_the_first_seen(tmp_path: Path, first: str,
                                                           then: str, category: str) -> None:
    assert lead(tmp_path, first + then).code.category.value == category


def test_a_log_that_stops_after_p2p_setup_is_a_first_collective_hang(tmp_path: Path) -> None:
    """Lightning-AI/pytorch-lightning#19425: silent after P2P/IPC channels; P2P off fixed it."""
    log = ("Epoch 0:   0%|          | 0/938 [00:00<?, ?it/s]\n"
           "host:34364:35141 [2] NCCL INFO Channel 00 : 2[1d000] -> 3[1e000] via P2P/IPC\n"
           "host:34310:35145 [1] NCCL INFO Channel 01 : 1[1c000] -> 2[1d000] via P2P/IPC\n"
           "host:34364:35141 [2] NCCL INFO Connected all rings\n")
    finding = lead(tmp_path, log)
    assert (finding.code.id, finding.code.category.value) == ("DIAG002", "nccl_p2p")
    assert finding.evidence[0].label == "last line, line 4"
    assert finding.remediation[0].command.startswith("NCCL_P2P_DISABLE=1")


def test_a_log_that_stops_mid_training_is_not_called_a_hang(tmp_path: Path) -> None:
    log = ("host:1:1 [0] NCCL INFO Channel 00 : 0[1b000] -> 1[1c000] via P2P/IPC\n"
           "Epoch 3: 41%|####      | 384/938 [02:11<03:09, 2.92it/s, loss=0.51]\n")
    assert lead(tmp_path, log).code.id == "DIAG001"


def test_a_described_hang_is_a_first_collective_hang(tmp_path: Path) -> None:
    """NVIDIA/nccl#2079: 'ncclAllReduce enters an infinite spin-wait deadlock'."""
    log = "Training hangs forever at the first all_reduce; GPU utilisation stays at 100%.\n"
    assert lead(tmp_path, log).code.id == "DIAG002"


@pytest.mark.parametrize(("marker", "category"), [
    ("platform: Linux-5.15.146.1-microsoft-standard-WSL2-x86_64-with-glibc2.35\n", "wsl_setup"),
    ("platform: Linux-5.15.0-91-generic-x86_64-with-glibc2.35\n", "gpu_not_visible"),
])
def test_no_cuda_device_under_wsl_is_wsl_setup(tmp_path: Path, marker: str,
                                               category: str) -> None:
    """Genesis-Embodied-AI/Genesis#187: CUDA_ERROR_NO_DEVICE in WSL2; LD_LIBRARY_PATH fixed."""
    log = ("[E cuda_driver.h:operator()@92] CUDA Error CUDA_ERROR_NO_DEVICE: no CUDA-capable "
           "device is detected while calling init (cuInit)\n" + marker)
    finding = lead(tmp_path, log)
    assert finding.code.category.value == category
    if category == "wsl_setup":
        assert finding.evidence[0].label == "line 2"
        assert any("/usr/lib/wsl/lib" in (s.command or "") for s in finding.remediation)


# -- bare exceptions ------------------------------------------------------------------------

def test_a_bare_assertion_is_read_with_its_source_line(tmp_path: Path) -> None:
    """Megvii-BaseDetection/YOLOX style: `assert num_gpu <= torch.cuda.device_count()`."""
    log = ("Traceback (most recent call last):\n  File \"tools/train.py\", line 112, in <module>\n"
           "    assert num_gpu <= torch.cuda.device_count()\nAssertionError\n")
    finding = lead(tmp_path, log)
    assert finding.code.category.value == "gpu_not_visible"
    assert [(e.label, e.value) for e in finding.evidence[:2]] == [
        ("line 3", "assert num_gpu <= torch.cuda.device_count()"), ("line 4", "AssertionError")]


def test_a_bare_assertion_about_something_else_stays_unknown(tmp_path: Path) -> None:
    log = "    assert len(boxes) == len(labels)\nAssertionError\n"
    finding = lead(tmp_path, log)
    assert finding.code.id == "DIAG001"
    assert ("line 2", "AssertionError") in [(e.label, e.value) for e in finding.evidence]


# -- environment from the ticket's text -----------------------------------------------------

def test_a_traceback_plus_collect_env_gets_the_driver_finding_located(tmp_path: Path) -> None:
    """pytorch/pytorch#28321: driver 410 cannot run torch built for CUDA 10.1."""
    env = (TEXT / "collect_env-pytorch-28321.txt").read_text(encoding="utf-8")
    log = ("Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n"
           "AssertionError: Torch not compiled with CUDA enabled\n\n" + env)
    report = diagnose(str(_write(tmp_path, log))).report
    findings = report.results[0].findings
    assert findings[0].code.id == "DRV002"
    assert ("read from", "the collect_env report at line 6") in \
        [(e.label, e.value) for e in findings[0].evidence]
    assert report.environment["driver"] == "410.104"
    assert "the collect_env report at line 6" in report.results[0].summary


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "ticket.txt"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_users_own_p2p_experiment_settles_it(tmp_path: Path) -> None:
    """NVIDIA/nccl#667: a hang on PXB-connected GPUs; 'NCCL_P2P_DISABLE=1 did workaround'."""
    log = ("[E ProcessGroupNCCL.cpp:566] [Rank 1] Watchdog caught collective operation "
           "timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for "
           "1800213 milliseconds before timing out.\n"
           "Setting NCCL_P2P_DISABLE=1 did workaround the problem.\n")
    finding = lead(tmp_path, log)
    assert (finding.code.id, finding.code.category.value) == ("DIAG002", "nccl_p2p")
    assert finding.evidence[0].label == "line 2"
    assert any(e.label == "consequence, line 1" for e in finding.evidence)


def test_p2p_advice_in_the_log_is_not_taken_for_the_users_result(tmp_path: Path) -> None:
    log = ("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
           "hint: if training hangs, NCCL_P2P_DISABLE=1 may help\n")
    assert lead(tmp_path, log).code.category.value == "gpu_out_of_memory"


def test_a_healthy_run_ending_in_nccl_teardown_is_not_a_hang(tmp_path: Path) -> None:
    log = ("host:1:1 [0] NCCL INFO Channel 00 : 0[1b000] -> 1[1c000] via P2P/IPC\n"
           "host:1:1 [0] NCCL INFO Connected all rings\n"
           "Epoch 0: 100%|##########| 938/938 [01:02<00:00, 15.1it/s, loss=0.21]\n"
           "host:1:1 [0] NCCL INFO comm 0x5603f2b0 rank 0 nranks 2 cudaDev 0 busId 1000 - "
           "Destroy COMPLETE\n")
    assert lead(tmp_path, log).code.id == "DIAG001"


def test_wsl_in_the_users_prose_does_not_make_a_server_wsl(tmp_path: Path) -> None:
    log = ("The same script works on my laptop under WSL2, but on our Ubuntu server:\n"
           "RuntimeError: Found no NVIDIA driver on your system. Please check that you have "
           "an NVIDIA GPU and installed a driver\n$ uname -r\n6.5.0-41-generic\n")
    assert lead(tmp_path, log).code.category.value == "driver_missing"


def test_the_killed_rank_is_the_one_affected_not_the_survivor(tmp_path: Path) -> None:
    log = ("[rank1]:[E ProcessGroupNCCL.cpp:563] [Rank 1] Watchdog caught collective "
           "operation timeout: WorkNCCL(SeqNum=812, OpType=ALLREDUCE) ran for 600031 ms\n"
           "torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0 "
           "(pid: 1200) of binary: /usr/bin/python\n")
    finding = lead(tmp_path, log)
    assert finding.code.category.value == "host_out_of_memory"
    assert finding.affects == ("rank 0",)
    assert any(e.label.startswith("consequence") and e.value.startswith("rank 1: ")
               for e in finding.evidence)


def test_torchrun_tee_double_prefixes_are_one_finding_for_every_rank(tmp_path: Path) -> None:
    log = "".join(f"[default{r}]:[rank{r}]: torch.OutOfMemoryError: CUDA out of memory. "
                  f"Tried to allocate 2.00 GiB\n" for r in range(4))
    finding = lead(tmp_path, log)
    assert finding.affects == ("ranks 0-3",)
    assert [e.label for e in finding.evidence] == ["line 1", "matched lines"]


def test_the_user_saying_the_job_runs_in_wsl_counts(tmp_path: Path) -> None:
    """microsoft/WSL#5265: 'I just installed ... WSL 2' and a Linux driver inside it."""
    log = ("I just installed Windows Preview and WSL 2 and I did\n"
           "sudo apt install nvidia-driver-440\n$ nvidia-smi\n"
           "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
           "Make sure that the latest NVIDIA driver is installed and running.\n")
    assert lead(tmp_path, log).code.category.value == "wsl_setup"
