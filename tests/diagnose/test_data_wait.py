"""A training loop waiting for its data, read from its own progress lines
(diagnose/data_wait.py, DIAG028)."""

from __future__ import annotations

import pytest

from ddp_doctor.diagnose.data_wait import PROGRESS
from tests.support.corpus import LOGS
from tests.support.rules import diagnosed, lead

# torchvision's MetricLogger (references/classification/utils.py, log_every), its copies, and
# detectron2's CommonMetricPrinter (detectron2/utils/events.py); the values invented, the
# layouts the programs'.
TORCHVISION = ("Epoch: [3]  [{step:4d}/5005]  eta: 1:02:03  lr: 0.1  loss: 2.1 (2.3)  "
               "time: {time}  data: {data}  max mem: 10768")
# detectron2 after v0.6 prints the last step's times beside the averages
DETECTRON2_NEW = ("[11/28 12:00:00 d2.utils.events]:  eta: 1 day  iter: {step}  total_loss: 1.2  "
                  "time: {time}  last_time: {time}  data_time: {data}  last_data_time: {data}  "
                  "lr: 0.0001  max_mem: 5000M")
DETECTRON2 = ("[11/28 12:00:00 d2.utils.events]:  eta: 1 day, 2:00:00  iter: {step}  "
              "total_loss: 1.2  time: {time}  data_time: {data}  lr: 0.0001  max_mem: 5000M")


def _log(template: str, data: str, time: str = "1.2000", steps=range(20, 120, 20)) -> str:
    return "\n".join(template.format(step=s, time=time, data=data) for s in steps) + "\n"


@pytest.mark.parametrize("template", [TORCHVISION, DETECTRON2, DETECTRON2_NEW])
def test_steps_spent_mostly_in_data_are_a_data_bound_loop(tmp_path, template):
    found = lead(tmp_path, _log(template, data="0.9000"))
    assert found.code.id == "DIAG028" and found.code.category.value == "performance_degraded"
    assert "75%" in found.title
    assert any("data:" in e.value or "data_time:" in e.value for e in found.evidence)


@pytest.mark.parametrize("template", [TORCHVISION, DETECTRON2])
def test_a_healthy_loop_is_not(tmp_path, template):
    findings = diagnosed(tmp_path, _log(template, data="0.0123", time="0.4321"))
    assert "DIAG028" not in {f.code.id for f in findings}


def test_the_first_steps_whose_averages_hold_the_first_batch_are_left_out(tmp_path):
    """MetricLogger prints 20-step averages: the first batch, which waits for the workers to
    start, is in every line up to step 19 of a healthy run."""
    warm = "".join(_log(TORCHVISION, data=f"{d:.4f}", time=f"{d + 0.39:.4f}", steps=[s])
                   for s, d in ((0, 16.9), (5, 2.8), (10, 1.5), (15, 1.1)))
    assert "DIAG028" not in {f.code.id for f in diagnosed(tmp_path, warm)}
    later = _log(TORCHVISION, data="0.9000", steps=[20, 40, 60])
    assert lead(tmp_path, warm + later).code.id == "DIAG028"


def test_a_wrapped_line_takes_its_step_index_from_the_lines_above(tmp_path):
    """klauscc/VindLU#10's layout: the index, then the losses, then "time: ... data: ..."."""
    text = ("utils.basic_utils: Train Epoch: [0]  [    0/10175]  eta: 2 days, 11:04:48\n"
            "lr: 0.000002  temperature: 0.0702  image-loss_vtc: 6.2285\n"
            "time: 40.1906  data: 38.0570  max mem: 10768 res mem: 11456\n")
    assert "DIAG028" not in {f.code.id for f in diagnosed(tmp_path, text)}
    assert lead(tmp_path, text.replace("[    0/", "[  200/")).code.id == "DIAG028"


def test_an_evaluation_loop_is_not_the_training_loop(tmp_path):
    train = _log(TORCHVISION, data="0.0100", time="0.4000")
    evaluation = "".join(f"Test:  [{s:3d}/196]  eta: 0:00:30  time: 0.1500  data: 0.0900  "
                         f"max mem: 10768\n" for s in range(20, 196, 10))
    assert "DIAG028" not in {f.code.id for f in diagnosed(tmp_path, train + evaluation)}


def test_mmengines_validation_loop_is_not_the_training_loop(tmp_path):
    """mmengine puts "Epoch(val)" after its logger's prefix, past a line's first characters."""
    text = "".join(f"2022/08/22 15:52:51 - mmengine - INFO - Epoch(val) [1][{s}/313]    eta: "
                   f"0:00:03  time: 0.0122  data_time: 0.0097\n" for s in range(20, 140, 20))
    assert "DIAG028" not in {f.code.id for f in diagnosed(tmp_path, text)}


def test_the_step_index_is_the_steps_not_the_epochs(tmp_path):
    """"Epoch [3/100], Step [200/600]": step 200 of epoch 3, past the warm-up."""
    text = "".join(f"Epoch [3/100], Step [{s}/600], loss: 0.5, time: 0.50, data: 0.40\n"
                   for s in (200, 300, 400))
    assert lead(tmp_path, text).code.id == "DIAG028"


def test_a_metric_named_error_is_no_failure(tmp_path):
    text = (_log(TORCHVISION, data="1.0500")
            + "Epoch 3 done. train error: 0.231, val error: 0.254\n")
    assert lead(tmp_path, text).code.id == "DIAG028"


def test_a_statement_about_the_data_does_not_hide_the_loop(tmp_path):
    """Only a stated kill outranks the progress lines: a dataset larger than the RAM is none."""
    text = ("My dataset is 500GB and exceeds the RAM, so I stream it from a NFS share.\n"
            + _log(TORCHVISION, data="1.0500"))
    assert lead(tmp_path, text).code.id == "DIAG028"


def test_few_lines_make_a_low_confidence_finding(tmp_path):
    one = lead(tmp_path, _log(TORCHVISION, data="0.9000", steps=[40]))
    assert one.code.id == "DIAG028" and one.title.startswith("LOW CONFIDENCE")
    many = lead(tmp_path, _log(TORCHVISION, data="0.9000"))
    assert many.code.id == "DIAG028" and not many.title.startswith("LOW CONFIDENCE")


def test_an_unread_error_or_a_killed_process_outranks_the_progress_lines(tmp_path):
    progress = _log(TORCHVISION, data="0.9000")
    error = "Traceback (most recent call last):\n  File \"train.py\", line 9\nKeyError: 'boxes'\n"
    assert "DIAG028" not in {f.code.id for f in diagnosed(tmp_path, progress + error)}
    killed = progress + "then the training process was killed, RAM usage keeps increasing\n"
    assert lead(tmp_path, killed).code.category.value == "host_out_of_memory"


def test_most_lines_decide_not_one_slow_batch(tmp_path):
    text = (_log(TORCHVISION, data="0.9000", steps=[20])
            + _log(TORCHVISION, data="0.0100", steps=[40, 60, 80]))
    assert "DIAG028" not in {f.code.id for f in diagnosed(tmp_path, text)}


def test_an_error_leads_over_a_data_bound_loop(tmp_path):
    text = _log(TORCHVISION, data="0.9000") + (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        "total capacity of 23.68 GiB of which 1.2 GiB is free.\n")
    findings = diagnosed(tmp_path, text)
    assert findings[0].code.category.value == "gpu_out_of_memory"
    assert "DIAG028" not in {f.code.id for f in findings}


@pytest.mark.parametrize("line", [
    "time: 0.4321  data: 0.0123",
    "time: 0.4321 (0.4512)  data: 0.0123 (0.0150)",
    "Epoch: 3, Iter: 100/9000, batch_time: 2.1000s, data_time: 1.9000s",
    "iter_time: 0.4300 (0.4500), data_time: 0.0100 (0.0200)",
])
def test_the_progress_formats_are_read(line):
    assert PROGRESS.search(line)


@pytest.mark.parametrize("line", [
    "Total time: 12:00:00 (0.4321 s / it)",
    "data: /datasets/imagenet  time: 2024-01-01",
    "Loading data: 100%|██████████| 5005/5005 time: 03:21",
])
def test_other_times_are_not_progress(line):
    assert not PROGRESS.search(line)


def test_a_run_of_blanks_is_not_a_separator():
    """Separators are bounded: an unbounded run made the search of a line of blanks after
    "time: 1" quadratic."""
    assert not PROGRESS.search("time: 1" + " " * 8000 + "data: 0.5")
    assert PROGRESS.search("time: 1" + " " * 4 + "data: 0.5")


def test_the_corpus_thread_that_asked_why_pretraining_was_slow():
    """klauscc/VindLU#10: 38 of every 40 seconds spent waiting for data."""
    from ddp_doctor.diagnose import diagnose

    found = diagnose(str(LOGS / "gh-klauscc-VindLU-10.log")).report.results[0].findings[0]
    assert found.code.id == "DIAG028"
