"""Loaded by every Python process of a job ``ddp-doctor run --flight-recorder`` runs.

The folder holding this file is put first on the job's PYTHONPATH, so Python's ``site``
imports it at start-up. It loads ddp-doctor's Flight Recorder hook by its path
(``DDP_DOCTOR_FR_HOOK``: the user's interpreter need not have ddp-doctor installed), starts
it, and then imports the job's own ``sitecustomize``, if it has one, as Python would have
without us. It never raises: a job must run the same with the doctor as without it.
"""

import contextlib
import os
import sys


def _start_hook() -> None:
    import importlib.util

    path = os.environ.get("DDP_DOCTOR_FR_HOOK")
    if not path or not os.path.isfile(path):
        return
    spec = importlib.util.spec_from_file_location("_ddp_doctor_flight", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.start()


def _chain_own_sitecustomize() -> None:
    """The job's own sitecustomize (shadowed by this one), loaded as Python would."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


with contextlib.suppress(Exception):  # never break the job for a diagnosis aid
    _start_hook()
_chain_own_sitecustomize()
