"""The processes the doctor starts: started tagged, watched, stopped, and proven gone.

Every child the doctor runs (the smoke job's launcher, the Ultralytics driver, the user's
own command under ``run``) starts through ``ProcessTree.start``: in a session of its own,
with the run's tag in its environment (``tag.TAG_VARIABLE``), which every descendant
inherits, so the doctor finds each process of the run even after its parent died and it
was re-parented. ``signals.stop_signals_raise`` turns SIGINT/SIGTERM/SIGHUP to the doctor
into a clean stop (the signal is forwarded to the run; a second one escalates to SIGKILL),
``ProcessTree.stop`` ends the run (the signal, a grace period, SIGKILL), and
``tag.survivors`` lists what is left of a run (nothing, after a stop).

It imports only the standard library and psutil, so every layer that starts processes
(facts/, smoke/, job/) can use it. Import the modules themselves: this file imports none,
so ``group`` (the standard library alone) stays cheap for ``facts.seam``, which every
command imports.
"""
