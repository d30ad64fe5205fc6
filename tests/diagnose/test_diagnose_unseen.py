"""``diagnose`` on the unseen split (tests/data/unseen): real threads no rule was written
from. The split is scored, never studied; its README records each score with its date."""

from __future__ import annotations

from functools import cache

import pytest

from ddp_doctor.categories import Category
from ddp_doctor.diagnose import diagnose
from tests.support.corpus import LOGS, UNSEEN, confusion, read_cases

# The score measured when the split was last scored (README); a change that loses ground
# on threads nobody studied fails here. After the studied half of split G moved to the
# corpus: splits A-F (104/142) and G's held-out half (40/52, 37/52 before that study); with
# split H, scored blind before anything changed for it (18/35); then H's even positions moved
# to the corpus to be studied (11/18 before the study, 14/18 after), and its held-out half
# stayed (7/17 before that study, 9/17 after). 158/211 once slowness stated in words became
# a low-confidence lead (diagnose/stated_slowness.py, written from the corpus's performance
# threads; 1/9 of the unseen ones were read right before it, 6/9 after). 160/211 once
# torch's bare CUDNN_STATUS_NOT_INITIALIZED became cudnn_failure (LOG079, decided on the
# corpus's four torch threads, three of them a build that did not fit the machine).
# Split I (61, scored blind: 37/61 on the code it was collected against, 38/61 after that
# day's general changes) joined: 198/272; then I's even positions moved to the corpus to be
# studied (19/31 before the study), its held-out half stayed (19/30 before that study).
# Split J (18, scored blind: 11/18 on the code it was collected against and after) joined,
# kept whole: 193/259. Split K (53, scored blind: 36/53 on the code it was collected against)
# joined, then K's even positions moved to the corpus to be studied (20/28 before the study),
# its held-out half stayed (16/25 before that study): 209/284. 212/284 after the study of
# K's even half and the messages read from the sources beside it (three held-out threads
# reached; totals only). Split L (30, scored blind: 22/30 on aad624c and on 04ee593, the
# session's first code: nothing built that day reached it) joined, then its even positions
# moved to the corpus to be studied (12/16), its held-out half stayed (10/14): 222/298.
# 225/298 once the fallback became a logistic regression (fefda05, from the corpus alone).
# Split M (56, scored blind: 39/56 on e9113d4, the code it was collected against, 40/56 on
# fefda05) joined: 265/354; then M's even positions moved to the corpus to be studied (20/29
# before the study), its held-out half stayed (20/27 before that study): 245/325.
# Split N (65, scored blind: 48/65 on f01ba49, the code it was collected against, 46/65 on
# e9113d4) joined: 293/390; then N's even positions moved to the corpus to be studied (23/33
# before the study), its held-out half stayed (25/32 before that study): 270/357.
# Split O (54, scored blind: 37/54 on 9d2895b, the code it was collected against) joined,
# then its even positions moved to the corpus to be studied (19/27 before the study), its
# held-out half stayed (18/27 before that study): 288/384; 289/384 after the study (the
# similar-threads index and the fallback rebuilt with the studied half; totals only).
# Split P (43, scored blind: 31/43 on bdc5fd3, the code it was collected against, 29/43 on
# 9d2895b, that day's first code) joined, then its even positions moved to the corpus to be
# studied (18/22 before the study), its held-out half stayed (13/21 before that study):
# 302/405; 303/405 after the study (index and fallback rebuilt; totals only).
# Split Q1-Q4 (46, scored blind: 27/46 on 371975f, the code it was collected against, and on
# 2e410a1, that morning's source-read catalogues) joined, then its even positions moved to the
# corpus to be studied (13/25 before the study), its held-out half stayed (14/21 before that
# study): 317/426; the same after the study (index and fallback rebuilt; totals only).
# Split Q5 (23, collected with Q1-Q4 against 371975f and scored blind after their study: 20/23
# on 371975f and on d3d957f) joined, then its even positions moved to the corpus to be studied
# (11/12 before the study), its held-out half stayed (9/11): 326/437.
# Split R (47, scored blind: 33/47 on 8e5a6d6, the code it was collected against, on 3245564
# and on 371975f: nothing built that day reached it) joined, then its even positions moved to
# the corpus to be studied (18/24 before the study), its held-out half stayed (15/23 before
# that study): 341/460. One held-out case shared its page's URL with a studied one (two entries
# of one FAQ) and joined the studied half unread (19/25 before the study; held out 14/22):
# 340/459, the same after the study (index and fallback rebuilt; totals only).
# Split S (115, collected by eight helpers, scored blind: 80/115 on 5268a5e, the code when it
# was read, and on 0a23c34, the session's first code: nothing built that day reached it)
# joined, then its even positions moved to the corpus to be studied (42/59 before the
# study), its held-out half stayed (38/56 before that study): 378/515.
# Split T (8 threads of 2024-2026 LLM and diffusion training, collected after S's study and
# scored blind: 6/8 on b6d2258 and on 0a23c34) joined whole, unstudied: 384/523.
# A catalogued message pasted bare read where nothing else was (diagnose/bare_messages.py,
# from the sources, before split U was read): 385/523.
# Split U (87, collected by seven helpers, scored blind: 57/87 on 23e6b4e, the code it was
# collected against, the same case for case on 5e9cd96, and 57/87 on cce06ff) joined, then
# its even positions moved to the corpus to be studied (29/45 before the study), its
# held-out half stayed (28/42 before that study, 29/42 after it with the index and the
# fallback rebuilt; nothing aimed at it): 414/565.
# Split V (42, collected by three helpers after U's study, scored blind: 26/42 on 8401516, the
# code when it was read, 25/42 on 23e6b4e) joined, then its even positions moved to the
# corpus to be studied (13/22 before the study), its held-out half stayed (13/20 before that
# study, 14/20 after it with the index and the fallback rebuilt): 431/585.
# The fallback trained on the catalogues' templates too: 433/585.
# Split W (81, collected by six helpers, scored blind: 43/81 on df5508b, the code it was
# collected against, 45/81 on 61d731b, the catalogue-trained fallback written before W was
# read) joined, then its even positions moved to the corpus to be studied (22/43 before the
# study), its held-out half stayed (23/38 before that study, 24/38 after it with the index and
# the fallback rebuilt; nothing aimed at it). The fallback's calibrated threshold rose from 0.4
# to 0.5 with W's studied half in the corpus (the band below 0.5 right in 18 of 48): 455/623.
# After review: the calibration left out, fold by fold, the catalogue entries written from a
# held-out thread, and held the threshold to 80% on the corpus threads no rule explains (the
# ones the fallback serves: 75% at 0.5), which made it 0.8; the unseen splits' fallback leads
# went from 35 right of 48 to 22 of 26 (totals only): 439/623.
# Split X (65, collected by five helpers, scored blind: 34/65 on f983e25, the code when it was
# read, 36/65 on efcc2a1 and on df5508b) joined, then its even positions moved to the corpus to
# be studied (18/34 before the study), its held-out half stayed (16/31 before that study, 16/31
# after it). With X's studied half in the corpus the fallback's threshold rose to 0.95 by the
# same rule; the unseen splits' fallback leads became 11 of 11 right (totals only): 445/654.
FLOOR = 445 / 654


@cache
def cases() -> tuple[dict, ...]:
    return tuple(read_cases(UNSEEN))


def test_the_split_is_complete_and_outside_the_corpus() -> None:
    valid = {c.value for c in Category} - {"unknown"}
    files = [c["file"] for c in cases()]
    assert len(files) >= 100 and len(set(files)) == len(files)
    assert sorted(files) == sorted(p.name for p in UNSEEN.glob("*.log")), "unlisted logs"
    corpus = read_cases(LOGS)
    studied_urls = {c["url"] for c in corpus}
    # A split studied after these threads were collected (split E, moved to the corpus with
    # moved_from set) may share a repository with one of them; its threads still differ.
    studied_repos = {"/".join(c["url"].split("/")[3:5]) for c in corpus
                     if "github.com" in c["url"] and "moved_from" not in c}
    for case in cases():
        assert case["category"] in valid, case
        assert case["split"] == "unseen" and case["url"].startswith("https://"), case
        assert case["url"] not in studied_urls, case["url"]
        if "github.com" in case["url"]:
            # Split K's and L's collectors found most confirmed threads in repositories the
            # corpus already held, and took such a thread (a new one) only marking it so.
            assert case.get("repo_in_corpus") is True \
                or "/".join(case["url"].split("/")[3:5]) not in studied_repos, case["url"]
        assert len(case["root_cause"]) > 20, case


@pytest.mark.slow
def test_the_unseen_split_keeps_its_score() -> None:
    rows = []
    for case in cases():
        lead = diagnose(str(UNSEEN / case["file"])).report.results[0].findings[0]
        rows.append((case["category"], lead.code.category.value))
    right = sum(1 for expected, got in rows if expected == got)
    print(f"\nunseen: {right}/{len(rows)} ({right / len(rows):.1%})\n{confusion(rows)}")
    assert right / len(rows) >= FLOOR - 1e-9, confusion(rows)
