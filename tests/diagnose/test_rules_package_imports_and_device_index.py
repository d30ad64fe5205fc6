"""The package, cuDNN and device-index readings added for the corpus misses of packages,
cuDNN and visibility: each reads its own line (through ``match_text`` and through the
streaming engine, whose gates and literal filters differ), and each leaves alone the line
one word away that means something else."""

from __future__ import annotations

import pytest

from ddp_doctor.diagnose import diagnose
from ddp_doctor.logrules import GATES, match_text
from tests.support.corpus import LOGS
from tests.support.rules import assert_leads_on_its_own_line, assert_not_read_so

CUDNN_LOADER = ("Could not load library libcudnn_ops_infer.so.8. Error: libcudnn_ops_infer.so.8: "
                "cannot open shared object file: No such file or directory")
LIGHTNING = ("lightning_fabric.utilities.exceptions.MisconfigurationException: You requested "
             "gpu: [1]")

# (line, the code that leads) - one per reading added or widened.
POSITIVES = [
    # a library calls an API its installed dependency removed
    ("TypeError: FormatCode() got an unexpected keyword argument 'verify'", "LOG083"),
    ("ImportError: cannot import name 'container_abcs' from 'torch._six' "
     "(/usr/local/lib/python3.8/dist-packages/torch/_six.py)", "LOG083"),
    ("ModuleNotFoundError: No module named 'torch._six'", "LOG083"),
    ("AttributeError: module 'distutils' has no attribute 'version'", "LOG083"),
    # a compiled extension the loader refused, pasted without the reason
    ("'ImportError: .../lib/python3.7/site-packages/torch_discounted_cumsum_cpu.cpython-37m-"
     "x86_64-linux-gnu.so'", "LOG025"),
    ("ImportError: /opt/conda/lib/python3.10/site-packages/my_op/_ext.cpython-310-x86_64-"
     "linux-gnu.so", "LOG025"),
    # cuDNN 8 opening its own sub-library at the first cuDNN call (torch imported fine)
    (CUDNN_LOADER, "LOG033"),
    # torch's index check, and Lightning's check of Trainer(devices=...)
    ("AssertionError: Invalid device id", "LOG029"),
    ("AssertionError: Invalid peer device id", "LOG029"),
    (LIGHTNING, "LOG029"),
    ("pytorch_lightning.utilities.exceptions.MisconfigurationException: You requested GPUs: "
     "[0, 1]", "LOG029"),
]

# (line, a code it must not be read as) - the neighbours of each reading.
NEAR_MISSES = [
    # the same TypeError from the user's own code says nothing about package versions
    ("TypeError: forward() got an unexpected keyword argument 'verify'", "LOG083"),
    ("TypeError: FormatCode() got an unexpected keyword argument 'style'", "LOG083"),
    # torch itself missing is torch_missing, not a removed API
    ("ModuleNotFoundError: No module named 'torch'", "LOG083"),
    ("ImportError: cannot import name 'container_abcs' from 'collections'", "LOG083"),
    # torch's own extension failing to load is torch that will not import (LOG022)
    ("ImportError: /usr/lib/python3.10/site-packages/torch/_C.cpython-310-x86_64-linux-gnu.so: "
     "undefined symbol: cudaGetDriverEntryPointByVersion", "LOG025"),
    # a library torch needs, named alone: LOG022's, not an extension's
    ("ImportError: libcudart.so.11.0: cannot open shared object file: No such file or "
     "directory", "LOG025"),
    # cuDNN's loader line is not torch failing to import
    (CUDNN_LOADER, "LOG022"),
    # a malformed device string is a typo, and Lightning finding no GPU backend at all is
    # not a wrong index
    ("RuntimeError: Invalid device string: 'cuda:0,1'", "LOG029"),
    ("lightning_fabric.utilities.exceptions.MisconfigurationException: No supported gpu "
     "backend found!", "LOG029"),
    ("lightning_fabric.utilities.exceptions.MisconfigurationException: `Trainer(strategy="
     "'ddp_spawn')` is not compatible with an interactive environment.", "LOG029"),
]


@pytest.mark.parametrize(("line", "code"), POSITIVES)
def test_each_reading_leads_on_its_own_line(tmp_path, line, code):
    assert_leads_on_its_own_line(tmp_path, line, code)


@pytest.mark.parametrize(("line", "code"), NEAR_MISSES)
def test_the_neighbouring_line_is_not_read_so(tmp_path, line, code):
    assert_not_read_so(tmp_path, line, code)


def test_a_missing_cudnn_alone_is_read_as_cudnn_absent():
    """TensorFlow, Paddle, onnxruntime and nnabla print the same loader line when cuDNN is
    not installed (sony/nnabla#806): without torch's import in view it is cuDNN's absence."""
    found = match_text("ImportError: libcudnn.so.8: cannot open shared object file: No such "
                       "file or directory")
    assert found[0].rule.code.id == "LOG033"


def test_a_missing_cudnn_under_torchs_own_import_stays_torch_missing(tmp_path):
    log = tmp_path / "torch-import.log"
    log.write_text('  File "/venv/lib64/python3.11/site-packages/torch/__init__.py", line 427\n'
                   "    from torch._C import *  # noqa: F403\n"
                   "ImportError: libcudnn.so.9: cannot open shared object file: No such file "
                   "or directory\n")
    lead = diagnose(str(log)).report.results[0].findings[0]
    assert (lead.code.id, lead.code.category.value) == ("LOG022", "torch_missing")


def test_a_missing_cudnn_beside_another_frameworks_import_is_cudnn_absent(tmp_path):
    log = tmp_path / "nnabla.log"
    log.write_text("    import nnabla_ext.cuda\n"
                   "ImportError: libcudnn.so.8: cannot open shared object file: No such file "
                   "or directory\n")
    lead = diagnose(str(log)).report.results[0].findings[0]
    assert (lead.code.id, lead.code.category.value) == ("LOG033", "cudnn_failure")


def test_lightnings_line_is_gated_only_by_the_exception_word():
    """Nothing else on Lightning's line is a gate: without "exception" the engine would
    never try a rule on it."""
    assert "exception" in GATES
    assert [g for g in GATES if g in LIGHTNING.lower()] == ["exception"]


def test_lightning_is_told_to_change_the_trainer_devices(tmp_path):
    rule = match_text(LIGHTNING)[0].rule
    assert any(s.command == "python train.py trainer.devices=[0]" for s in rule.steps)
    assert not any(s.command and "torchrun" in s.command for s in rule.steps)


def test_torchs_index_check_is_told_to_fix_the_indices_the_script_passes():
    rule = match_text("AssertionError: Invalid device id")[0].rule
    assert any("device_ids=list(range(torch.cuda.device_count()))" in s.text
               for s in rule.steps)


def test_the_removed_api_fix_pins_the_dependency():
    rule = match_text("TypeError: FormatCode() got an unexpected keyword argument 'verify'")[0]
    assert rule.rule.code.category.value == "package_conflict"
    assert any(s.command == "python -m pip install 'yapf==0.40.1'" for s in rule.rule.steps)


# The corpus cases these readings were written for (tests/data/logs/cases_*.toml).
FIXED_CASES = [
    ("oa-dg-3.log", "package_conflict"),
    ("torch-discounted-cumsum-9.log", "package_conflict"),
    ("xtts-finetune-webui-31.log", "cudnn_failure"),
    ("im2recipe-pytorch-11.log", "gpu_not_visible"),
    ("nemo-compatible-16.log", "gpu_not_visible"),
]


@pytest.mark.parametrize(("name", "category"), FIXED_CASES)
def test_the_corpus_cases_name_their_threads_cause(name, category):
    lead = diagnose(str(LOGS / name)).report.results[0].findings[0]
    assert lead.code.category.value == category
