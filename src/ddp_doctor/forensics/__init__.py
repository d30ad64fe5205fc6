"""Hang forensics: where each rank of a hung job waits, and which rank holds the others up.

A hung DDP job prints nothing: every rank sits in a call until a watchdog fires minutes
later with "collective operation timeout ... SeqNum=1". What tells the cause apart is the
line each rank is on: most ranks inside one collective and one rank elsewhere (its data
loader, a lock, a rank that exited), ranks inside different collectives (their control
flow parted), or every rank inside the same collective (the transport itself). This
package reads those lines and judges them:

- ``stacks``: the model (a rank's threads and frames) and the readers of the two formats a
  stack comes in, ``py-spy dump`` and Python's faulthandler (what a rank writes on SIGUSR1,
  or on a fatal signal), so a pasted dump reads the same as a captured one;
- ``capture``: the ranks of a running job found in its process tree (their RANK from
  their environment) and their stacks taken from outside, with a deadline, before anything
  is stopped;
- ``waits``: where one rank waits, from its main thread's frames;
- ``verdict``: the HNG findings from every rank's wait;
- ``codes``: the HNG codes.
"""
