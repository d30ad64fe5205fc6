"""A log that is only torchrun's summary of failed ranks (no rank's own error in it).

The real paste below (TransVG issue 27) names ranks 2-4 with exit code 1 and
``error_file: <N/A>``: the cause is in the ranks' output, which was not pasted. The
diagnosis must say how to get it, not offer threads that merely share torchrun's summary.
"""

from __future__ import annotations

from ddp_doctor.diagnose import diagnose, similar
from tests.conftest import FIXTURES

LOG = FIXTURES / "logs" / "torchrun-summary-transvg-27.log"


def test_the_summary_alone_asks_for_each_ranks_output_and_record():
    findings = diagnose(str(LOG)).report.results[0].findings
    assert [f.code.id for f in findings] == ["DIAG001"]  # no look-alike threads either
    commands = [s.command or "" for s in findings[0].remediation]
    assert "--log-dir torchrun-logs --redirects 3 --tee 3" in commands[0]
    assert commands[-2] == "ddp-doctor diagnose ranks.log"
    assert "@record" in findings[0].remediation[-1].text


def test_torchruns_summary_lines_are_not_what_threads_are_matched_on():
    scan = diagnose(str(LOG)).scan
    assert similar.error_lines(scan) == []


def test_a_log_with_a_real_error_keeps_the_usual_steps(tmp_path):
    log = tmp_path / "x.log"
    log.write_text("Traceback (most recent call last):\nValueError: something new\n")
    findings = diagnose(str(log)).report.results[0].findings
    assert findings[0].code.id == "DIAG001"
    assert findings[0].remediation[0].command == \
        "torchrun --nproc_per_node=N train.py 2>&1 | tee train.log"
