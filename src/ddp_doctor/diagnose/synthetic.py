"""A large, realistic failure log for the throughput bench and the streaming-memory test.

Most of a real training log is noise: YOLO progress bars redrawn with carriage returns
and colour codes, NCCL INFO lines from every rank, torchrun warnings, per-epoch metric
tables. This writes that noise in the proportions such logs have, with given failure
excerpts spliced in at known places, so a test can check that a 1 GB stream is read in
bounded memory and still quotes the right line numbers.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

# (template, weight): a long job's log is mostly per-step progress and metrics; NCCL's INFO
# lines and torchrun's warnings come in bursts at start-up, a few percent of the lines.
_NOISE = (
    "      {e}/300      3.41G    0.05721    0.03311    0.01874        {n}        640: "
    " 42%|████▏     | 312/741 [01:12<01:39,  4.31it/s]\r"
    "      {e}/300      3.41G    0.05719    0.03310    0.01871        {n}        640: "
    " 43%|████▎     | 319/741 [01:13<01:37,  4.33it/s]",
    "                 Class     Images  Instances          P          R      mAP50   "
    "mAP50-95: 100%|██████████| 32/32 [00:08<00:00,  3.91it/s]",
    "                   all       {n}      17240      0.712      0.603      0.661      0.443",
    "[rank{r}]:node-{r}:{n}:{n} [{r}] NCCL INFO Channel 0{r}/32 :    0   1   2   3   4   5   "
    "6   7",
    "node-{r}:{n}:{n} [{r}] NCCL INFO comm 0x55d5c3a1e2f0 rank {r} nranks 8 cudaDev {r} "
    "busId {n:x}000 - Init COMPLETE",
    "\x1b[34m\x1b[1mtrain: \x1b[0mScanning /data/coco/labels/train2017.cache... {n} images, "
    "1021 backgrounds, 0 corrupt: 100%|██████████| 118287/118287",
    "Epoch {e}: 100%|██████████| 1563/1563 [04:12<00:00, 6.19it/s, loss=0.412, v_num=3]",
    "{{'loss': 0.{n}, 'grad_norm': 1.83, 'learning_rate': 1.9e-05, 'epoch': {e}.41}}",
    "W1123 13:37:{r}0.{n} 140213 torch/distributed/run.py:793] Setting OMP_NUM_THREADS "
    "environment variable for each process to be 1 in default",
    "step {n}: loss 2.{n} lr 6.0e-4 tokens/s 112233 mem 31.2GB",
)


_WEIGHTS = (30, 6, 6, 2, 1, 2, 20, 15, 1, 17)


def noise_lines(seed: int = 7) -> Iterator[str]:
    """Endless noise lines (each ends with a newline)."""
    rng = random.Random(seed)
    while True:
        template = rng.choices(_NOISE, weights=_WEIGHTS)[0]
        yield template.format(e=rng.randrange(1, 300), n=rng.randrange(10, 99999),
                              r=rng.randrange(0, 8)) + "\n"


def synthetic_log(total_bytes: int, excerpts: Sequence[str], seed: int = 7
                  ) -> Iterator[tuple[bytes, list[int]]]:
    """Blocks of about 1 MiB, and the 1-based line numbers where excerpts start in them.

    The excerpts are spread evenly through the log, each preceded by noise.
    """
    noise = noise_lines(seed)
    every = max(1, total_bytes // max(1, len(excerpts)))
    written, line_no, next_at, pending = 0, 1, every // 2, list(excerpts)
    while written < total_bytes:
        parts: list[str] = []
        starts: list[int] = []
        size = 0
        while size < (1 << 20) and written + size < total_bytes:
            if pending and written + size >= next_at:
                text = pending.pop(0)
                text = text if text.endswith("\n") else text + "\n"
                starts.append(line_no)
                next_at += every
            else:
                text = next(noise)
            parts.append(text)
            size += len(text.encode())
            line_no += text.count("\n")
        written += size
        yield "".join(parts).encode(), starts
