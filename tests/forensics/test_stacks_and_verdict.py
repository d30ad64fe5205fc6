"""Reading stacks (py-spy dump, faulthandler) and judging where the ranks of a hung job
wait, on real dumps of planted hangs (tests/fixtures/stacks, SOURCES.md there)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from ddp_doctor.diagnose import diagnose
from ddp_doctor.forensics.stacks import (
    Frame,
    RankStack,
    StackText,
    Thread,
    last_faulthandler_dump,
    parse_faulthandler,
    parse_py_spy,
)
from ddp_doctor.forensics.verdict import hang_findings
from ddp_doctor.forensics.waits import wait_of

STACKS = Path(__file__).resolve().parents[1] / "fixtures" / "stacks"


def _ranked(name: str) -> list[RankStack]:
    procs = parse_py_spy((STACKS / name).read_text())
    for rank, proc in enumerate(procs):
        proc.rank = rank
    return procs


def test_py_spy_dumps_are_read_process_by_process_innermost_first():
    rank0, rank1 = _ranked("py-spy-dataloader.txt")
    assert (rank0.pid, rank1.pid) == (9250, 9251)
    assert rank0.main is not None and rank0.main.name == "MainThread"
    assert rank0.main.frames[0] == Frame("all_reduce", "torch/distributed/distributed_c10d.py",
                                         3252)
    assert rank1.main.frames[0].where() == "read_sample_file (planted_hang.py:45)"


def test_where_each_rank_waits():
    rank0, rank1 = _ranked("py-spy-dataloader.txt")
    assert (wait_of(rank0).kind, wait_of(rank0).call) == ("collective", "all_reduce")
    assert wait_of(rank0).user.where() == "sync_gradients (planted_hang.py:51)"
    assert wait_of(rank1).kind == "data"
    assert wait_of(rank1).describe() == ("waits in its data loader from read_sample_file "
                                         "(planted_hang.py:45)")


def test_a_rank_stuck_in_its_data_loader_is_the_culprit():
    [finding] = hang_findings(_ranked("py-spy-dataloader.txt"))
    assert finding.code.id == "HNG001" and finding.category.value == "collective_timeout"
    assert finding.affects == ("rank:1",)
    assert finding.title.startswith("Rank 1 holds the job up: it waits in its data loader "
                                    "from read_sample_file (planted_hang.py:45)")
    assert "DataLoader" in finding.remediation[0].text


def test_ranks_in_different_collectives_are_named_with_where_they_parted():
    [finding] = hang_findings(_ranked("py-spy-barrier.txt"))
    assert finding.code.id == "HNG002" and finding.category.value == "ddp_usage_error"
    assert "rank 0 in all_reduce from sync_gradients (planted_hang.py:51)" in finding.title
    assert "rank 1 in barrier from train (planted_hang.py:65)" in finding.title
    assert finding.title.endswith("their paths part at train (planted_hang.py:73) against "
                                  "train (planted_hang.py:65)")


def _stack(rank: int, *frames: tuple[str, str, int]) -> RankStack:
    return RankStack(100 + rank, rank, [Thread("MainThread", [Frame(*f) for f in frames])],
                     source="py-spy")


C10D = "torch/distributed/distributed_c10d.py"


def test_every_rank_in_one_collective_a_rank_gone_and_the_rendezvous():
    same = [_stack(r, ("all_reduce", C10D, 10), ("step", "train.py", 5)) for r in (0, 1)]
    [all_in] = hang_findings(same)
    assert all_in.code.id == "HNG003" and "no rank holds the others up" in all_in.title
    gone = hang_findings(same[:1], gone=[1])
    assert [f.code.id for f in gone] == ["HNG004"]
    assert gone[0].title == "Rank 1 ended while rank 0 waits in all_reduce"
    rdzv = [_stack(0, ("init_process_group", C10D, 1), ("main", "train.py", 3)),
            _stack(1, ("load_config", "train.py", 9), ("main", "train.py", 2))]
    [waiting] = hang_findings(rdzv)
    assert waiting.code.id == "HNG005" and waiting.category.value == "rendezvous_failure"
    assert waiting.title == ("Rank 0 waits in init_process_group; rank 1 never joined (rank 1 "
                             "is in its own code at load_config (train.py:9))")


def test_stacks_that_cannot_be_read_say_why_and_how_to_allow_it():
    unread = [RankStack(7, 0, error="ptrace is not permitted here (a container without "
                                    "CAP_SYS_PTRACE, or kernel.yama.ptrace_scope): x")]
    [finding] = hang_findings(unread)
    assert finding.code.id == "HNG006" and finding.code.severity.value == "info"
    assert "ptrace is not permitted" in finding.title
    assert any("SYS_PTRACE" in (s.command or "") for s in finding.remediation)


def _real_faulthandler_dump() -> str:
    script = textwrap.dedent("""
        import faulthandler, sys, threading, time
        def worker(): time.sleep(5)
        threading.Thread(target=worker, daemon=True).start()
        def stuck():
            faulthandler.dump_traceback(file=sys.stdout, all_threads=True)
        stuck()
    """)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=True).stdout


def test_a_real_faulthandler_dump_is_read_with_its_main_thread():
    text = _real_faulthandler_dump()
    stack = parse_faulthandler(text, rank=3, pid=42)
    assert stack is not None and len(stack.threads) == 2
    assert stack.main is not None and stack.main.frames[0].function == "stuck"
    twice = text + text  # a rank that got SIGUSR1 twice appends two dumps
    assert parse_faulthandler(last_faulthandler_dump(twice)).threads[0].frames == \
        stack.threads[0].frames


def test_stacks_pasted_in_a_log_are_found_between_other_lines_and_chunks():
    log = ("[rank0]:[E ProcessGroupGloo] Watchdog caught collective operation timeout\n"
           "some other output\n" + (STACKS / "py-spy-barrier.txt").read_text()
           + "done\n").encode()
    collector = StackText()
    for start in range(0, len(log), 97):  # chunks that cut lines anywhere
        collector.feed_chunk(log[start:start + 97])
    assert [s.rank for s in collector.stacks()] == [0, 1]
    assert StackText().stacks() == []


def test_diagnose_leads_with_where_the_ranks_wait(tmp_path):
    log = tmp_path / "hang.log"
    log.write_text("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] "
                   "Read error [127.0.0.1]:40123: Connection reset by peer\n"
                   + (STACKS / "py-spy-dataloader.txt").read_text())
    findings = diagnose(str(log)).report.results[0].findings
    assert findings[0].code.id == "HNG001" and findings[0].affects == ("rank:1",)


def test_a_users_pasted_dump_names_their_own_line_not_a_librarys():
    """A real paste (accelerate#3104, DeepSpeed ZeRO-3): py-spy prints library files relative
    to site-packages, so deepspeed/ and accelerate/ frames are library code, and the job's
    own line is its training loop."""
    [stack] = parse_py_spy((STACKS / "py-spy-accelerate-3104.txt").read_text(), rank=0)
    assert [t.name for t in stack.threads][:2] == ["MainThread", "Thread-1"]
    assert len(stack.threads) == 6  # four threads py-spy printed without a name or frames
    wait = wait_of(stack)
    assert (wait.kind, wait.call) == ("collective", "backward (the gradient sync inside "
                                                    "backward)")
    assert wait.user.where() == "training_loop (fine_tune_accelerate.py:410)"


# A py-spy dump of one rank of a hung job whose main thread waits on its DataLoader's result
# queue (the threading wait is innermost), as bigscience's tr11 chronicle pasted it.
LONE_DATALOADER_STACK = textwrap.dedent("""\
    Thread 1439102 (idle): "MainThread"
        wait (threading.py:306)
        get (queue.py:179)
        _try_get_data (torch/utils/data/dataloader.py:1011)
        _get_data (torch/utils/data/dataloader.py:1163)
        _next_data (torch/utils/data/dataloader.py:1207)
        __next__ (torch/utils/data/dataloader.py:530)
        evaluate (megatron/training.py:983)
        main (pretrain_gpt.py:245)
    """)


def test_a_queue_wait_under_the_dataloader_is_the_data_loader_not_a_lock():
    [stack] = parse_py_spy(LONE_DATALOADER_STACK)
    assert wait_of(stack).kind == "data"
    # the same wait outside any DataLoader frame stays a lock
    [plain] = parse_py_spy(LONE_DATALOADER_STACK.replace("torch/utils/data/", "mylib/"))
    assert wait_of(plain).kind == "lock"


def test_a_lone_pasted_stack_in_its_data_loader_names_that_rank(tmp_path):
    log = tmp_path / "hang.log"
    log.write_text("the job hangs at evaluation, py-spy of rank 0:\n" + LONE_DATALOADER_STACK)
    lead = diagnose(str(log)).report.results[0].findings[0]
    assert (lead.code.id, lead.category.value) == ("HNG001", "collective_timeout")
    assert "data loader" in lead.title
    # a lone stack in the job's own lock names no culprit
    log.write_text(LONE_DATALOADER_STACK.replace("torch/utils/data/", "mylib/"))
    assert diagnose(str(log)).report.results[0].findings[0].code.id != "HNG001"


def test_a_lone_loader_stack_is_no_hang_where_the_log_shows_a_crash_or_slowness(tmp_path):
    log = tmp_path / "crash.log"
    log.write_text("Fatal Python error: Segmentation fault\n\n" + LONE_DATALOADER_STACK)
    assert diagnose(str(log)).report.results[0].findings[0].code.id == "LOG090"
    log.write_text("training with 8 GPUs is much slower than with 2, py-spy of rank 0:\n"
                   + LONE_DATALOADER_STACK)
    assert diagnose(str(log)).report.results[0].findings[0].code.id == "DIAG150"

