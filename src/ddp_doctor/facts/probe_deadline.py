"""The torch probe's deadline, in a module that imports nothing.

The command line shows the deadline in ``--help`` (``--probe-timeout``'s default); reading
it from ``torch_probe`` made every ``--help`` and ``--version`` load the probe script, the
facts snapshot and the redaction patterns for one number. The per-part deadlines are the
probe script's own (``python_probe_script.py`` runs in another interpreter and cannot
import this module); ``tests/facts/test_probe_deadline.py`` holds the two copies equal.
"""

from __future__ import annotations

# Copies of python_probe_script's constants of the same names.
GPU_DEADLINE_S = 15.0
P2P_DEADLINE_S = 10.0
LOAD_DEADLINE_S = 3.0
P2P_COPY_BUDGET_S = 20.0

# The child runs each GPU's tests under its own deadline, so the parent's deadline is a
# base (interpreter start, import torch, CUDA init) plus room for 8 GPUs, the P2P
# queries, NVML read under load on each GPU and the P2P data test's own budget: a machine
# with every GPU hung still reports within four minutes.
TORCH_PROBE_BASE_S = 60.0
BUDGETED_GPUS = 8
TORCH_PROBE_TIMEOUT_S = (TORCH_PROBE_BASE_S + BUDGETED_GPUS * GPU_DEADLINE_S + P2P_DEADLINE_S
                         + BUDGETED_GPUS * LOAD_DEADLINE_S + P2P_COPY_BUDGET_S)
