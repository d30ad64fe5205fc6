"""The GPU validation suite: tests that need real NVIDIA GPUs, skipped on a machine without.

Everything here has a CPU-side counterpart that runs everywhere (the logic of planning,
verifying, timing and judging is tested with stand-ins in tests/facts and tests/checks);
these tests prove the same code on real devices, links and drivers. Run them on a GPU
machine with ``pytest tests/gpu -m gpu`` (bench/gpu_validate.sh does, among the rest).

Every test here is marked ``gpu`` and skipped, with the reason, on a machine with fewer
CUDA GPUs than it needs: one, or ``n`` for a test marked ``gpus(n)``; ``gpus_exactly(n)``
runs only where there are exactly ``n``. The exception is a module named ``*_unit.py``:
the CPU tests of the suite's own helpers, which run everywhere and are not ``gpu``.
"""

from __future__ import annotations

import pytest


def _gpus() -> int:
    try:
        import torch
    except ImportError:
        return 0
    try:
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:
        return 0


GPUS = _gpus()


def skip_reason(item_path: str, needed: int, exactly: int | None, gpus: int) -> str | None:
    """Why a test at ITEM_PATH is skipped on a machine with GPUS CUDA devices, or None."""
    if is_unit_module(item_path):
        return None
    if exactly is not None and gpus != exactly:
        return f"needs exactly {exactly} CUDA GPU{'s' if exactly > 1 else ''}, this machine " \
               f"has {gpus}"
    if needed > gpus:
        return f"needs {needed} CUDA GPU{'s' if needed > 1 else ''}, this machine has {gpus}"
    return None


def in_suite(item_path: str) -> bool:
    return "tests/gpu/" in item_path.replace("\\", "/")


def is_unit_module(item_path: str) -> bool:
    return item_path.replace("\\", "/").rsplit("/", 1)[-1].endswith("_unit.py")


# tryfirst: the marker must be on the items before `-m gpu` selects them.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = str(item.fspath)
        if not in_suite(path) or is_unit_module(path):
            continue
        item.add_marker(pytest.mark.gpu)
        needed = item.get_closest_marker("gpus")
        exactly = item.get_closest_marker("gpus_exactly")
        reason = skip_reason(path, int(needed.args[0]) if needed and needed.args else 1,
                             int(exactly.args[0]) if exactly and exactly.args else None, GPUS)
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))
