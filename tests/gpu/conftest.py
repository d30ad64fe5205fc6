"""The GPU validation suite: tests that need real NVIDIA GPUs, skipped on a machine without.

Everything here has a CPU-side counterpart that runs everywhere (the logic of planning,
verifying, timing and judging is tested with stand-ins in tests/facts and tests/checks);
these tests prove the same code on real devices, links and drivers. Run them on a GPU
machine with ``pytest tests/gpu``.
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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/gpu/" not in str(item.fspath).replace("\\", "/"):
            continue
        needed = item.get_closest_marker("gpus")
        count = int(needed.args[0]) if needed and needed.args else 1
        if count > GPUS:
            item.add_marker(pytest.mark.skip(
                reason=f"needs {count} CUDA GPU{'s' if count > 1 else ''}, this machine has "
                       f"{GPUS}"))
