"""Messages of the sources that state a package conflict or a slow run (issue 23 item 2).

Each line is printed by the program named beside it; each test fails without its catalogue
entry (the line was read as nothing before, or, for the gate, never reached a rule).
"""

from __future__ import annotations

import pytest

from tests.support.rules import lead_reading


@pytest.mark.parametrize(("line", "code"), [
    # NumPy 1.24's expired aliases (numpy/__init__.py __getattr__): the message's second and
    # third lines, and the first without "AttributeError: "
    ("`np.int` was a deprecated alias for the builtin `int`. To avoid this error in existing "
     "code, use `int` by itself. Doing this will not modify any behavior and is safe.",
     "LOG026"),
    ("The aliases was originally deprecated in NumPy 1.20; for more details and guidance see "
     "the original release note at:", "LOG026"),
    ("module 'numpy' has no attribute 'float'.", "LOG026"),
    # CPython's import_from, for libraries whose names move between releases
    ("ImportError: cannot import name 'EncoderDecoderCache' from 'transformers' "
     "(/opt/conda/lib/python3.10/site-packages/transformers/__init__.py)", "LOG101"),
    ("ImportError: cannot import name 'is_flash_attn_greater_or_equal_2_10' from "
     "'transformers.utils'", "LOG101"),
    ("ImportError: cannot import name 'load_state_dict_from_url' from "
     "'torchvision.models.utils'", "LOG101"),
    ("ImportError: cannot import name 'soft_unicode' from 'markupsafe' "
     "(/usr/local/lib/python3.8/dist-packages/markupsafe/__init__.py)", "LOG101"),
    ("ImportError: cannot import name 'Iterable' from 'collections' "
     "(/usr/lib/python3.10/collections/__init__.py)", "LOG083"),
])
def test_a_version_split_is_read_as_a_package_conflict(tmp_path, line, code):
    assert lead_reading(tmp_path, line) == (code, "package_conflict")


@pytest.mark.parametrize("line", [
    # a circular import, and the user's own module: no library release to blame
    "ImportError: cannot import name 'Trainer' from partially initialized module "
    "'transformers' (most likely due to a circular import)",
    # NumPy 1.20-1.23's warning: the alias still works there
    "DeprecationWarning: `np.int` is a deprecated alias for the builtin `int`. To silence "
    "this warning, use `int` by itself.",
])
def test_what_names_no_release_is_not_read_as_a_conflict(tmp_path, line):
    assert lead_reading(tmp_path, line)[1] != "package_conflict"


def test_a_name_missing_from_a_projects_own_module_is_no_rules_conflict(tmp_path):
    """No rule names a release for it; the fallback may lead, as a lead: a project's package
    that swallows a dependency's import failure shows only the missing name
    (haotian-liu/LLaVA#1034: flash-attn built for another torch)."""
    code, _ = lead_reading(tmp_path, "ImportError: cannot import name 'helper' from 'utils' "
                                     "(/home/me/project/utils.py)")
    assert not code.startswith("LOG")


@pytest.mark.parametrize("line", [
    # torch/_dynamo/convert_frame.py, printed by logging in glog's format (no "warn")
    "W1128 10:15:02.553000 140211 torch/_dynamo/convert_frame.py:844] [0/8] torch._dynamo hit "
    "config.cache_size_limit (8)",
    "torch._dynamo hit config.recompile_limit (8)",
])
def test_torch_compile_giving_up_on_a_function_is_a_slow_run(tmp_path, line):
    assert lead_reading(tmp_path, line) == ("LOG102", "performance_degraded")


# torch/serialization.py (v2.6 and later): torch.load became weights-only by default, and a
# checkpoint pickling a model class is refused when the loading code predates it (the
# Ultralytics and YOLOv5 threads of 2025: ComfyUI-Impact-Pack#1120, comfyui_facetools#31).
WEIGHTS_ONLY = (
    "Traceback (most recent call last):\n"
    "  File \"train.py\", line 12, in <module>\n"
    "    model = YOLO(\"yolov8n.pt\")\n"
    "_pickle.UnpicklingError: Weights only load failed. This file can still be loaded, to do "
    "so you have two options, do those steps only if you trust the source of the checkpoint.\n"
    "\t(1) In PyTorch 2.6, we changed the default value of the `weights_only` argument in "
    "`torch.load` from `False` to `True`. Re-running `torch.load` with `weights_only` set to "
    "`False` will likely succeed, but it can result in arbitrary code execution.\n"
    "\tWeightsUnpickler error: Unsupported global: GLOBAL ultralytics.nn.tasks.DetectionModel "
    "was not an allowed global by default.")


def test_a_checkpoint_refused_by_torch_2_6_weights_only_default_is_a_package_conflict(
        tmp_path):
    assert lead_reading(tmp_path, WEIGHTS_ONLY) == ("LOG108", "package_conflict")
    # The second wording (no global named) opens with the default's change itself.
    assert lead_reading(
        tmp_path, "Weights only load failed. In PyTorch 2.6, we changed the default "
        "value of the `weights_only` argument in `torch.load` from `False` to `True`. "
        "Re-running `torch.load` with `weights_only` set to `False` will likely "
        "succeed") == ("LOG108", "package_conflict")


def test_code_that_passes_weights_only_is_not_read(tmp_path):
    code, _ = lead_reading(
        tmp_path, "ckpt = torch.load(path, map_location='cpu', weights_only=False)")
    assert code == "DIAG001"
