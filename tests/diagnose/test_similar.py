"""Similar solved threads (DIAG008) and the low-confidence category suggestion (DIAG009).

Retrieval is tested on hand-made mini indexes (its ranking and its normalisation), the
shipped index against a fresh build of the corpus (drift), and the finding in real
diagnoses of corpus logs, rendered the three ways a user reads it.
"""

from __future__ import annotations

import io
import json
from functools import cache
from pathlib import Path

import pytest
from rich.console import Console

from ddp_doctor.diagnose import diagnose, scan_input
from ddp_doctor.diagnose import similar as S
from ddp_doctor.diagnose import similar_build as B
from ddp_doctor.diagnose.similar import (
    SimilarIndex,
    SolvedThread,
    error_lines,
    normalize_line,
    terms,
)
from ddp_doctor.report.console import render_console
from ddp_doctor.report.json import render_json
from ddp_doctor.report.markdown import render_markdown

REPO = Path(__file__).resolve().parents[2]
LOGS = REPO / "tests" / "data" / "logs"
SHIPPED = REPO / "src" / "ddp_doctor" / "knowledge" / "solved_threads.json"

# Leave-one-out over the shipped index (each thread's own lines as the query, its thread
# left out) measured top-1 179/260 = 68.8% and top-3 208/260 = 80.0% (139/208 and 163/208
# before the blind split joined); these floors leave a little room for corpus growth.
# bench/similar_precision.py measures it from diagnoses.
TOP1_FLOOR = 0.62
TOP3_FLOOR = 0.75


def thread(name: str, category: str, *lines: str, title_source: str = "thread"
           ) -> SolvedThread:
    return SolvedThread(url=f"https://example.org/{name}", title=f"{name} title",
                        title_source=title_source, category=category,
                        root_cause=f"{name} cause", fix=f"{name} fix",
                        lines=tuple(normalize_line(line) for line in lines))


MINI = (
    thread("shm", "nccl_shared_memory",
           "misc/shmutils.cc:71 NCCL WARN Error: failed to extend /dev/shm/nccl-9 to 9637892 "
           "bytes", "RuntimeError: NCCL error: unhandled system error, NCCL version 2.19.3"),
    thread("port", "rendezvous_port_in_use",
           "RuntimeError: The server socket has failed to listen on any local network "
           "address. The server socket has failed to bind to [::]:29500 (errno: 98 - Address "
           "already in use)."),
    thread("oom", "gpu_out_of_memory",
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has "
           "a total capacity of 23.64 GiB"),
    thread("net", "nccl_network",
           "RuntimeError: NCCL error: unhandled system error, NCCL version 2.19.3",
           "NCCL WARN socketStartConnect: Connect to 10.0.0.2<45011> failed : Software caused "
           "connection abort"),
)


# -- normalisation ------------------------------------------------------------------------

def test_two_users_copies_of_one_error_normalise_to_the_same_line():
    one = ("[rank3]: node-a12:2331:2666 [3] NCCL WARN Call to connect returned Connection "
           "refused, retrying at /home/alice/venv/lib/python3.10/site-packages/torch/x.py "
           "pid 12345 addr 0x7f3a2b10 from 192.168.0.103:29500")
    two = ("gpu-box:77:78 [0] NCCL WARN Call to connect returned Connection refused, "
           "retrying at /opt/conda/lib/python3.8/site-packages/torch/x.py pid 9 addr "
           "0xdeadbeef from 10.1.2.3:1234")
    assert normalize_line(one) == normalize_line(two)
    assert normalize_line(one) == ("NCCL WARN Call to connect returned Connection refused, "
                                   "retrying at <path>/x.py pid <n> addr <hex> from <ip>")


def test_normalisation_keeps_what_says_something():
    # system paths keep their name; a path's last part stays; words are not numbers
    assert normalize_line("shm_open /dev/shm/nccl-abc failed") == \
        "shm_open /dev/shm/nccl-abc failed"
    assert normalize_line("cannot open C:\\Users\\bob\\miniconda3\\cudnn64_8.dll") == \
        "cannot open <path>/cudnn<n>_<n>.dll"
    assert normalize_line("CUDA error: out of memory (error 2) on device 7") == \
        "CUDA error: out of memory (error <n>) on device <n>"
    assert normalize_line("Jan 10 12:00:01 myhost ollama[123]: gpu.go:9: CUDA not detected") \
        == "ollama[<n>]: gpu.go:<n>: CUDA not detected"
    # a container id and a uuid are hex, not words
    assert normalize_line("root@4f2a9c1b7d3e:/workspace# python train.py") == \
        "<host>:/workspace# python train.py"
    assert normalize_line("GPU-5d3c1f2a-8b7e-4c6d-9a0b-1c2d3e4f5a6b lost") == "GPU-<hex> lost"
    # host names go; a word after "host" stays
    assert normalize_line("failed to connect/validate to host slinky-0:29400 - Name or "
                          "service not known") == \
        "failed to connect/validate to host <host>:<n> - Name or service not known"
    assert normalize_line("node-01.cluster.example.com: cudaMallocHost failed: host memory") \
        == "<host>: cudaMallocHost failed: host memory"


def test_terms_drop_placeholders_numbers_and_common_words():
    found = terms(["RuntimeError: the <path>/x.py failed with <n> at <hex> on <ip>"])
    assert set(found) == {"runtimeerror", "py", "failed"}


# -- error lines of a scanned input --------------------------------------------------------

def scanned(tmp_path: Path, text: str) -> list[str]:
    log = tmp_path / "train.log"
    log.write_text(text, encoding="utf-8")
    return error_lines(scan_input(str(log))[0])


def test_error_lines_are_the_failing_lines_normalised_and_distinct(tmp_path):
    lines = scanned(tmp_path, (
        "Epoch 1/10 loss 0.41\n"
        "[rank0]: RuntimeError: CUDA error: out of memory\n"
        "[rank1]: RuntimeError: CUDA error: out of memory\n"
        "saving checkpoint to /data/run7/ckpt.pt\n"
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) "
        "local_rank: 0 (pid: 811) of binary: /usr/bin/python3\n"))
    assert lines == [
        "RuntimeError: CUDA error: out of memory",
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: <n>) "
        "local_rank: <n> (pid: <n>) of binary: <path>/python<n>",
    ]


def test_a_log_without_an_error_word_queries_nothing_but_is_indexed_by_all_its_lines(
        tmp_path):
    log = tmp_path / "train.log"
    log.write_text(">>> import torch\n>>> torch.cuda.is_available()\nFalse\n")
    scan = scan_input(str(log))[0]
    assert error_lines(scan) == []
    assert error_lines(scan, every_line_if_none=True) == \
        [">>> import torch", ">>> torch.cuda.is_available()", "False"]


# -- ranking on a mini index ---------------------------------------------------------------

def test_the_thread_with_the_same_error_ranks_first_and_scores_are_ordered():
    index = SimilarIndex(MINI)
    found = index.query([normalize_line(
        "[rank1]: RuntimeError: The server socket has failed to listen on any local network "
        "address. The server socket has failed to bind to [::]:29400 (errno: 98 - Address "
        "already in use).")])
    assert found[0].thread.category == "rendezvous_port_in_use"
    assert found[0].score > 0.9
    assert [m.score for m in found] == sorted((m.score for m in found), reverse=True)


def test_a_distinctive_line_outweighs_a_line_two_threads_share():
    index = SimilarIndex(MINI)
    query = [normalize_line("RuntimeError: NCCL error: unhandled system error, NCCL version "
                            "2.18.1"),
             normalize_line("NCCL WARN Error: failed to extend /dev/shm/nccl-3 to 4 bytes")]
    found = index.query(query)
    assert [m.thread.url.rsplit("/", 1)[1] for m in found[:2]] == ["shm", "net"]
    assert found[0].score > found[1].score


def test_exclude_minimum_top_and_an_unrelated_query():
    index = SimilarIndex(MINI)
    query = [normalize_line("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                            "20 MiB")]
    assert index.query(query)[0].thread.category == "gpu_out_of_memory"
    without = index.query(query, exclude="https://example.org/oom")
    assert "https://example.org/oom" not in [m.thread.url for m in without]
    assert len(index.query(query, top=1)) == 1
    assert index.query(["the quick brown fox jumps"]) == []
    assert index.query([]) == []
    assert all(m.score >= 0.5 for m in index.query(query, minimum=0.5))


# -- the findings ---------------------------------------------------------------------------

def test_the_finding_lists_title_category_url_and_each_fix():
    matches = SimilarIndex(MINI).query([normalize_line(
        "RuntimeError: NCCL error: unhandled system error, NCCL version 2.19.3")])
    finding = S.similar_finding(matches)
    assert finding is not None and finding.code.id == "DIAG008"
    assert finding.effective_severity.value == "info"
    assert [e.value for e in finding.evidence] == [
        f"{m.thread.title} - {m.thread.category} - {m.thread.url}" for m in matches]
    assert [s.url for s in finding.remediation] == [m.thread.url for m in matches]
    assert [s.text.endswith(m.thread.fix) for s, m in zip(finding.remediation, matches)] == \
        [True] * len(matches)
    log_titled = thread("old", "driver_too_old", "error", title_source="log")
    assert log_titled.label == '"old title" (from its log)'


def test_the_suggestion_needs_similarity_and_agreement_and_never_says_unknown():
    shm = [thread(f"shm{i}", "nccl_shared_memory",
                  f"NCCL WARN Error while creating shared memory segment {i}") for i in range(3)]
    index = SimilarIndex([*shm, thread("oom", "gpu_out_of_memory", "CUDA out of memory")])
    agree = index.query([normalize_line("NCCL WARN Error while creating shared memory "
                                        "segment nccl-shm-recv")])
    assert S.suggested_category(agree) == "nccl_shared_memory"
    finding = S.suggestion_finding(agree)
    assert finding is not None and finding.code.id == "DIAG009"
    assert finding.title.startswith("LOW CONFIDENCE: no rule matched; the most similar "
                                    "solved threads were nccl_shared_memory")
    weak = [S.Match(m.thread, S.SUGGEST_MIN_SIMILARITY / 2) for m in agree]
    assert S.suggested_category(weak) is None
    split = [agree[0], S.Match(thread("x", "gpu_out_of_memory", "x"), agree[1].score),
             *agree[2:]]
    assert S.suggested_category(split) is None
    unknown = [S.Match(thread(f"u{i}", "unknown", "x"), 0.9) for i in range(3)]
    assert S.suggested_category(unknown) is None


def test_the_suggestion_comes_only_after_dIAG001_and_leads_nothing(tmp_path):
    keyerror = [thread(f"k{i}", "ddp_usage_error",
                       f"KeyError: Caught KeyError in DataLoader worker process {i}.",
                       "KeyError: 'boxes'") for i in range(3)]
    index = SimilarIndex([*keyerror, thread("oom", "gpu_out_of_memory",
                                            "torch.OutOfMemoryError: CUDA out of memory.")])
    unexplained = tmp_path / "unexplained.log"
    unexplained.write_text("Traceback (most recent call last):\n"
                           "KeyError: Caught KeyError in DataLoader worker process 3.\n")
    diagnosis = diagnose(str(unexplained))
    found = diagnosis.report.results[0].findings
    assert found[0].code.id == "DIAG001"
    extra = S.similar_findings(diagnosis.scan, found[:1], index)
    assert [f.code.id for f in extra] == ["DIAG009", "DIAG008"]
    assert "ddp_usage_error (3 of 3)" in extra[0].title
    oom = tmp_path / "oom.log"
    oom.write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n")
    diagnosis = diagnose(str(oom))
    found = diagnosis.report.results[0].findings
    assert found[0].code.category.value == "gpu_out_of_memory"
    assert [f.code.id for f in S.similar_findings(diagnosis.scan, found[:1], index)] == \
        ["DIAG008"]
    assert S.similar_findings(diagnosis.scan, [], index) == []


def test_findings_from_facts_alone_get_no_similar_threads(tmp_path):
    """A bundle made by ``check``: its text is ddp-doctor's own listing of the machine."""
    from ddp_doctor.codebook import all_codes
    from ddp_doctor.model import Finding

    index = SimilarIndex(MINI)
    listing = tmp_path / "environment.txt"
    listing.write_text("cuda: unavailable, NCCL error: unhandled system error\n")
    scan = scan_input(str(listing))[0]
    assert index.query(error_lines(scan))  # the text alone would find threads
    check = Finding(all_codes()["HST001"], "a check's finding")
    assert S.similar_findings(scan, [check], index) == []
    log_rule = Finding(all_codes()["LOG002"], "a log rule's finding")
    assert [f.code.id for f in S.similar_findings(scan, [check, log_rule], index)] == \
        ["DIAG008"]


# -- the shipped index ---------------------------------------------------------------------

@cache
def shipped() -> dict:
    return json.loads(SHIPPED.read_text(encoding="utf-8"))


@pytest.mark.slow
def test_the_shipped_index_is_a_fresh_build_of_the_corpus():
    fresh = B.dump_index(B.build_index_data(LOGS))
    assert SHIPPED.read_text(encoding="utf-8") == fresh, (
        "src/ddp_doctor/knowledge/solved_threads.json is stale: run python -m "
        "ddp_doctor.diagnose.similar_build tests/data/logs > "
        "src/ddp_doctor/knowledge/solved_threads.json")


def test_the_index_holds_every_case_of_the_corpus():
    import tomllib

    cases = [c for toml in sorted(LOGS.glob("cases_*.toml"))
             for c in tomllib.loads(toml.read_text(encoding="utf-8"))["case"]]
    urls = [t["url"] for t in shipped()["threads"]]
    assert sorted(urls) == sorted(c["url"] for c in cases)
    by_url = {c["url"]: c for c in cases}
    for entry in shipped()["threads"]:
        case = by_url[entry["url"]]
        assert entry["category"] == case["category"]
        assert S.SolvedThread.from_dict(entry).fix == \
            " ".join((case.get("fix") or case["root_cause"]).split())
        assert ("fix" in entry) == bool(case.get("fix"))
        assert "\n" not in entry["root_cause"]
        assert entry["title_source"] == ("thread" if case.get("title") else "log")
        assert entry["title"]
        if entry["title_source"] == "log":
            assert len(entry["title"]) <= B.MAX_TITLE_CHARS


def test_the_package_reads_its_own_copy_once():
    S.load_index.cache_clear()
    index = S.load_index()
    assert len(index) == len(shipped()["threads"])
    assert S.load_index() is index


@cache
def leave_one_out() -> tuple[int, int, int]:
    """(top-1 agreements, top-3 agreements, cases) over the shipped index."""
    index = S.load_index()
    threads = {t.url: t for t in index.threads}
    top1 = top3 = 0
    for case in shipped()["threads"]:
        found = index.query(list(threads[case["url"]].lines), exclude=case["url"])
        categories = [m.thread.category for m in found]
        top1 += categories[:1] == [case["category"]]
        top3 += case["category"] in categories
    return top1, top3, len(threads)


def test_leave_one_out_the_nearest_thread_mostly_shares_the_category():
    top1, top3, n = leave_one_out()
    assert top1 / n >= TOP1_FLOOR, f"top-1 {top1}/{n}"
    assert top3 / n >= TOP3_FLOOR, f"top-3 {top3}/{n}"


# -- in a real diagnosis -------------------------------------------------------------------

def corpus_report(name: str):
    return diagnose(str(LOGS / name)).report


def test_a_corpus_log_lists_similar_threads_last_in_every_format():
    report = corpus_report("nccl-473.log")
    findings = report.results[0].findings
    assert findings[0].code.category.value == "nccl_shared_memory"
    assert findings[-1].code.id == "DIAG008"
    assert report.findings[0].code.id != "DIAG008"
    similar = findings[-1]
    assert len(similar.evidence) == 3
    assert similar.evidence[0].value.endswith(
        " - nccl_shared_memory - https://github.com/NVIDIA/nccl/issues/473")
    data = json.loads(render_json(report))
    entry = next(f for f in data["findings"] if f["code"] == "DIAG008")
    assert entry["severity"] == "info" and entry["category"] == "unknown"
    assert [e["label"].startswith("similar thread (") for e in entry["evidence"]] == [True] * 3
    assert all(s["url"].startswith("https://") for s in entry["remediation"])
    assert data["findings"][0]["code"] == findings[0].code.id
    markdown = render_markdown(report)
    assert "DIAG008" in markdown and "https://github.com/NVIDIA/nccl/issues/473" in markdown
    out = io.StringIO()
    render_console(report, Console(file=out, width=100, color_system=None, highlight=False))
    text = out.getvalue()
    assert "DIAG008" in text and text.index(findings[0].code.id) < text.index("DIAG008")
    assert "https://github.com/NVIDIA/nccl/issues/473" in text


def test_a_log_no_rule_explains_keeps_dIAG001_first():
    # a corpus case whose thread never established a cause: no rule should match it
    report = corpus_report("yolox-512.log")
    codes = [f.code.id for f in report.results[0].findings]
    assert codes[0] == "DIAG001", codes
    assert codes[-1] == "DIAG008"
    assert report.results[0].summary == "no known failure signature"
    assert report.findings[0].code.id == "DIAG001"


LIVE_H200_Q = REPO / "tests" / "fixtures" / "captures" / "nvidia-smi-q-h200-live.txt"


def test_zero_readings_of_error_counters_are_not_error_lines():
    assert not S.is_error_line("        Uncorrectable Error                            : 0")
    assert not S.is_error_line("        Remapping Failure Occurred                     : No")
    assert not S.is_error_line("    ECC Errors")
    # A count above zero, and real errors with the same words, still are.
    assert S.is_error_line("        Uncorrectable Error                            : 2")
    assert S.is_error_line("RuntimeError: CUDA error: uncorrectable ECC error encountered")
    assert S.is_error_line("Segmentation fault (core dumped)")


def test_a_healthy_gpus_nvidia_smi_q_suggests_no_cause():
    """The live H200's `nvidia-smi -q` (bench/gpu_validate.sh) was diagnosed as DIAG009
    'hardware_fault (3 of 3)': its ECC counters at 0 matched three ECC-error threads."""
    codes = [f.code.id for f in diagnose(str(LIVE_H200_Q)).report.findings]
    assert codes == ["DIAG001"]


def test_a_stopped_launchers_traceback_draws_no_thread(tmp_path):
    """torchrun stopped from outside (a hung job ended by its supervisor) prints its own
    shutdown lines and a SignalException traceback: launcher boilerplate, which drew a
    host-OOM thread (through "File .../errors/__init__.py") before."""
    from ddp_doctor.diagnose import diagnose
    from ddp_doctor.diagnose.similar import error_lines

    log = tmp_path / "stopped.log"
    log.write_text(
        "W1128 09:30:01.123000 9080 torch/distributed/elastic/multiprocessing/api.py:900] "
        "Received 15 death signal, shutting down workers\n"
        "W1128 09:30:01.124000 9080 torch/distributed/elastic/multiprocessing/api.py:908] "
        "Sending process 9250 closing signal SIGTERM\n"
        "Traceback (most recent call last):\n"
        '  File "/venv/lib/python3.11/site-packages/torch/distributed/elastic/'
        'multiprocessing/errors/__init__.py", line 355, in wrapper\n'
        "    self._shutdown(e.sigval, timeout=self._shutdown_timeout)\n"
        "During handling of the above exception, another exception occurred:\n"
        "torch.distributed.elastic.multiprocessing.api.SignalException: Process 9080 got "
        "signal: 15\n")
    assert error_lines(diagnose(str(log)).scan) == []
