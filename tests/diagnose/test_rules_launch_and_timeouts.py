"""Launch and timeout readings: a script run without a launcher, two nodes that both take
the same ranks, a progress bar that ran for the whole collective timeout; and three errors
other tools print in their own words (NVML's mismatch from nvidia-docker 1.0, NCCL's
'invalid device function', bitsandbytes' CUDA setup). Each is tested on the stable core of
its error, with the look-alikes it must leave alone; the cases come from the training split
collected on 2026-11-25 (tests/data/logs/cases_J.toml)."""

from __future__ import annotations

from pathlib import Path

from tests.support.rules import corpus_lead, diagnosed, first_code, lead

# -- NVML's mismatch as nvidia-docker 1.0 printed it (NVIDIA/nvidia-docker#584) -------------


def test_nvidia_docker_1_nvml_mismatch_is_the_driver_library_mismatch():
    assert first_code("nvidia-docker | 2017/12/21 05:04:46 Error: nvml: Driver/library "
                      "version mismatch") == "LOG013"
    assert corpus_lead("nvidia-docker-584.log").code.id == "LOG013"


# -- NCCL's own CUDA check: 'invalid device function' (NVIDIA/nccl#444) -----------------------


def test_nccls_invalid_device_function_is_a_missing_architecture_not_a_cuda_error():
    assert first_code("[3] enqueue.cc:215 NCCL WARN Cuda failure 'invalid device "
                      "function'") == "LOG028"
    found = corpus_lead("nvidia-nccl-444.log")
    assert found.code.id == "LOG028"  # ahead of NCCL's "unhandled cuda error" (LOG003)
    # another CUDA failure in the same NCCL wording is not an architecture problem
    assert first_code("[0] enqueue.cc:215 NCCL WARN Cuda failure 'out of memory'") != "LOG028"


# -- env:// without a launcher, the paste cut at the raise (hzwer/ECCV2022-RIFE#52) ---------


def test_the_env_rendezvous_raise_line_is_a_script_run_without_a_launcher():
    assert first_code('    raise _env_error("MASTER_ADDR")') == "LOG056"
    assert first_code('    raise _env_error("WORLD_SIZE")') == "LOG056"
    assert first_code('    raise _env_error("SOMETHING_ELSE")') is None


# -- bitsandbytes' CUDA setup (bitsandbytes-foundation/bitsandbytes#492) --------------------


def test_bitsandbytes_cuda_setup_failure_is_an_outdated_package(tmp_path: Path):
    found = lead(tmp_path, "RuntimeError: \n        CUDA Setup failed despite GPU being "
                           "available. Please run the following command to get more "
                           "information:\n\n        python -m bitsandbytes\n")
    assert found.code.id == "LOG088" and found.code.category.value == "package_conflict"
    commands = [s.command for s in found.remediation]
    assert commands == ["python -m bitsandbytes", "python -m pip install -U bitsandbytes",
                        'python -c "import torch; print(torch.cuda.is_available())"']
    assert corpus_lead("bitsandbytes-492.log").code.id == "LOG088"


# -- Lightning: the same global rank announced twice (Lightning-AI/pytorch-lightning#10098) --

TWO_NODES_AS_NODE_0 = "".join(
    f"initializing ddp: GLOBAL_RANK: {r}, MEMBER: {r + 1}/8\n" for r in (1, 1, 2, 2, 0, 0, 3, 3))


def test_two_nodes_that_both_take_ranks_0_to_3_of_8_are_a_rendezvous_failure(tmp_path: Path):
    found = lead(tmp_path, TWO_NODES_AS_NODE_0 + "Traceback (most recent call last):\n")
    assert found.code.id == "DIAG010" and found.code.category.value == "rendezvous_failure"
    assert [e.value for e in found.evidence] == [
        "initializing ddp: GLOBAL_RANK: 0, MEMBER: 1/8"] * 2
    assert "srun python train.py" in [s.command for s in found.remediation]
    assert corpus_lead("pytorch-lightning-10098.log").code.id == "DIAG010"


def test_a_restarted_job_announcing_every_rank_again_is_not_that(tmp_path: Path):
    every_rank_twice = "".join(f"Initializing distributed: GLOBAL_RANK: {r}, MEMBER: "
                               f"{r + 1}/4\n" for r in (0, 1, 2, 3, 0, 1, 2, 3))
    assert lead(tmp_path, every_rank_twice).code.id != "DIAG010"
    one_node_of_two = "".join(f"Initializing distributed: GLOBAL_RANK: {r}, MEMBER: "
                              f"{r + 1}/8\n" for r in (0, 1, 2, 3))
    assert lead(tmp_path, one_node_of_two).code.id != "DIAG010"


# -- one rank tokenising for the whole timeout (hiyouga/LlamaFactory#956) -------------------

BAR = ("Running tokenizer on dataset: 47%|#####     | 1695000/3634744 [30:09<33:25, 967.30 "
       "examples/s]Traceback (most recent call last):\n  File \"train.py\", line 14, in <module>\n")


def test_a_bar_that_ran_the_whole_timeout_then_a_traceback_is_the_collective_timeout(
        tmp_path: Path):
    found = lead(tmp_path, "[2023-09-18 08:36:08,272] [INFO] [Rank 0] DeepSpeed info: "
                           "version=0.10.1\n" + BAR)
    assert found.code.id == "LOG047" and found.code.category.value == "collective_timeout"
    assert found.evidence[0].value.startswith("Running tokenizer on dataset: 47%")
    assert corpus_lead("llamafactory-956.log").code.id == "LOG047"


def test_the_same_bar_outside_a_distributed_job_or_shorter_says_nothing(tmp_path: Path):
    assert lead(tmp_path, BAR).code.id == "DIAG001"  # no launcher, rank or NCCL in sight
    short = BAR.replace("[30:09<", "[12:09<")
    assert lead(tmp_path, "torchrun --nproc_per_node 2 train.py\n" + short).code.id == "DIAG001"


def test_diagnosed_findings_keep_the_rank_lines_as_evidence(tmp_path: Path):
    found = diagnosed(tmp_path, TWO_NODES_AS_NODE_0)
    assert found[0].evidence[0].label.startswith("line ")
