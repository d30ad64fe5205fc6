"""The smoke-training job: a compact YOLO detector trained with DDP (built in a later issue).

Imports torch and the standard library only, because it runs inside the user's
training interpreter under torch.distributed.run.
"""
