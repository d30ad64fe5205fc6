"""Every file the documentation points to exists: a moved or deleted module leaves no stale
pointer in docs/*.md, README.md, CONTRIBUTING.md or the package's own docstrings and
comments.

A mention is a path with a folder (``facts/gather.py``, ``tests/support/rules.py``) whose
first folder is one of this repository's: at its root (``checks/``, ``tests/``), or a part
of the package (``diagnose/``, ``smoke/verdict/``). It must exist from the root, from
``src/ddp_doctor/`` or beside the file that names it. Paths in other projects
(``ultralytics/utils/dist.py``) start with a folder of theirs and are not read; the few
that share a first folder with ours are listed in ELSEWHERE.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "src" / "ddp_doctor"
PATH = re.compile(
    r"(?<![\w./-])((?:[\w.-]+/)+[\w.-]+\.(?:py|md|toml|json|txt|yml|yaml|sh|cfg|ini))\b")

ELSEWHERE = {
    ".ci/manywheel/build_cuda.sh": "PyTorch's wheel build script, cited as a source",
}


def documents() -> list[Path]:
    return [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md", REPO / "CONTRIBUTING.md",
            *sorted(PACKAGE.rglob("*.py")), *sorted((REPO / "checks").glob("*.py")),
            *sorted((REPO / "train_smoke").glob("*.py"))]


def ours() -> set[str]:
    """The first folders a mention of this repository's files starts with."""
    return {p.name for folder in (REPO, PACKAGE) for p in folder.iterdir() if p.is_dir()}


def stale(path: Path, text: str, first_folders: set[str]) -> list[str]:
    """The mentions in TEXT (of the file PATH) of our files that do not exist."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for match in PATH.finditer(line):
            mention = match.group(1)
            if mention.split("/")[0] not in first_folders or mention in ELSEWHERE:
                continue
            if any((base / mention).exists() for base in (REPO, PACKAGE, path.parent)):
                continue
            found.append(f"{path.relative_to(REPO)}:{number}: {mention}")
    return found


def test_every_path_the_documentation_names_exists():
    first_folders = ours()
    missing = [m for doc in documents()
               for m in stale(doc, doc.read_text(encoding="utf-8"), first_folders)]
    assert missing == [], "stale pointers:\n" + "\n".join(missing)
    assert all(any(mention in doc.read_text(encoding="utf-8") for doc in documents())
               for mention in ELSEWHERE), "ELSEWHERE lists a mention no document makes"


def test_a_stale_pointer_is_caught():
    doc = PACKAGE / "logrules" / "__init__.py"
    text = ("ranked as diagnose (diagnose/rank.py) does; see facts/gather.py and\n"
            "tests/support/rules.py, ``smoke/verdict/criteria.py``, or ultralytics/utils/dist.py\n")
    assert stale(doc, text, ours()) == ["src/ddp_doctor/logrules/__init__.py:1: diagnose/rank.py"]


def test_contributing_states_the_corpus_threshold_the_test_holds():
    from tests.diagnose.test_diagnose_corpus import THRESHOLD

    text = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
    stated = {int(n) for n in re.findall(r"at\s+least\s+(\d+)%", text)}
    assert stated == {round(THRESHOLD * 100)}
