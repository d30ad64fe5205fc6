"""The remediation a finding shows fits the line that was matched and the trainer that wrote
the log: the exact commands ``diagnose`` prints for real corpus logs, the variants' own
contract (``logrules/remedies.py``), and the trainer read from a log
(``logrules/which_trainer.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddp_doctor.diagnose import diagnose
from ddp_doctor.logrules import GATES, LOG_CODES, RULES, TRAINERS, match_text
from ddp_doctor.logrules.remedies import VARIANTS
from ddp_doctor.logrules.rule import ULTRALYTICS, YOLOV5
from ddp_doctor.logrules.which_trainer import which_trainer
from ddp_doctor.model import Finding

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"


def finding(path: Path | str, code: str) -> Finding:
    findings = diagnose(str(path)).report.results[0].findings
    found = [f for f in findings if f.code.id == code]
    assert found, [f.code.id for f in findings]
    return found[0]


def shown(f: Finding) -> list[str]:
    """What each step asks for: its command, or its text where it has none."""
    return [step.command or step.text for step in f.remediation]


NVIDIA_SMI = "nvidia-smi"
LIST_GPUS = ('nvidia-smi -L; echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"; '
             'python -c "import torch; print(torch.cuda.device_count())"')
SHOW_TORCH = ('python -c "import torch, sys; print(sys.executable, torch.__version__, '
              'torch.version.cuda, torch.cuda.is_available())"')
OOM_KILLER = "sudo dmesg -T | grep -i -E 'killed process|out of memory|oom'"
YOLOV5_DDP = ("python -m torch.distributed.run --nproc_per_node 2 train.py --data data.yaml "
              "--weights yolov5s.pt")
FEWER_WORKERS = ("Use fewer DataLoader workers (DataLoader(..., num_workers=2)) or a smaller "
                 "batch.")
WATCHDOG_DECIDE = ["sudo dmesg -T | grep -i -E 'killed process|out of memory'",
                   "TORCH_NCCL_DUMP_ON_TIMEOUT=1 TORCH_NCCL_TRACE_BUFFER_SIZE=2000 torchrun ..."]
WHICH_TORCH = 'python -c "import sys; print(sys.executable)"; python -m pip show torch'
CUDNN_LOAD = ["echo $LD_LIBRARY_PATH", "env -u LD_LIBRARY_PATH python train.py",
              'export LD_LIBRARY_PATH=$(python -c "import nvidia.cudnn; '
              'print(nvidia.cudnn.__path__[0])")/lib:$LD_LIBRARY_PATH']
LATE_RANK = "Find the rank that did not join: its error, or its last progress line, comes first."

# (corpus log, code, the steps shown). Each log is a real paste from the thread named in
# cases_*.toml (none from the blind split); the YOLO ones show the trainer's own options.
CORPUS = [
    # YOLOv5's "python3 train.py --img 512 --batch-size 16 ... --device 0" ran out of GPU
    # memory: the batch is lowered in YOLOv5's own option, not in a DataLoader call.
    ("yolov5-2510.log", "LOG005",
     [NVIDIA_SMI,
      "python train.py --data data.yaml --weights yolov5s.pt --batch-size 8 --img 512"]),
    # The same code in a log no trainer wrote: the torch-level advice.
    ("funasr-2006.log", "LOG005",
     [NVIDIA_SMI, "Lower the per-GPU batch size, or train in mixed precision (torch.autocast("
                  "'cuda', dtype=torch.float16) with torch.amp.GradScaler)."]),
    # YOLOv5's select_device: "batch-size 64 not multiple of GPU count 9".
    ("yolov5-wudashuo-3.log", "LOG058", [f"{YOLOV5_DDP} --batch-size 64 --device 0,1"]),
    # A plain "assert args.batch_size % len(devices) == 0": count the GPUs, no YOLO option.
    ("matchsum-11.log", "LOG058", ["nvidia-smi -L | wc -l"]),
    # YOLOv5 DDP: rank 0 validating (4409) or caching labels (4400) past the 60 s timeout.
    ("yolov5-4409.log", "LOG047",
     [LATE_RANK, "git pull", f"{YOLOV5_DDP} --device 0,1 --noval", *WATCHDOG_DECIDE]),
    ("yolov5-4400.log", "LOG047",
     [LATE_RANK, "git pull", f"{YOLOV5_DDP} --device 0,1 --noval", *WATCHDOG_DECIDE]),
    ("accelerate-314.log", "LOG047",
     [LATE_RANK, "For long rank-0-only work (evaluation, caching), raise the timeout in the "
                 "script: dist.init_process_group('nccl', timeout=datetime.timedelta(hours=2)); "
                 "better, let every rank do its share.", *WATCHDOG_DECIDE]),
    ("yolor-58.log", "LOG065",
     ["env | grep -E 'LOCAL_RANK|WORLD_SIZE'",
      "python train.py --data data.yaml --weights yolov5s.pt --device 0 --evolve",
      "for i in 0 1; do nohup python train.py --data data.yaml --weights yolov5s.pt "
      "--device $i --evolve > evolve_gpu_$i.log & done"]),
    ("yolov5-lite-195.log", "LOG064",
     [LIST_GPUS, "python -m torch.distributed.run --nproc_per_node 2 train.py --device 0,1"]),
    # An Ultralytics log whose cause (a +cpu torch) has nothing to do with its options.
    ("comic-translate-17.log", "LOG024", [SHOW_TORCH, NVIDIA_SMI, 'echo "$CUDA_VISIBLE_DEVICES"']),
    # sm_120 (RTX 5090): the cu128 wheels, not "a build that supports the GPU".
    ("leggedlab-26.log", "LOG028",
     ['python -c "import torch; print(torch.cuda.get_device_capability(), '
      'torch.cuda.get_arch_list(), torch.__version__)"',
      "pip install --force-reinstall torch torchvision --index-url "
      "https://download.pytorch.org/whl/cu128"]),
    # "NVRM: The NVIDIA probe routine was not called": nouveau holds the GPU.
    ("bigdata-133.log", "LOG009",
     ["lsmod | grep -E 'nvidia|nouveau'; sudo dmesg -T | grep -i nvrm",
      "printf 'blacklist nouveau\\noptions nouveau modeset=0\\n' | sudo tee "
      "/etc/modprobe.d/blacklist-nouveau.conf && sudo update-initramfs -u && sudo reboot",
      NVIDIA_SMI, "uname -r"]),
    # A kernel upgrade left the module unbuilt (and dkms missing).
    ("nvidia-docker-365.log", "LOG009",
     ["lsmod | grep -E 'nvidia|nouveau'; dkms status; uname -r",
      "sudo apt-get install -y dkms linux-headers-$(uname -r) && sudo dkms autoinstall",
      NVIDIA_SMI, "uname -r"]),
    ("ultralytics-18979.log", "LOG026",
     ['python -c "import numpy; print(numpy.__version__)"', "pip install 'numpy<2'"]),
    ("ultralytics-22944.log", "LOG007",
     [OOM_KILLER, "Use fewer DataLoader workers (DataLoader(..., num_workers=2)) or a smaller "
                  "batch, or raise the memory limit."]),
    ("pytorch-35710.log", "LOG015",
     ["systemctl status nvidia-fabricmanager",
      "sudo apt-get install -y nvidia-fabricmanager-$(nvidia-smi --query-gpu=driver_version "
      "--format=csv,noheader | head -1 | cut -d. -f1) && sudo systemctl enable --now "
      "nvidia-fabricmanager"]),
    ("3drs-7.log", "LOG038", [OOM_KILLER, FEWER_WORKERS]),
    ("ssd-tensorflow-8.log", "LOG006", ["free -h", FEWER_WORKERS]),
    ("pangeo-docker-images-258.log", "LOG008", ["df -h /dev/shm", "docker run --ipc=host ..."]),
    ("llm-d-352.log", "LOG040", ["df -h /dev/shm", "docker run --ipc=host ..."]),
    ("detectron2-460.log", "LOG023",
     [SHOW_TORCH, "pip install --force-reinstall torch torchvision --index-url "
                  "https://download.pytorch.org/whl/cu126"]),
    ("pick-pytorch-14.log", "LOG029",
     [LIST_GPUS, "torchrun --nproc_per_node=2 train.py",
      "In the script, select the GPU by LOCAL_RANK, not the global rank: local_rank = "
      "int(os.environ['LOCAL_RANK']); torch.cuda.set_device(local_rank)."]),
    ("weathergenerator-1104.log", "LOG021", [WHICH_TORCH, "python -m pip install torch"]),
    # torch fails to import: nothing that imports it again, the wheels side by side, and a
    # reinstall pinned to a version and CUDA variant (not whatever PyPI has today).
    # The two nvidia-nccl wheels listed beside it make it the package conflict (DIAG006),
    # which says which wheels to remove first and then carries the import failure's steps.
    ("returnn-1802.log", "DIAG006",
     ["Uninstall the NVIDIA wheels built for the CUDA version torch was not built for "
      "(torch's +cuXXX suffix names its own), keeping one build of each library.",
      WHICH_TORCH, "echo $LD_LIBRARY_PATH", "pip list 2>/dev/null | grep -i -E '^(torch|nvidia-)'",
      "pip install --force-reinstall torch==2.5.1 --index-url "
      "https://download.pytorch.org/whl/cu124",
      "ldd $(python -c 'import importlib.util,os;print(os.path.dirname(importlib.util.find_spec("
      "\"torch\").origin))')/lib/libtorch_cuda.so | grep -E 'not found|nccl|cudnn'"]),
    # Two cuDNN installs mixed (dlib), and cuDNN 9 only inside torch's wheel (CTranslate2).
    ("dlib-2719.log", "LOG033", CUDNN_LOAD),
    ("ctranslate2-1826.log", "LOG033", CUDNN_LOAD),
    ("pytorch-80637.log", "LOG032",
     ['python -c "import torch; print(torch.backends.cudnn.version())"', "echo $LD_LIBRARY_PATH",
      "env -u LD_LIBRARY_PATH python train.py"]),
    ("cuml-5624.log", "LOG030",
     [LIST_GPUS, "unset CUDA_VISIBLE_DEVICES", "docker run --gpus all ...", "ls -l /dev/nvidia*"]),
]


@pytest.mark.parametrize(("log", "code", "steps"), CORPUS,
                         ids=[f"{code}-{log}" for log, code, _ in CORPUS])
def test_corpus_log_gets_the_steps_that_fit_it(log, code, steps):
    assert shown(finding(LOGS / log, code)) == steps


@pytest.mark.parametrize(("log", "trainer"), [
    ("yolov5-2510.log", YOLOV5),  # "train.py --img 512 --batch-size 16"
    ("yolov5-lite-195.log", YOLOV5),  # "YOLOv5 🚀 v1.4-7-g5d95d06 torch 1.10.2+cu102"
    ("yolov5-wudashuo-3.log", YOLOV5),  # ".../yolov5-master/train.py"
    ("yolov5-4409.log", YOLOV5),  # "mAP@.5 mAP@.5:.95"
    ("yolor-58.log", YOLOV5),  # "train.py --batch-size 64 --img 1280 1280"
    ("comic-translate-17.log", ULTRALYTICS),  # "Ultralytics YOLOv8.1.3 🚀 Python-..."
    ("yolov8-multi-task-54.log", ULTRALYTICS),  # ".../ultralytics/yolo/engine/trainer.py"
    ("ultralytics-18979.log", ULTRALYTICS),  # "ultralytics/__init__.py"
    ("ultralytics-3057.log", None),  # a bare watchdog line shows no trainer
    ("accelerate-314.log", None),
    ("nccl-473.log", None),
    ("matchsum-11.log", None),
])
def test_the_trainer_is_read_from_what_it_printed(log, trainer):
    assert which_trainer([(LOGS / log).read_text(encoding="utf-8")]) == trainer


def test_a_log_showing_both_trainers_names_neither():
    both = ("Ultralytics 8.3.74 🚀 Python-3.12.9 torch-2.6.0+cu124 CUDA:0 (Tesla T4, 14918MiB)\n"
            "YOLOv5 🚀 v7.0-0-g915bbf2 Python-3.10.6 torch-2.0.0+cu118 CUDA:0 (A100, 81100MiB)\n")
    assert which_trainer([both]) is None


# -- one line, two meanings: LOG057 and LOG070 ------------------------------------------------

TRACEBACK = ('Traceback (most recent call last):\n'
             '  File "train.py", line 88, in <module>\n'
             '    loss = criterion(model(imgs), targets)\n')
CPU_LINE = ("RuntimeError: Expected all tensors to be on the same device, but found at least "
            "two devices, cuda:0 and cpu!")
GPUS_LINE = ("RuntimeError: Expected all tensors to be on the same device, but found at least "
             "two devices, cuda:0 and cuda:1!")


def test_a_tensor_left_on_the_cpu_is_its_own_code_with_the_fix_for_it(tmp_path):
    log = tmp_path / "cpu.log"
    log.write_text(TRACEBACK + CPU_LINE + "\n", encoding="utf-8")
    findings = diagnose(str(log)).report.results[0].findings
    assert [f.code.id for f in findings] == ["LOG070", "DIAG008"]  # then similar threads
    texts = [step.text for step in findings[0].remediation]
    assert texts[0].startswith("Move each batch to the model's device in the training loop: "
                               "imgs, targets = imgs.to(device), targets.to(device)")
    assert "torch.zeros(n, device=x.device)" in texts[1]
    assert "self.register_buffer('anchors', t)" in texts[2]
    assert not any("set_device" in text or "device_ids" in text for text in texts)


def test_two_gpus_in_one_operation_keep_the_ddp_binding_fix(tmp_path):
    log = tmp_path / "gpus.log"
    log.write_text(TRACEBACK + GPUS_LINE + "\n", encoding="utf-8")
    found = finding(log, "LOG057")
    assert [s.text for s in found.remediation] == [
        "In the training script, bind each rank to its own GPU before building the model: "
        "local_rank = int(os.environ['LOCAL_RANK']); torch.cuda.set_device(local_rank); "
        "model.to(local_rank); DistributedDataParallel(model, device_ids=[local_rank]).",
        "Move each batch with .to(local_rank): a bare .cuda() or 'cuda:0' puts every rank's "
        "tensors on GPU 0."]


def test_both_meanings_in_one_log_are_two_findings(tmp_path):
    log = tmp_path / "both.log"
    log.write_text(f"[rank0]: {CPU_LINE}\n[rank1]: {GPUS_LINE}\n", encoding="utf-8")
    codes = [f.code.id for f in diagnose(str(log)).report.results[0].findings]
    assert sorted(codes) == ["DIAG008", "LOG057", "LOG070"]  # and similar solved threads


def test_nccl_given_a_cpu_tensor_is_told_to_move_it_or_use_gloo(tmp_path):
    log = tmp_path / "dense.log"
    log.write_text("RuntimeError: Tensors must be CUDA and dense\n", encoding="utf-8")
    (step,) = finding(log, "LOG057").remediation
    assert "dist.all_reduce(t)" in step.text and "backend='gloo'" in step.text


def test_the_smoke_jobs_reading_of_a_rank_uses_the_same_variants():
    assert match_text(f"{TRACEBACK}{CPU_LINE}")[0].rule.code.id == "LOG070"
    assert match_text(GPUS_LINE)[0].rule.code.id == "LOG057"


# -- a trainer's own option when the log shows the trainer ------------------------------------

BANNER = ("Ultralytics 8.3.74 🚀 Python-3.12.9 torch-2.6.0+cu124 CUDA:0 (Tesla T4, 14918MiB)\n"
          "                                                      CUDA:1 (Tesla T4, 14918MiB)\n")


def test_ultralytics_gets_key_value_options(tmp_path):
    log = tmp_path / "yolo.log"
    log.write_text(BANNER + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                   "2.00 GiB\n", encoding="utf-8")
    assert shown(finding(log, "LOG005")) == [
        NVIDIA_SMI, "yolo train model=yolo11n.pt data=data.yaml batch=8"]


def test_ultralytics_batch_message_gets_its_own_option(tmp_path):
    log = tmp_path / "batch.log"
    log.write_text("AssertionError: 'batch=15' must be a multiple of GPU count 2. Try "
                   "'batch=14' or 'batch=16', the nearest batch sizes evenly divisible by 2.\n",
                   encoding="utf-8")
    assert shown(finding(log, "LOG058")) == [
        "yolo train model=yolo11n.pt data=data.yaml device=0,1 batch=16"]


def test_a_trainer_without_its_own_remedy_leaves_the_rule_steps(tmp_path):
    log = tmp_path / "ptx.log"
    log.write_text(BANNER + "RuntimeError: CUDA error: the provided PTX was compiled with an "
                   "unsupported toolchain.\n", encoding="utf-8")
    (rule,) = [r for r in RULES if r.code.id == "LOG012" and not r.catalogue]  # hand-written
    assert finding(log, "LOG012").remediation == rule.steps


# -- the variants' contract --------------------------------------------------------------------

VARIANT_IDS = sorted(VARIANTS)


@pytest.mark.parametrize("code", VARIANT_IDS)
def test_variants_belong_to_a_rule_and_are_well_formed(code):
    rules = [r for r in RULES if r.code.id == code]
    assert rules, f"{code} has variants but no rule"
    for rule in rules:
        assert rule.variants[-len(VARIANTS[code]):] == VARIANTS[code]
    for variant in VARIANTS[code]:
        assert variant.steps
        assert variant.trainer is None or variant.trainer in TRAINERS
        assert variant.line is not None or variant.trainer is not None, "applies always"
        if variant.code is not None:  # the code is fixed when the line is read
            assert variant.line is not None and variant.trainer is None
            assert variant.code in LOG_CODES
        for step in (*variant.steps, *(variant.decide or ())):
            assert step.text
            assert step.command is None or "\n" not in step.command


@pytest.mark.parametrize("code", VARIANT_IDS)
def test_each_line_variant_is_reached_by_its_examples(code):
    """An example is a real line its rule matches and its variant reads (so the variant can
    never be dead: a line that no rule matches would never reach it)."""
    rules = [r for r in RULES if r.code.id == code]
    for variant in VARIANTS[code]:
        if variant.line is None:
            continue
        assert variant.examples, f"{code}: a line variant needs an example"
        for example in variant.examples:
            matching = [r for r in rules if r.pattern.search(example)
                        and any(a in example.lower() for a in r.anchors)]
            assert matching, example
            assert all(a in GATES for r in matching for a in r.anchors)
            read = matching[0].read(example)
            assert read.steps == variant.steps, example
            assert read.code == (variant.code or matching[0].code)


def test_a_rule_without_a_fitting_variant_reads_as_itself():
    (rule,) = [r for r in RULES if r.code.id == "LOG057" and r.variants and not r.catalogue]
    line = "RuntimeError: Tensors must be CUDA and dense"
    plain = rule.read(GPUS_LINE)
    assert (plain.code, plain.steps, plain.variants) == (rule.code, rule.steps, ())
    assert rule.read(line).steps != rule.steps
    assert rule.for_trainer(ULTRALYTICS) is rule  # LOG057 has no trainer variant
