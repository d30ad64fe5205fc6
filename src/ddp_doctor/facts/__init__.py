"""Fact gathering: one probe module per source, all behind the ``Env`` seam.

Kept import-light on purpose: ``python -m ddp_doctor.facts.nvml`` runs as a child
process and should not pay for the rest of the package.
"""
