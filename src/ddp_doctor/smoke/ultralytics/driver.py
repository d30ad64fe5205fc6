"""Train Ultralytics YOLO on a synthetic data set, through Ultralytics' own DDP path.

Run by ``ddp-doctor smoke --trainer ultralytics`` with the interpreter being diagnosed, as
a script: it imports the standard library and the user's own packages only (never
ddp_doctor), so that interpreter needs Ultralytics but not the doctor. It writes, into
``--out``:

- ``events.jsonl``: one JSON object a line (``import``, ``dataset``, ``model``, ``epoch``
  with the time each results.csv row appeared, ``done`` or ``error``), for the parent to
  judge and time;
- ``ranks/rank<N>``: one file per process that began training (written by the trainer
  class of ``ddp_doctor_ultra_hooks``, which Ultralytics' DDP script imports by name in
  every rank, so each DDP rank writes its own);
- Ultralytics' own run directory ``run/`` (results.csv, weights/last.pt).

The model is built from a YAML file Ultralytics ships, so no weights are downloaded; AMP
is off because Ultralytics' AMP check downloads a model. ``nbs`` equals the batch so every
batch is an optimizer step (Ultralytics otherwise accumulates to 64 images, which on this
small set means no step at all in the first epochs), and the optimizer is AdamW at a small
fixed lr: measured on CPU, the box loss of YOLO's first epochs rises before it falls
(the assigner matches more anchors as scores grow), and 6 epochs bring it clearly below
the first epoch's.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import json
import os
import random
import struct
import sys
import threading
import time
import traceback
import zlib
from pathlib import Path
from typing import Any

# Class colours (RGB) of the rectangles; the background is mid grey.
COLOURS = ((220, 40, 40), (40, 200, 60), (50, 80, 230))
BACKGROUND = (128, 128, 128)


def png_bytes(width: int, height: int, rows: list[bytearray]) -> bytes:
    """An 8-bit RGB PNG of ``rows`` (each ``width * 3`` bytes), written with zlib only."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))
    raw = b"".join(b"\x00" + bytes(row) for row in rows)  # filter type 0 on every row
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw))
            + chunk(b"IEND", b""))


def synthetic_image(rng: random.Random, size: int) -> tuple[bytes, list[str]]:
    """One image of 1 to 3 coloured rectangles and its YOLO label lines."""
    rows = [bytearray(BACKGROUND * size) for _ in range(size)]
    labels = []
    for _ in range(rng.randint(1, 3)):
        cls = rng.randrange(len(COLOURS))
        w, h = rng.randint(size // 5, size // 2), rng.randint(size // 5, size // 2)
        x0, y0 = rng.randint(0, size - w), rng.randint(0, size - h)
        colour = bytes(COLOURS[cls])
        for y in range(y0, y0 + h):
            rows[y][x0 * 3:(x0 + w) * 3] = colour * w
        labels.append(f"{cls} {(x0 + w / 2) / size:.6f} {(y0 + h / 2) / size:.6f} "
                      f"{w / size:.6f} {h / size:.6f}")
    return png_bytes(size, size, rows), labels


def make_dataset(root: Path, train: int = 32, val: int = 8, size: int = 96,
                 seed: int = 0) -> Path:
    """Write images/, labels/ and data.yaml under ``root``; returns the YAML's path."""
    rng = random.Random(seed)
    for split, n in (("train", train), ("val", val)):
        images, labels = root / "images" / split, root / "labels" / split
        images.mkdir(parents=True, exist_ok=True)
        labels.mkdir(parents=True, exist_ok=True)
        for i in range(n):
            png, lines = synthetic_image(rng, size)
            (images / f"{i:04d}.png").write_bytes(png)
            (labels / f"{i:04d}.txt").write_text("\n".join(lines) + "\n")
    names = "".join(f"  {i}: {n}\n" for i, n in enumerate(("red", "green", "blue")))
    yaml = root / "data.yaml"
    yaml.write_text(f"path: {root}\ntrain: images/train\nval: images/val\nnames:\n{names}")
    return yaml


def model_yaml(cfg_root: Path) -> str:
    """yolo11n.yaml when shipped, else the newest ``yolo<N>n.yaml`` (or ``yolov<N>n``).

    Ultralytics ships scale-less files (``yolo11.yaml``) and builds the ``n`` scale from
    the name ``yolo11n.yaml``.
    """
    shipped = {p.name for p in cfg_root.rglob("yolo*.yaml")}
    if "yolo11.yaml" in shipped:
        return "yolo11n.yaml"
    versions = []
    for name in shipped:
        stem = name[4:-5]
        if stem.lstrip("v").isdigit():
            versions.append((int(stem.lstrip("v")), stem))
    if not versions:
        raise RuntimeError(f"no yolo<N>.yaml model file under {cfg_root}")
    return f"yolo{max(versions)[1]}n.yaml"


class Events:
    """Appends one JSON object a line, with a wall-clock time, flushed at once."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, kind: str, **fields: Any) -> None:
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"kind": kind, "t": time.time(), **fields}) + "\n")


def watch_results(csv: Path, events: Events, stop: threading.Event) -> None:
    """Write an ``epoch`` event when a row appears in results.csv (every rank layout)."""
    seen = 0
    while True:
        last_look = stop.is_set()  # one more look after training ended: its last row
        try:
            rows = csv.read_text(encoding="utf-8").splitlines()[1:]
        except OSError:
            rows = []
        for _ in range(seen, len(rows)):
            seen += 1
            events.write("epoch", epoch=seen)
        if last_look:
            return
        stop.wait(0.2)


# Modules Ultralytics' multi-GPU path imports without declaring them, with the version its
# own check asks for: 8.4's generate_ddp_file pickles the trainer with cloudpickle and
# pip-installs it on first use (check_requirements("cloudpickle>=3.1.1")).
DDP_MODULES = {"cloudpickle": "cloudpickle>=3.1.1"}


def missing_for_ddp() -> list[str]:
    """Requirements of this Ultralytics' DDP launch that the interpreter lacks.

    Read from the source of ``generate_ddp_file`` itself, so a version that does not use a
    module is not asked for it. The doctor never installs anything: Ultralytics would,
    online, and offline (YOLO_OFFLINE, an air-gapped node) the launch fails.
    """
    try:
        dist = importlib.import_module("ultralytics.utils.dist")
        source = inspect.getsource(dist.generate_ddp_file)
    except Exception:  # another layout: nothing known to check
        return []
    return [spec for name, spec in DDP_MODULES.items()
            if name in source and importlib.util.find_spec(name) is None]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", required=True, help="cpu, or GPU indices: 0,1")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--imgsz", type=int, default=64)
    parser.add_argument("--batch", type=int, default=8, help="images per process")
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--train-images", type=int, default=32,
                        help="synthetic training images (the parent gives 32 per rank)")
    parser.add_argument("--lr0", type=float, default=0.002)
    parser.add_argument("--tag", default="")
    args = parser.parse_args(argv)
    out = Path(args.out)
    events = Events(out / "events.jsonl")
    events.write("start", pid=os.getpid())
    try:  # by name: the user's package, unknown to the doctor's own type checking
        ultralytics = importlib.import_module("ultralytics")
        yolo = ultralytics.YOLO
    except Exception as exc:  # any import failure is the finding, told as one line
        events.write("error", phase="import", error=f"{type(exc).__name__}: {exc}")
        return 3
    events.write("import", version=getattr(ultralytics, "__version__", "?"))
    if args.device != "cpu" and "," in args.device:
        missing = missing_for_ddp()
        if missing:
            events.write("error", phase="ddp_requirements", missing=missing,
                         error=f"Ultralytics' DDP launch imports {', '.join(missing)}, "
                               "which is not installed")
            return 4
    data = make_dataset(out / "data", train=args.train_images)
    events.write("dataset", path=str(data))
    ranks = out / "ranks"
    ranks.mkdir(exist_ok=True)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    # Beside this file; Ultralytics' DDP script imports its trainer class by name.
    hooks = importlib.import_module("ddp_doctor_ultra_hooks")

    stop = threading.Event()
    run_dir = out / "run"
    watcher = threading.Thread(target=watch_results, args=(run_dir / "results.csv", events,
                                                           stop), daemon=True)
    try:
        name = model_yaml(Path(str(ultralytics.__file__)).parent / "cfg" / "models")
        model = yolo(name)
        events.write("model", yaml=name)
        world = 1 if args.device == "cpu" else len(args.device.split(","))
        watcher.start()
        model.train(data=str(data), epochs=args.epochs, imgsz=args.imgsz,
                    batch=args.batch * world, device=args.device, workers=args.workers,
                    plots=False, amp=False, val=False, project=str(out), name="run",
                    exist_ok=True, seed=0, deterministic=True, optimizer="AdamW",
                    lr0=args.lr0, nbs=args.batch * world, warmup_epochs=0, close_mosaic=0,
                    mosaic=0.0, verbose=True, trainer=getattr(hooks, hooks.TRAINER_NAME))
    except Exception as exc:
        events.write("error", phase="train", error=f"{type(exc).__name__}: {exc}")
        traceback.print_exc()
        return 1
    finally:
        stop.set()
        if watcher.is_alive():
            watcher.join(timeout=5)
    events.write("done", weights=str(run_dir / "weights" / "last.pt"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
