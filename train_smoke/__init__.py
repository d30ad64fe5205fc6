"""The smoke-training job: a compact YOLO detector trained on synthetic data with DDP.

``ddp-doctor smoke`` (src/ddp_doctor/smoke/) launches ``worker`` once per rank with
torch.distributed.run (or torch.multiprocessing.spawn) and judges the run from the event
file each rank writes (``events``). The rest is what a rank trains: ``data`` draws the
images, ``detector`` is the model, ``assign`` and ``loss`` make its targets and loss, and
``collectives`` checks an all-reduce and measures its bandwidth before training.

Every module imports torch and the standard library only, because the job runs inside
the user's training interpreter, which need not have ddp-doctor's dependencies
(tests/core/test_layering.py enforces it).
"""
