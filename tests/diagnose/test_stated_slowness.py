"""Slowness stated in words: the low-confidence performance lead of a log no message explains
(diagnose/stated_slowness.py)."""

from __future__ import annotations

import pytest

from ddp_doctor.diagnose.stated_slowness import PROGRAM_OUTPUT, SLOWNESS
from tests.support.corpus import LOGS
from tests.support.rules import diagnosed, lead

# Lines users wrote in the corpus's performance threads (tests/data/logs, cases_studied_*.toml).
STATED = [
    "training is very slow and the gpu usage rate is very low",  # facebookresearch/deit#81
    "I am also facing the problem that the training with 8 GPUs is slower or equal to the "
    "training with 2 GPUs.",  # facebookresearch/dinov2#161
    "I used DDP to run Common and Vox recipes with 4-8 Gpus, but instead of speeding up, it "
    "took longer to train one epoch.",  # speechbrain/speechbrain#1096
    "I've tried to train on 1 to 8 Tesla V100 and training doesn't scale after 4 GPU.",
    "Trained classification model with a single GPU, and saw average GPU utilization of ~40%.",
    "In reality, the _total_ GPU utilization remains the same at ~40%, but the average GPU "
    "utilization is ~7%.",  # ThilinaRajapakse/simpletransformers#1027
    # Chinese, Japanese and Korean users' words (split L's studied half; the others built on
    # the same words): "with 2 machines the speed is 1/5 of one", "GPU utilisation swings a
    # lot", "training is slow", "very slow", "GPU usage is low"
    "相比于 **单机6卡**，训练速度为原来的 **1/5**",  # JDAI-CV/fast-reid#639
    "是的，GPU 利用率波动非常大，而且 GPU 功率比较低",  # JDAI-CV/fast-reid#639
    "多卡训练比单卡还慢",
    "学習がとても遅いです",
    "GPU 사용률이 낮습니다",
    "학습 속도가 너무 느려요",
    # keras-team/keras#11342 (split X's studied half)
    "Using the MNIST example model, when multi_gpu_model is set to 2 GPU, the speed is up to "
    "50% **LOWER** than with a single GPU on the same system.",
]
# Program output and identifiers that spell "slow" or "utilization" without stating slowness.
NOT_STATED = [
    "The speed is not lower than with one GPU, but the loss diverges.",
    "Throughput was no worse with 8 GPUs; the problem is the accuracy drop.",
    "the learning rate is lower than before",
    "throughput is fine; loss is lower",
    "        HW Slowdown                       : Not Active",  # nvidia-smi -q clock reasons
    "|  GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |",
    "| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |",
    "  File \"/opt/conda/lib/python3.10/site-packages/torch/nn/functional.py\", line 2450, "
    "in slow_conv2d_forward",
    "Using a slow image processor as `use_fast` is unset and a slow processor was saved",
    "You are using a slow tokenizer.",
    "model = SlowFast(cfg)",
    "    (layer1): Sequential((0): Bottleneck(",
    # libraries' advice, printed by healthy runs
    "UserWarning: This DataLoader will create 16 worker processes in total. Our suggested max "
    "number of worker in current system is 8, which is smaller than what this DataLoader is "
    "going to create. Please be aware that excessive worker creation might get DataLoader "
    "running slow or even freeze, lower the worker number to avoid potential slowness/freeze "
    "if necessary.",
    "/usr/lib/python3/dist-packages/bitsandbytes/nn/modules.py:226: UserWarning: Input type "
    "into Linear4bit is torch.float16, but bnb_4bit_compute_dtype=torch.float32 (default). "
    "This will lead to slow inference or training speed.",
    "disk utilization at 5% while the job waits",
    "GPU utilization: 98 %",
    "GPU utilization is 98% on every card",
    "显存慢慢增加直到溢出",  # "memory grows gradually until it overflows": 慢慢 is not slow
    "GPU 利用率 100%",
    "改成 DDP 之后训练速度是原来的 3 倍，但是第二个 epoch 卡住不动了",  # 3x faster, then a hang
    "GPU利用率100%，但是显存占用很低",  # utilisation full, memory use low
    "慢性病数据集",  # a chronic-disease dataset
    "傲慢与偏见",  # Pride and Prejudice
]


@pytest.mark.parametrize("line", STATED)
def test_each_way_users_state_slowness_is_read(line):
    assert SLOWNESS.search(line) and not PROGRAM_OUTPUT.search(line)


@pytest.mark.parametrize("line", NOT_STATED)
def test_program_output_and_identifiers_are_not_statements(line):
    assert not (SLOWNESS.search(line) and not PROGRAM_OUTPUT.search(line))


def test_a_log_that_only_says_it_is_slow_leads_with_the_performance_lead(tmp_path):
    text = ("python -m torch.distributed.launch --nproc_per_node=8 --use_env main.py "
            "--num_workers 32\n" + STATED[0] + "\n")
    findings = diagnosed(tmp_path, text)
    first = findings[0]
    assert (first.code.id, first.category.value) == ("DIAG150", "performance_degraded")
    assert first.title.startswith("LOW CONFIDENCE")
    assert any(e.value == STATED[0] and e.label == "line 2" for e in first.evidence)
    commands = [step.command for step in first.remediation]
    assert "ddp-doctor smoke --scaling" in commands and "nvidia-smi topo -m" in commands
    # the unknown finding still says what to attach
    assert "DIAG001" in [f.code.id for f in findings]


def test_an_error_in_the_log_outranks_the_stated_slowness(tmp_path):
    text = ("training got very slow and then crashed\n"
            "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    assert lead(tmp_path, text).category.value == "gpu_out_of_memory"


def test_a_log_that_states_nothing_gets_no_performance_lead(tmp_path):
    ids = [f.code.id for f in diagnosed(tmp_path, NOT_STATED[0] + "\n" + NOT_STATED[2] + "\n")]
    assert "DIAG150" not in ids


def test_the_corpus_performance_threads_that_state_slowness_lead_with_it(tmp_path):
    # deit#81: the user's words are the whole log
    first = diagnosed(tmp_path, (LOGS / "gh-facebookresearch-deit-81.log").read_text())[0]
    assert first.code.id == "DIAG150"


def test_a_healthy_runs_library_warnings_give_no_performance_lead(tmp_path):
    ids = [f.code.id for f in diagnosed(tmp_path, "\n".join(NOT_STATED[-4:-1]) + "\n")]
    assert "DIAG150" not in ids



def test_a_statement_past_the_head_of_a_long_log_is_read_once(tmp_path):
    """The head (256 KB) and the tail (64 KB) overlap in a short log and not in a long one: a
    statement is quoted once either way, and one in the tail of a long log is read."""
    filler = "".join(f"epoch 1 step {i} loss 0.{i % 97:02d}\n" for i in range(12_000))
    assert len(filler) > 300_000
    first = diagnosed(tmp_path, filler + STATED[0] + "\n")[0]
    assert first.code.id == "DIAG150"
    short = diagnosed(tmp_path, STATED[0] + "\n")[0]
    quoted = [e for e in short.evidence if e.value == STATED[0]]
    assert len(quoted) == 1


# Timings users give instead of words: a step slower by half or more with more GPUs, an
# epoch no faster, an iteration rate down by a third or more.
TIMED_SLOWER = [
    "single GPU: 1.01s / iter\n2 GPUs: 3.84s / iter\n",  # kwea123/CasMVSNet_pl#31 (split Q)
    "When I train AlexnetOWT model with nGPU=4, one batch takes 2.3s; but when nGPU=1, one "
    "batch takes only 0.48s.\n",  # soumith/imagenet-multiGPU.torch#59
    "1 GPU: 2.0 it/s\n4 GPUs: 0.9 it/s\n",
    "with 1 GPU an epoch took 20 min\nwith 2 GPUs an epoch took 25 min\n",
    "1 GPU: 1h 50min per epoch; 2 GPUs: 2h 10min per epoch\n",
    "1 GPU: one epoch takes 100s\n4 GPUs: one epoch takes 240s\n",
]
TIMED_FINE = [
    "1 GPU: 2.0 it/s\n4 GPUs: 1.9 it/s\n",  # DDP's per-rank rate, about the same
    "On 1 GPU each step is 0.45 s, on 8 GPUs 0.5 s\n",
    "Step time: 1 GPU 0.45 s, 8 GPUs 0.5 s\n",  # the kind named before the counts
    "| 8 A100(40GB) | 4 hours |\n| 4 * 8 A100(40GB) | 1 hours |\n",  # no GPU count said
    "4 GPUs: 1.2s / iter\n",  # one timing alone compares nothing
    # a duration of another clause is not the count's
    "Setup: batch 64, warmup 5 min. 1 GPU: 30 min per epoch, 4 GPUs: 8 min per epoch\n",
    # a model's plural is not seconds, a model number not a count
    "With 2 GPUs (two 3090s) an epoch takes 20 min; with 4 GPUs (four 3090s) it takes 12 min\n",
    "GTX 980 GPU: 2 s/iter, 1 GPU: 0.5 s/iter\n",
    "1 GPU: 1h 50min per epoch; 2 GPUs: 1h 10min per epoch\n",  # both parts of a time count
    # times that are not of a step or an epoch: loading, intervals, whole runs
    "model load: 1 GPU 30 s, 4 GPUs 45 s\n",
    "eval every 2 hours on 8 GPUs; logs every 10 min on 1 GPU\n",
    "We trained for 3 hours on 8 GPUs, and fine-tuned for 30 min on 1 GPU.\n",
    "Training takes 10 hours on 1 GPU and 12 hours with 4 GPUs\n",
    "Loading the checkpoint takes 40 s on 8 GPUs and 5 s on 1 GPU, then each step is 0.3 s/iter.\n",
    "Validation every 500 steps takes 10 min on 8 GPUs; a training step on 1 GPU takes 0.5 s.\n",
    "I train ResNet-50 for 90 epochs on 8 GPUs in 30 hours.\n"
    "A single GPU run takes 3 hours per epoch.\n",
    "Setup: 4 GPUs, 200 epochs, about 72 hours in total.\nBaseline on 1 GPU: 20 min per epoch.\n",
    "On 1 GPU the first epoch took 30 min.\nNow with 4 GPUs I am at epoch 3 after 1 hour.\n",
    "1 GPU: 0.5\u017f/iter; 2 GPUs: 1.2s/iter\n",  # U+017F folds to "s": never a unit
]


@pytest.mark.parametrize("text", TIMED_SLOWER)
def test_timings_that_show_more_gpus_slower_are_a_statement_of_slowness(tmp_path, text):
    first = diagnosed(tmp_path, text)[0]
    assert (first.code.id, first.category.value) == ("DIAG150", "performance_degraded")
    reading = [e.value for e in first.evidence if e.label == "reading"]
    assert reading and "timings for two GPU counts" in reading[0]
    assert any(e.label.startswith("line ") for e in first.evidence)


@pytest.mark.parametrize("text", TIMED_FINE)
def test_timings_that_scale_or_compare_nothing_are_not_read(tmp_path, text):
    assert "DIAG150" not in [f.code.id for f in diagnosed(tmp_path, text)]


def test_an_error_outranks_timings_too(tmp_path):
    text = TIMED_SLOWER[0] + "torch.cuda.OutOfMemoryError: CUDA out of memory.\n"
    assert lead(tmp_path, text).category.value == "gpu_out_of_memory"


def test_timings_give_way_to_the_fallbacks_reading_of_an_error_line(tmp_path):
    """Timings are weaker evidence than error lines the fallback can read: its guess leads."""
    # aws-ofi-nccl failing to register memory with the EFA device: no rule reads it
    text = ("register_rail_mr_buffer:1015 NCCL WARN NET/OFI Unable to register memory (type = "
            "2) for device 4. RC: -22, Error: Invalid argument\n" + TIMED_SLOWER[0])
    first = diagnosed(tmp_path, text)[0]
    assert first.code.id.startswith("DIAG1") and first.code.id != "DIAG150"
    assert first.category.value == "nccl_network"


def test_a_line_longer_than_a_statement_is_not_read():
    """A minified dump of counts and durations is no statement: a line past MAX_LINE is not
    paired at all (pairing its thousands of counts took 37 s on 76 KB)."""
    from ddp_doctor.diagnose.stated_slowness import MAX_LINE, _timed_counts

    long_line = "1 GPU 1.0 s per step 2 GPUs " * 4000
    assert len(long_line) > MAX_LINE and _timed_counts(long_line) == []
    assert _timed_counts("1 GPU 1.0 s per step, 2 GPUs 3.0 s per step") == [
        (1, "step", 1.0), (2, "step", 3.0)]
