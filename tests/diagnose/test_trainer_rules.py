"""The trainers' own refusals (logrules/trainers.py) against the rest of the table: each is
the lead finding of its own line, a launcher's summary after it does not displace it, and
a trainer's "no GPU for fp16" yields to the driver problem that explains it."""

from __future__ import annotations

import pytest

from ddp_doctor.diagnose import diagnose
from ddp_doctor.logrules import folded, match_text, trainers

TRAINER_EXAMPLES = [(rule.code.id, example) for rule in trainers.RULES
                    for example in rule.examples]


@pytest.mark.parametrize(("code", "line"), TRAINER_EXAMPLES)
def test_each_trainer_refusal_leads_on_its_own_line(code, line):
    assert match_text(line)[0].rule.code.id == code


def test_a_trainer_refusal_outranks_the_launchers_exit_summary(tmp_path):
    # As YOLOv5 under torch.distributed.launch prints it when a rank has no GPU.
    log = tmp_path / "rank.log"
    log.write_text(
        "AssertionError: insufficient CUDA devices for DDP command\n"
        "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 1391 closing "
        "signal SIGTERM\n"
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: "
        "1 (pid: 1392) of binary: /usr/bin/python3.8\n", encoding="utf-8")
    lead = diagnose(str(log)).report.results[0].findings[0]
    assert (lead.code.id, lead.code.category.value) == ("LOG064", "gpu_not_visible")


def test_fp16_refused_for_want_of_cuda_yields_to_the_too_old_driver():
    # torch's warning, then the trainer's refusal that it causes.
    text = ("UserWarning: CUDA initialization: The NVIDIA driver on your system is too old "
            "(found version 11040). Please update your GPU driver by downloading and "
            "installing a new version from the URL: http://www.nvidia.com/Download/index.aspx\n"
            "ValueError: fp16 mixed precision requires a GPU\n")
    found = match_text(text)
    ids = {m.rule.code.id for m in found}
    assert found[0].rule.code.category.value == "driver_too_old"
    fp16 = next(m for m in found if "fp16" in m.line)
    assert fp16.rule.code.category.value == "torch_cpu_only"
    assert folded(fp16.rule, ids)


def test_alone_the_fp16_refusal_points_at_a_torch_without_cuda():
    found = match_text("ValueError: fp16 mixed precision requires a GPU (not 'mps').")
    assert [m.rule.code.category.value for m in found] == ["torch_cpu_only"]
