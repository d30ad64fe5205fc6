"""The package, launcher and cuDNN readings added for the training split's misses: each
reads its own line (through ``match_text`` and through the streaming engine, whose gates and
literal filters differ), and each leaves alone the line one word away that means something
else."""

from __future__ import annotations

import pytest

from ddp_doctor.diagnose import diagnose
from ddp_doctor.logrules import match_text
from tests.support.corpus import LOGS
from tests.support.rules import assert_leads_on_its_own_line, assert_not_read_so, lead, log_codes

# (line, the code that leads) - one per reading added or widened.
POSITIVES = [
    # torch 2.x's launcher passes --local-rank to a script written for torch 1.x
    ("train.py: error: unrecognized arguments: --local-rank=0", "LOG078"),
    ("trainval_distributed.py: error: unrecognized arguments: --local-rank=1", "LOG078"),
    ("train.py: error: unrecognized arguments: --amp --local-rank=3", "LOG078"),
    # xFormers built for another torch
    ("    PyTorch 2.5.1+cu124 with CUDA 1204 (you have 2.6.0+cu124)", "LOG027"),
    ("    PyTorch 2.3.0+cu121 with CUDA None (you have 2.0.0+cu117)", "LOG027"),
    # ... or the installed torch is the CPU wheel
    ("    PyTorch 2.1.2+cu121 with CUDA 1201 (you have 2.1.2+cpu)", "LOG023"),
    # torch._C missing: Python 2's form, and torch's own message
    ("ImportError: No module named _C", "LOG021"),
    ("ImportError: Failed to load PyTorch C extensions:", "LOG021"),
    # cuDNN's handle refused to a program calling cuDNN itself, and torch's report of it
    ("CUDNN failure: CUDNN_STATUS_NOT_INITIALIZED", "LOG079"),
    ("RuntimeError: cuDNN error: CUDNN_STATUS_NOT_INITIALIZED", "LOG079"),
    ("Check failed: status == CUDNN_STATUS_SUCCESS (1 vs. 0) CUDNN_STATUS_NOT_INITIALIZED",
     "LOG079"),
]

# (line, a code it must not be read as) - the neighbours of each reading.
NEAR_MISSES = [
    # the underscored option is also what DeepSpeed's launcher passes: another mistake
    ("train.py: error: unrecognized arguments: --local_rank=0", "LOG078"),
    ("train.py: error: unrecognized arguments: --batch-size=8", "LOG078"),
    ("usage: train.py [-h] [--local-rank LOCAL_RANK]", "LOG078"),
    # the same torch on both sides: xFormers failed for another reason
    ("    PyTorch 2.5.1+cu124 with CUDA 1204 (you have 2.5.1+cu124)", "LOG027"),
    ("    PyTorch 2.5.1+cu124 with CUDA 1204 (you have 2.5.1+cu124)", "LOG023"),
    ("    Python  3.10.11 (you have 3.10.0)", "LOG027"),
    # a CPU torch is not a version conflict
    ("    PyTorch 2.1.2+cu121 with CUDA 1201 (you have 2.1.2+cpu)", "LOG027"),
    # another package's missing _C, named in full by Python 3
    ("ModuleNotFoundError: No module named 'detectron2._C'", "LOG021"),
    ("ImportError: No module named _C.foo", "LOG021"),
    # TensorFlow reports it after its memory pool took the GPU: LOG037 stays
    ("E tensorflow/stream_executor/cuda/cuda_dnn.cc:359] could not create cudnn handle: "
     "CUDNN_STATUS_NOT_INITIALIZED", "LOG079"),
    ("RuntimeError: cuDNN error: CUDNN_STATUS_INTERNAL_ERROR", "LOG079"),
]


@pytest.mark.parametrize(("line", "code"), POSITIVES)
def test_each_reading_leads_on_its_own_line(tmp_path, line, code):
    assert_leads_on_its_own_line(tmp_path, line, code)


@pytest.mark.parametrize(("line", "code"), NEAR_MISSES)
def test_the_neighbouring_line_is_not_read_so(tmp_path, line, code):
    assert_not_read_so(tmp_path, line, code)


def test_torch_reports_of_a_failed_cudnn_handle_are_a_cudnn_failure_with_memory_beside(tmp_path):
    """Three of the corpus's four torch threads were a build that did not fit the machine
    (GRIP#23, MSRF-Net_PyTorch#1, CLRNet#24), one a full GPU (DAMO-YOLO#20)."""
    line = "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_INITIALIZED"
    found = lead(tmp_path, line + "\n")
    assert (found.code.id, found.category.value) == ("LOG079", "cudnn_failure")
    commands = " ".join(s.command or "" for s in found.remediation)
    assert "torch.backends.cudnn.version()" in commands
    assert "pip install --force-reinstall" in commands
    assert "/dev/nvidia" not in commands  # the device-node steps are a cuDNN caller's
    rule = match_text(line)[0].rule
    assert rule.alternatives and rule.alternatives[0].startswith("gpu_out_of_memory:")


def test_an_out_of_memory_beside_it_is_the_cause_it_follows(tmp_path):
    text = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB\n"
            "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_INITIALIZED\n")
    assert lead(tmp_path, text).category.value == "gpu_out_of_memory"


def test_a_program_calling_cudnn_itself_is_told_to_check_device_access():
    rule = match_text("CUDNN failure: CUDNN_STATUS_NOT_INITIALIZED")[0].rule
    assert rule.code.category.value == "cudnn_failure"
    assert any(s.command and "/dev/nvidia" in s.command for s in rule.steps)
    assert rule.alternatives and rule.alternatives[0].startswith("gpu_out_of_memory:")


def test_python2s_missing_c_gets_the_run_elsewhere_step():
    rule = match_text("ImportError: No module named _C")[0].rule
    assert rule.steps[0].command and rule.steps[0].command.startswith("cd ~")


def test_the_local_rank_fix_accepts_both_spellings():
    rule = match_text("train.py: error: unrecognized arguments: --local-rank=0")[0].rule
    assert rule.code.category.value == "package_conflict"
    assert any("'--local-rank', '--local_rank'" in s.text for s in rule.steps)


def test_xformers_lines_under_its_warning_read_as_one_finding(tmp_path):
    # As xFormers prints it: the warning, then what it was built for and what is installed.
    text = ("WARNING[XFORMERS]: xFormers can't load C++/CUDA extensions. xFormers was built "
            "for:\n"
            "    PyTorch 2.5.1+cu124 with CUDA 1204 (you have 2.6.0+cu124)\n"
            "    Python  3.10.11 (you have 3.10.11)\n"
            "  Please reinstall xformers (see https://github.com/facebookresearch/xformers"
            "#installing-xformers)\n")
    assert log_codes(tmp_path, text) == ["LOG027"]


# The training-split cases these readings were written for (tests/data/logs/cases_*.toml).
FIXED_CASES = [
    ("pytorch-image-models-1728.log", "package_conflict"),
    ("sn-net-2.log", "package_conflict"),
    ("vlpd-6.log", "package_conflict"),
    ("musubi-tuner-scripts-4.log", "package_conflict"),
    ("dynamicrafter-86.log", "package_conflict"),
    ("pytorch-574.log", "torch_missing"),
    ("pia-30.log", "torch_cpu_only"),
    ("tkdnn-282.log", "cudnn_failure"),
]


@pytest.mark.parametrize(("name", "category"), FIXED_CASES)
def test_the_corpus_cases_name_their_threads_cause(name, category):
    lead = diagnose(str(LOGS / name)).report.results[0].findings[0]
    assert lead.code.category.value == category
