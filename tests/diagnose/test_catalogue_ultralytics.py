"""The ultralytics catalogue (logrules/catalogues/ultralytics.toml, read from Ultralytics
v8.4.190): each message, printed as the trainer prints it, leads a log that holds only that
line with its cause's code; the lines next to them (a check that passed, an install that
will be tried, a retry) are not read so; and a run that fails for a stronger reason is still
led by that reason."""

from __future__ import annotations

import pytest

from ddp_doctor.logrules import CATALOGUES
from tests.support.rules import lead

READINGS = [
    # utils/checks.py check_amp: the GPU-name list, then the float32/AMP comparison (ERROR
    # level in 8.4, a WARNING in 8.0 whose emoji Windows drops: ultralytics#1348)
    ("WARNING ⚠️ AMP: checks failed ❌. AMP training on NVIDIA GeForce GTX 1650 GPU may cause "
     "NaN losses or zero-mAP results, so AMP will be disabled during training.",
     "LOG103", "performance_degraded"),
    ("ERROR ❌ AMP: checks failed. Anomalies were detected with AMP on your system that may "
     "lead to NaN losses or zero-mAP results, so AMP will be disabled during training.",
     "LOG103", "performance_degraded"),
    ("AMP: checks failed . Anomalies were detected with AMP on your system that may lead to "
     "NaN losses or zero-mAP results, so AMP will be disabled during training.",
     "LOG103", "performance_degraded"),
    # utils/torch_utils.py autocast with amp='bf16'
    ("RuntimeError: bfloat16 autocast requires CUDA with native bfloat16 support and "
     "torch>=1.13", "LOG098", "torch_arch_unsupported"),
    # engine/trainer.py: cuBLAS/cuDNN memory errors in the first epoch; utils/autobatch.py
    ("WARNING ⚠️ CUDA backend memory error with batch=16. Reducing to batch=8 and retrying "
     "(1/3).", "LOG037", "gpu_out_of_memory"),
    ("RuntimeError: AutoBatch: no usable batch size found while profiling batch=[1, 2, 4, 8, "
     "16]. See the errors above, free GPU memory, reduce imgsz, or set batch explicitly.",
     "LOG005", "gpu_out_of_memory"),
    # utils/checks.py check_requirements / check_version / check_multiple_install
    ("WARNING ⚠️ requirements: ❌ AutoUpdate skipped (offline)", "LOG104", "package_conflict"),
    ("WARNING ⚠️ requirements: Ultralytics requirement ['cloudpickle>=3.1.1'] not found, "
     "AutoUpdate disabled by YOLO_AUTOINSTALL=False", "LOG104", "package_conflict"),
    ("ModuleNotFoundError: cloudpickle package is required but not installed",
     "LOG104", "package_conflict"),
    ("ModuleNotFoundError: torch>=1.8.0 is required, but torch==1.7.1 is currently installed",
     "LOG027", "package_conflict"),
    ("WARNING ⚠️ Python>=3.8.0 is required, but Python==3.7.16 is currently installed",
     "LOG027", "package_conflict"),
    ("WARNING ⚠️ Multiple Ultralytics installations detected. The `yolo` command uses: "
     "/opt/venv/lib/python3.11/site-packages/ultralytics, but current session imports from: "
     "/home/u/ultralytics/ultralytics. This may cause version conflicts.",
     "LOG027", "package_conflict"),
    # nn/tasks.py torch_safe_load
    ("ModuleNotFoundError: ERROR ❌️ yolo11n.pt requires numpy>=1.26.1, however "
     "numpy==1.24.4 is installed.", "LOG026", "package_conflict"),
    ("TypeError: ERROR ❌️ best.pt appears to be an Ultralytics YOLOv5 model originally "
     "trained with https://github.com/ultralytics/yolov5. This model is NOT forwards "
     "compatible with YOLOv8 at https://github.com/ultralytics/ultralytics.",
     "LOG105", "package_conflict"),
    ("ModuleNotFoundError: ERROR ❌️ yolo26n.pt requires missing Ultralytics module "
     "'ultralytics.nn.modules.head26'. Train a new model using the latest 'ultralytics' "
     "package", "LOG105", "package_conflict"),
    ("WARNING ⚠️ best.pt appears to require 'dill', which is not in Ultralytics requirements.",
     "LOG105", "package_conflict"),
    # data/utils.py check_image_speed, check_det_dataset, check_cls_dataset
    ("WARNING ⚠️ train: Slow image access detected (ping: 12.3±1.0 ms, read: 2.1±0.3 MB/s, "
     "size: 50.0 KB). Use local storage instead of remote/mounted storage for better "
     "performance. See https://docs.ultralytics.com/guides/model-training-tips",
     "LOG106", "performance_degraded"),
    ("FileNotFoundError: data.yaml 'val:' images not found", "LOG066", "unknown"),
    ("FileNotFoundError: /data/cls 'train:' no training images found", "LOG066", "unknown"),
    ("FileNotFoundError: No images found in /data/cls or its subdirectories.",
     "LOG066", "unknown"),
    # utils/downloads.py safe_download
    ("ConnectionError: ❌  Download failure for https://github.com/ultralytics/assets/releases/"
     "download/v8.4.0/yolo11n.pt. Retry limit reached.", "LOG107", "unknown"),
]

NEAR_MISSES = [
    "AMP: checks passed ✅",
    "AMP: running Automatic Mixed Precision (AMP) checks...",
    "WARNING ⚠️ AMP: checks skipped. Offline and unable to download YOLO26n for AMP checks. "
    "Setting 'amp=True'. If you experience zero-mAP or NaN losses you can disable AMP with "
    "amp=False.",
    # an install Ultralytics is about to try, and one that worked
    "requirements: Ultralytics requirement ['cloudpickle>=3.1.1'] not found, attempting "
    "AutoUpdate...",
    "requirements: AutoUpdate success ✅ 2.1s",
    "AutoBatch: Using batch-size 24 for CUDA:0 9.31G/23.65G (39%) ✅",
    "train: Fast image access ✅ (ping: 0.0±0.0 ms, read: 1234.5±56.7 MB/s, size: 50.0 KB)",
    "WARNING ⚠️ Download failure, retrying 1/3 in 1s https://github.com/ultralytics/assets/"
    "releases/download/v8.4.0/yolo11n.pt...",
    # a check_det_dataset warning before a download that may well work
    "WARNING ⚠️ Dataset 'coco8.yaml' images not found, missing path "
    "'/datasets/coco8/images/val'",
    # the same sentences in prose, with no warning or error before them
    "Note: AutoUpdate skipped (offline) is printed when the machine has no internet.",
]

OWN_CODES = {"LOG103", "LOG104", "LOG105", "LOG106", "LOG107"}


def test_the_catalogue_cites_ultralytics_at_its_version():
    source, entries = CATALOGUES["ultralytics"]
    assert (source.repository, source.version) == (
        "https://github.com/ultralytics/ultralytics", "v8.4.190")
    assert {e.code.id for e in entries} >= OWN_CODES


@pytest.mark.parametrize(("line", "code", "category"), READINGS)
def test_the_message_alone_leads_with_its_cause(tmp_path, line, code, category):
    found = lead(tmp_path, line + "\n")
    assert (found.code.id, found.code.category.value) == (code, category)


@pytest.mark.parametrize("line", NEAR_MISSES)
def test_the_neighbouring_line_is_not_read_so(tmp_path, line):
    found = lead(tmp_path, line + "\n")
    assert found.code.id not in OWN_CODES | {"LOG005", "LOG027", "LOG066"}


def test_an_offline_multi_gpu_launch_is_read_as_the_missing_package(tmp_path):
    """Ultralytics 8.4 pip-installs cloudpickle at the first multi-GPU run
    (utils/dist.py generate_ddp_file); offline it cannot, and the import then fails."""
    found = lead(tmp_path, (
        "Ultralytics 8.4.190 🚀 Python-3.11.7 torch-2.5.1+cu124 CUDA:0 (NVIDIA A100-SXM4-80GB, "
        "81051MiB)\n"
        "requirements: Ultralytics requirement ['cloudpickle>=3.1.1'] not found, attempting "
        "AutoUpdate...\n"
        "WARNING ⚠️ requirements: ❌ AutoUpdate skipped (offline)\n"
        "Traceback (most recent call last):\n"
        '  File "/opt/venv/lib/python3.11/site-packages/ultralytics/utils/dist.py", line 72, in '
        "generate_ddp_file\n"
        "    import cloudpickle\n"
        "ModuleNotFoundError: No module named 'cloudpickle'\n"))
    assert found.code.id == "LOG104"


def test_an_out_of_memory_error_still_leads_a_run_whose_amp_check_failed(tmp_path):
    """The AMP warning is a performance warning: an error later in the run leads."""
    found = lead(tmp_path, (
        "WARNING ⚠️ AMP: checks failed ❌. AMP training on NVIDIA GeForce GTX 1650 GPU may "
        "cause NaN losses or zero-mAP results, so AMP will be disabled during training.\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a "
        "total capacity of 3.81 GiB of which 1.06 MiB is free.\n"))
    assert found.code.id == "LOG005"
