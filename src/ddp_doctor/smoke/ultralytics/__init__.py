"""The Ultralytics trainer of the smoke job: Ultralytics' own training and DDP path.

``driver.py`` and ``ddp_doctor_ultra_hooks.py`` run in the interpreter being diagnosed
(standard library and the user's packages only); ``trainer`` launches and supervises the
driver, and ``judge`` turns what it left behind into findings and measurements.
"""
