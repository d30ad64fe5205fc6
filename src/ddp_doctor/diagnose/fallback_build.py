"""Train the fallback classifier on the shipped solved threads and the catalogues' messages
and print its weights.

Regenerate it after the index (``knowledge/solved_threads.json``) is rebuilt; the test of
the shipped model (tests/diagnose/test_fallback.py) fails until it is a fresh build::

    python -m ddp_doctor.diagnose.fallback_build \\
        > src/ddp_doctor/knowledge/fallback_model.json

Training is deterministic (a seeded shuffle), so the same index gives the same file.
"""

from __future__ import annotations

import json
import sys

from ddp_doctor.diagnose.fallback import (
    SoftmaxRegression,
    documents,
    shipped_catalogue_documents,
)
from ddp_doctor.diagnose.similar import load_index


def build() -> dict[str, object]:
    return SoftmaxRegression.train(documents(load_index().threads)
                                   + shipped_catalogue_documents()).to_dict()


def main() -> int:
    json.dump(build(), sys.stdout, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
