"""`ddp-doctor smoke --trainer ultralytics`: the synthetic data set, the judging of recorded
runs, the driver under supervision with a stand-in Ultralytics package, and (slow) the real
Ultralytics in a venv of its own."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
import time
import zlib
from pathlib import Path

import jsonschema
import pytest

from ddp_doctor.smoke import codes as C
from ddp_doctor.smoke.launch import CHOICES, OptionsError, SmokeOptions, check_options
from ddp_doctor.smoke.run import run_smoke
from ddp_doctor.smoke.ultralytics import driver
from ddp_doctor.smoke.ultralytics.judge import UltraRun, judge, parse_results
from ddp_doctor.smoke.ultralytics.trainer import (
    EPOCHS,
    DeviceChoiceError,
    doctor_note,
    driver_command,
    driver_env,
    optimizer_steps_per_rank,
    run_ultralytics,
    ultralytics_devices,
)
from tests.support.cli import invoke

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "report.schema.json")
                    .read_text(encoding="utf-8"))

# results.csv of a real CPU run (Ultralytics 8.4.190, yolo11n.yaml, 6 epochs, 64 px).
RESULTS_OK = """\
epoch,time,train/box_loss,train/cls_loss,train/dfl_loss,metrics/precision(B),metrics/recall(B),metrics/mAP50(B),metrics/mAP50-95(B),val/box_loss,val/cls_loss,val/dfl_loss,lr/pg0,lr/pg1,lr/pg2
1,1.02,5.70007,3.73428,3.21713,0,0,0,0,0,0,0,0.002,0.002,0.002
2,1.71,6.02036,3.26669,2.94315,0,0,0,0,0,0,0,0.00167,0.00167,0.00167
3,2.33,3.67697,2.38412,2.61413,0,0,0,0,0,0,0,0.00134,0.00134,0.00134
4,2.95,4.06311,1.99314,2.11879,0,0,0,0,0,0,0,0.00101,0.00101,0.00101
5,3.55,3.87966,2.40635,2.55765,0,0,0,0,0,0,0,0.00068,0.00068,0.00068
6,4.16,4.04007,2.2248,2.11522,0,0,0,0,1.1,2.0,0.66,0.00035,0.00035,0.00035
"""
DDP_LINE = ("DDP: debug command /venv/bin/python -m torch.distributed.run --nproc_per_node 2 "
            "--master_port 41235 /root/.config/Ultralytics/DDP/_temp_x.py")


def _events(start: float = 100.0, epochs: int = 6) -> list[dict]:
    return ([{"kind": "start", "t": start}, {"kind": "import", "t": start + 2,
                                              "version": "8.4.190"},
             {"kind": "model", "t": start + 3, "yaml": "yolo11n.yaml"}]
            + [{"kind": "epoch", "t": start + 5 + i, "epoch": i + 1} for i in range(epochs)]
            + [{"kind": "done", "t": start + 12}])


def _run(**overrides) -> UltraRun:
    values = dict(python="/opt/py/bin/python", device="cpu", world=1, epochs=6,
                  events=_events(), results_csv=RESULTS_OK, weights=True, ranks_started=1,
                  returncode=0)
    values.update(overrides)
    return UltraRun(**values)


def _codes(run: UltraRun) -> list[str]:
    return [f.code.id for f in judge(run)[0]]


# ------------------------------------------------------------------ the synthetic data set

def _decode_png(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and the RGB rows of an unfiltered 8-bit RGB PNG (what the driver writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert crc == zlib.crc32(kind + body)
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert (depth, colour) == (8, 2)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * 3 + 1
    rows = [raw[i * stride:(i + 1) * stride] for i in range(height)]
    assert all(row[0] == 0 for row in rows)
    return width, height, [row[1:] for row in rows]


def test_dataset_has_images_labels_and_a_yaml_that_agree(tmp_path):
    yaml = driver.make_dataset(tmp_path, train=5, val=2, size=48)
    text = yaml.read_text()
    assert f"path: {tmp_path}" in text and "train: images/train" in text
    assert "0: red" in text and "2: blue" in text
    assert len(list((tmp_path / "images" / "train").glob("*.png"))) == 5
    assert len(list((tmp_path / "labels" / "val").glob("*.txt"))) == 2
    for label in (tmp_path / "labels" / "train").glob("*.txt"):
        width, height, rows = _decode_png(
            (tmp_path / "images" / "train" / f"{label.stem}.png").read_bytes())
        assert (width, height) == (48, 48)
        lines = label.read_text().splitlines()
        assert 1 <= len(lines) <= 3
        for line in lines:
            cls, cx, cy, w, h = line.split()
            assert all(0 < float(v) <= 1 for v in (cx, cy, w, h))
            # The box's centre pixel has a class colour (the last drawn box may cover it,
            # but never with the background).
            x, y = int(float(cx) * width), int(float(cy) * height)
            pixel = tuple(rows[y][x * 3:x * 3 + 3])
            assert pixel in driver.COLOURS and int(cls) in range(len(driver.COLOURS))


def test_dataset_is_the_same_for_the_same_seed(tmp_path):
    driver.make_dataset(tmp_path / "a", train=3, val=1)
    driver.make_dataset(tmp_path / "b", train=3, val=1)
    for name in ("images/train/0002.png", "labels/train/0002.txt"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


@pytest.mark.parametrize(("files", "expected"), [
    (["11/yolo11.yaml", "12/yolo12.yaml", "v8/yolov8.yaml"], "yolo11n.yaml"),
    (["12/yolo12.yaml", "26/yolo26.yaml", "26/yolo26-seg.yaml", "v8/yolov8.yaml"],
     "yolo26n.yaml"),
    (["v5/yolov5.yaml", "v8/yolov8.yaml", "v8/yolov8-cls.yaml"], "yolov8n.yaml"),
])
def test_model_is_yolo11n_else_the_newest_shipped(tmp_path, files, expected):
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("nc: 80\n")
    assert driver.model_yaml(tmp_path) == expected


# ------------------------------------------------------------------ judging recorded runs

def test_a_recorded_good_run_passes_with_its_timings():
    findings, data = judge(_run())
    assert findings == []
    assert data["epochs_done"] == 6 and data["version"] == "8.4.190"
    assert data["box_loss"][0] == 5.70007 and data["box_loss"][-1] == 4.04007
    assert data["time_to_first_epoch_s"] == 5.0
    assert data["epoch_s"] == pytest.approx((4.16 - 1.02) / 5, abs=1e-3)


def test_results_csv_columns_are_read_by_name_with_spaces():
    rows = parse_results("  epoch,  train/box_loss\n1,  2.5\n2, nan\n")
    assert rows[0]["train/box_loss"] == 2.5 and rows[1]["epoch"] == 2


def test_a_box_loss_that_did_not_fall_is_a_warning():
    rising = RESULTS_OK.replace("6,4.16,4.04007", "6,4.16,5.9")
    findings, _ = judge(_run(results_csv=rising))
    [finding] = findings
    assert finding.code is C.ULTRA_LOSS_FLAT and "5.7 → 5.9" in finding.title
    assert finding.code.severity.name == "WARNING"


def test_a_non_finite_loss_fails():
    assert _codes(_run(results_csv=RESULTS_OK.replace("2.38412", "nan"))) == ["SMK022"]


def test_missing_epochs_and_weights_are_findings():
    short = "\n".join(RESULTS_OK.splitlines()[:4]) + "\n"  # 3 epochs, box loss fell
    assert _codes(_run(results_csv=short, weights=False)) == ["SMK021", "SMK024"]


def test_every_ddp_rank_must_start_on_gpus():
    run = _run(device="cuda", world=2, ranks_started=1, output=DDP_LINE)
    findings, data = judge(run)
    assert [f.code.id for f in findings] == ["SMK025"]
    assert data["ddp_nproc"] == 2 and "1 of 2" in findings[0].title
    assert _codes(_run(device="cuda", world=2, ranks_started=2, output=DDP_LINE)) == []
    # No marker at all (a version that drops callbacks in DDP): the DDP command's count and
    # the finished epochs decide; without the command line it is a finding.
    assert _codes(_run(device="cuda", world=2, ranks_started=0, output=DDP_LINE)) == []
    assert _codes(_run(device="cuda", world=2, ranks_started=0, output="")) == ["SMK025"]


@pytest.mark.parametrize(("error", "code", "command"), [
    ("ModuleNotFoundError: No module named 'ultralytics'", "SMK018",
     "/opt/py/bin/python -m pip install ultralytics"),
    ("ModuleNotFoundError: No module named 'torch'", "SMK019",
     "/opt/py/bin/python -m pip install ultralytics"),
    ("ImportError: cannot import name 'xyz' from 'torch.nn'", "SMK018",
     "/opt/py/bin/python -m pip install -U ultralytics"),
])
def test_an_import_failure_is_an_install_finding(error, code, command):
    events = [{"kind": "start", "t": 1.0}, {"kind": "error", "phase": "import", "error": error}]
    findings, _ = judge(_run(events=events, results_csv=None, weights=False, returncode=3))
    [finding] = findings
    assert finding.code.id == code
    assert command in [s.command for s in finding.remediation]
    assert "Traceback" not in json.dumps(finding.to_dict())


def test_a_training_error_and_a_deadline_are_reported():
    events = [*_events()[:3], {"kind": "error", "phase": "train", "error": "RuntimeError: boom"}]
    findings, _ = judge(_run(events=events, returncode=1, results_csv=None,
                             output="Traceback...\nRuntimeError: boom\n"))
    assert [f.code.id for f in findings] == ["SMK020"] and "boom" in findings[0].title
    assert _codes(_run(stopped_by="deadline", returncode=None)) == ["SMK003"]


# ------------------------------------------------------------------ options and launching

def test_trainer_option_defaults_to_builtin_and_is_checked():
    assert SmokeOptions().trainer == "builtin" and CHOICES["trainer"] == ("builtin",
                                                                         "ultralytics")
    with pytest.raises(OptionsError, match="--trainer 'keras'"):
        check_options(SmokeOptions(trainer="keras"))
    with pytest.raises(OptionsError, match="--scaling, --mode dp: only for --trainer builtin"):
        check_options(SmokeOptions(trainer="ultralytics", scaling=True, mode="dp"))
    check_options(SmokeOptions(trainer="builtin", scaling=True, mode="dp"))
    result = invoke("smoke", "--trainer", "keras")
    assert result.exit_code == 2
    assert "--trainer 'keras': choose one of builtin, ultralytics" in result.stderr


def test_driver_command_hands_gpus_to_ultralytics_ddp(tmp_path):
    options = SmokeOptions(python="/py", batch=4)
    gpu = driver_command(options, tmp_path, "cuda", 3, "tag-1")
    assert gpu[:2] == ["/py", str(Path(driver.__file__).resolve())]
    assert gpu[gpu.index("--device") + 1] == "0,1,2"
    assert gpu[gpu.index("--workers") + 1] == "1" and "tag-1" in gpu
    cpu = driver_command(options, tmp_path, "cpu", 1, "tag-1")
    assert cpu[cpu.index("--device") + 1] == "cpu" and cpu[cpu.index("--workers") + 1] == "0"
    env = driver_env(tmp_path)
    assert env["YOLO_OFFLINE"] == "1" and env["YOLO_CONFIG_DIR"] == str(tmp_path / "config")


def test_ultralytics_trains_on_the_gpus_the_user_made_visible():
    """Ultralytics writes its device= string into CUDA_VISIBLE_DEVICES: the doctor must hand
    on the entries the user chose, not 0..n-1 (which would be physical GPUs 0 and 1)."""
    assert ultralytics_devices(None, 2) == ("0,1", False)
    assert ultralytics_devices("", 2) == ("0,1", False)
    assert ultralytics_devices("2,3", 2) == ("2,3", False)
    assert ultralytics_devices("6, 2,5", 2) == ("6,2", False)
    uuids = {"GPU-8932f937-d72c-4106-c12f-20bd9faed9f6": 4,
             "GPU-1c9d8f5e-0b3e-4c35-9e54-7c2d0a3b6f10": 6}
    assert ultralytics_devices(",".join(uuids), 2, uuids.get) == ("4,6", True)
    for bad in ("MIG-5c5b8a3e-8b0e-5f2e-9a0e-0d4b7c3f1a21", "GPU-unknown"):
        with pytest.raises(DeviceChoiceError):
            ultralytics_devices(bad, 1, uuids.get)
    env = driver_env(Path("/tmp/run"), pci_order=True)
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


@pytest.mark.parametrize("world", [1, 2, 4, 8])
def test_every_rank_takes_the_same_steps_whatever_the_gpu_count(tmp_path, world):
    """Before: 32 images for every GPU count gave 24 steps per rank on 1 GPU, 6 on 8."""
    cmd = driver_command(SmokeOptions(python="/py"), tmp_path, "cuda", world, "t")
    images = int(cmd[cmd.index("--train-images") + 1])
    batch = int(cmd[cmd.index("--batch") + 1])
    assert optimizer_steps_per_rank(images, world, batch, EPOCHS) == 24
    assert optimizer_steps_per_rank(32, 8, 8, EPOCHS) == 6  # what a fixed set gave


@pytest.mark.spawns
def test_each_ddp_rank_ultralytics_starts_marks_itself(fake_ultralytics, tmp_path):
    """Ultralytics' DDP script builds the trainer from its class alone; callbacks added to
    the model never reached its ranks (ranks_started was 0 on every multi-GPU run)."""
    out = tmp_path / "out"
    out.mkdir()
    cmd = driver_command(SmokeOptions(python=sys.executable), out, "cuda", 2, "tag-ddp")
    env = driver_env(out)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (out / "ranks").iterdir()) == ["rank0", "rank1"]
    assert "from ddp_doctor_ultra_hooks import MarkedDetectionTrainer" in \
        (out / "_temp_ddp.py").read_text()
    assert len(list((out / "data" / "images" / "train").iterdir())) == 64


def test_doctor_note_only_when_ultralytics_is_installed():
    note = doctor_note({"ultralytics": [{"version": "8.4.190", "location": "/x"}]}, "/py")
    assert note is not None and "Ultralytics 8.4.190" in note
    assert "ddp-doctor smoke --trainer ultralytics --python /py" in note
    assert doctor_note({"torch": [{"version": "2.13.0"}]}, "/py") is None
    assert doctor_note(None, "/py") is None


# ------------------------------------------------------------------ the driver, supervised

FAKE_ULTRALYTICS = '''
"""A stand-in for Ultralytics: trains nothing, writes what the real one writes. On GPU
entries ("0,1") it trains as Ultralytics' DDP path does: a script that imports the
trainer class by module and name and builds it without callbacks, once per device."""
import os, subprocess, sys
from pathlib import Path
__version__ = "0.0.test"


class YOLO:
    def __init__(self, name):
        self.name, self.callbacks = name, {}
    def add_callback(self, event, fn):
        self.callbacks.setdefault(event, []).append(fn)
    def train(self, trainer=None, **kw):
        from ultralytics.models.yolo.detect import DetectionTrainer
        cls = trainer or DetectionTrainer
        devices = str(kw["device"]).split(",")
        if len(devices) > 1:
            script = Path(kw["project"]) / "_temp_ddp.py"
            script.write_text(f"from {cls.__module__} import {cls.__qualname__} as T\\n"
                              f"T(overrides={kw!r}).train()\\n")
            ranks = [subprocess.Popen([sys.executable, str(script)],
                                      env={**os.environ, "RANK": str(r)})
                     for r in range(len(devices))]
            for rank in ranks:
                rank.wait()
            return
        cls(overrides=kw, _callbacks=self.callbacks).train()
'''
FAKE_DETECT = '''
import os, time
from pathlib import Path
BEHAVIOUR = os.environ.get("FAKE_ULTRA", "good")


class DetectionTrainer:
    def __init__(self, cfg=None, overrides=None, _callbacks=None):
        self.args = dict(overrides or {})
        self.callbacks = {k: list(v) for k, v in (_callbacks or {}).items()}
    def add_callback(self, event, fn):
        self.callbacks.setdefault(event, []).append(fn)
    def train(self):
        kw = self.args
        for fn in self.callbacks.get("on_pretrain_routine_start", []):
            fn(self)
        if BEHAVIOUR == "hang":
            time.sleep(600)
        if os.environ.get("RANK", "0") != "0":
            return
        run = Path(kw["project"]) / kw["name"]
        seen = {k: os.environ.get(k) for k in ("YOLO_OFFLINE", "YOLO_CONFIG_DIR")}
        (Path(kw["project"]) / "env.txt").write_text(repr(seen) + " " + repr(kw))
        (run / "weights").mkdir(parents=True, exist_ok=True)
        with open(run / "results.csv", "w") as fh:
            fh.write("epoch,time,train/box_loss,train/cls_loss,train/dfl_loss\\n")
        for epoch in range(kw["epochs"]):
            with open(run / "results.csv", "a") as fh:
                fh.write(f"{epoch + 1},{0.1 * (epoch + 1)},{3.0 - 0.1 * epoch},1.0,1.0\\n")
            time.sleep(0.05)
        (run / "weights" / "last.pt").write_bytes(b"pt")
'''


@pytest.fixture
def fake_ultralytics(tmp_path, monkeypatch):
    """This interpreter with a stand-in ``ultralytics`` on its path (and the models dir)."""
    package = tmp_path / "site" / "ultralytics"
    (package / "cfg" / "models" / "11").mkdir(parents=True)
    (package / "cfg" / "models" / "11" / "yolo11.yaml").write_text("nc: 80\n")
    (package / "__init__.py").write_text(textwrap.dedent(FAKE_ULTRALYTICS))
    detect = package / "models" / "yolo" / "detect"
    detect.mkdir(parents=True)
    for folder in (package / "models", package / "models" / "yolo"):
        (folder / "__init__.py").write_text("")
    (detect / "__init__.py").write_text(textwrap.dedent(FAKE_DETECT))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    return tmp_path


@pytest.mark.spawns
def test_driver_runs_under_supervision_and_passes(fake_ultralytics, monkeypatch):
    monkeypatch.setenv("FAKE_ULTRA", "good")
    result = run_smoke(SmokeOptions(device="cpu", trainer="ultralytics",
                                    run_dir=str(fake_ultralytics / "run")), None, run_ultralytics)
    assert [f.code.id for f in result.findings] == [], result.findings
    data = result.data
    assert data["ok"] is True and data["trainer"] == "ultralytics"
    assert data["ultralytics"]["epochs_done"] == EPOCHS and data["ranks"] == 1
    assert data["ultralytics"]["weights_written"] is True
    assert data["ultralytics"]["time_to_first_epoch_s"] > 0
    assert data["proved"]["gpu_training"] is False
    seen = (fake_ultralytics / "run" / "env.txt").read_text()
    # Offline, with Ultralytics' settings in the run directory, AMP off, plots off.
    assert f"'YOLO_CONFIG_DIR': '{fake_ultralytics / 'run' / 'config'}'" in seen
    assert "'YOLO_OFFLINE': '1'" in seen
    assert "'amp': False" in seen and "'plots': False" in seen and "'device': 'cpu'" in seen


@pytest.mark.spawns
def test_the_cli_report_of_a_passed_run_is_valid_and_rendered(fake_ultralytics, monkeypatch):
    monkeypatch.setenv("FAKE_ULTRA", "good")
    proc = subprocess.run([sys.executable, "-m", "ddp_doctor", "smoke", "--trainer",
                           "ultralytics", "--device", "cpu", "--json", "-"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    jsonschema.Draft202012Validator(SCHEMA).validate(report)
    assert report["smoke"]["ultralytics"]["version"] == "0.0.test"
    assert report["checks"][-1]["summary"].startswith("Ultralytics, 1 rank on cpu, 6/6 epochs")
    console = invoke("smoke", "--trainer", "ultralytics", "--device", "cpu")
    assert console.exit_code == 0
    assert "Ultralytics 0.0.test, yolo11n.yaml at 64 px" in console.stdout
    assert "Time to first epoch" in console.stdout


@pytest.mark.spawns
def test_a_hung_trainer_is_stopped_at_the_deadline_and_killed(fake_ultralytics, monkeypatch):
    monkeypatch.setenv("FAKE_ULTRA", "hang")
    started = time.monotonic()
    result = run_smoke(SmokeOptions(device="cpu", trainer="ultralytics", timeout=20.0,
                                    run_dir=str(fake_ultralytics / "run")), None, run_ultralytics)
    # Stopped at its 20 s deadline, not left to hang: a generous margin (8x) over it for a
    # loaded machine; the event that proves it is stopped_by below.
    assert time.monotonic() - started < 8 * 20.0
    assert [f.code.id for f in result.findings] == ["SMK003"]
    assert result.data["stopped_by"] == "deadline"
    left = subprocess.run(["pgrep", "-f", str(fake_ultralytics / "run")], capture_output=True,
                          text=True, check=False)
    assert left.stdout.strip() == ""


@pytest.mark.spawns
def test_ultralytics_absent_here_is_the_install_finding():
    """This test venv has no Ultralytics: one finding with the install command, no traceback."""
    proc = subprocess.run([sys.executable, "-m", "ddp_doctor", "smoke", "--trainer",
                           "ultralytics", "--device", "cpu", "--json", "-"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    jsonschema.Draft202012Validator(SCHEMA).validate(report)
    [finding] = report["findings"]
    assert finding["code"] == "SMK018"
    commands = [s["command"] for s in finding["remediation"]]
    assert f"{sys.executable} -m pip install ultralytics" in commands
    assert "Traceback" not in proc.stdout + proc.stderr


# ------------------------------------------------------------------ the real Ultralytics

def _smoke(python: str, *args: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    proc = subprocess.run([sys.executable, "-m", "ddp_doctor", "smoke", "--trainer",
                           "ultralytics", "--python", python, *args, "--json", "-"],
                          capture_output=True, text=True, timeout=600, check=False)
    return proc, json.loads(proc.stdout)


@pytest.mark.slow
@pytest.mark.spawns
@pytest.mark.timeout(1500)  # the first one builds the venv (pip downloads about 5 GB)
def test_real_ultralytics_trains_on_the_cpu(ultralytics_python):
    started = time.monotonic()
    proc, report = _smoke(ultralytics_python, "--device", "cpu")
    wall = time.monotonic() - started
    smoke = report["smoke"]
    assert proc.returncode == 0, (report["findings"], proc.stderr[-2000:])
    assert smoke["ok"] is True and smoke["trainer"] == "ultralytics"
    u = smoke["ultralytics"]
    assert u["epochs_done"] == u["epochs"] == EPOCHS
    assert u["model_yaml"].startswith("yolo") and u["weights_written"] is True
    assert u["box_loss"][-1] < u["box_loss"][0]
    assert u["time_to_first_epoch_s"] > 0 and u["epoch_s"] > 0
    print(f"Ultralytics CPU smoke: {wall:.1f} s wall, {u}")


@pytest.mark.slow
@pytest.mark.spawns
@pytest.mark.timeout(1500)  # the first one builds the venv (pip downloads about 5 GB)
def test_real_ultralytics_on_cuda_without_gpus_is_no_gpu(ultralytics_python):
    proc, report = _smoke(ultralytics_python, "--device", "cuda")
    assert proc.returncode == 1
    assert [f["code"] for f in report["findings"]] == ["SMK012"]


def test_doctor_prints_the_note_when_the_facts_show_ultralytics(tmp_path):
    from tests.conftest import FACTS_DIR

    snapshot = json.loads((FACTS_DIR / "sandbox_cpu_container.json").read_text())
    without = tmp_path / "without.json"
    without.write_text(json.dumps(snapshot))
    snapshot["facts"]["python"]["value"]["packages"]["ultralytics"] = [
        {"version": "8.4.190", "location": "/tmp/dev/lib/python3.11/site-packages"}]
    with_it = tmp_path / "with.json"
    with_it.write_text(json.dumps(snapshot))
    result = invoke("doctor", "--facts", str(with_it), "--json", str(tmp_path / "r.json"))
    assert "Ultralytics 8.4.190 is installed: `ddp-doctor smoke --trainer ultralytics" \
        in result.stderr
    assert "Ultralytics" not in invoke("doctor", "--facts", str(without)).stderr


@pytest.mark.slow
@pytest.mark.spawns
@pytest.mark.timeout(1500)  # the first one builds the venv (pip downloads about 5 GB)
def test_run_of_yolo_train_with_a_wrong_device_string_is_diagnosed(ultralytics_python, tmp_path):
    """The user's own `yolo train ... device=7` under `ddp-doctor run`: Ultralytics refuses
    the device string before training, and the report quotes that refusal as evidence."""
    from ddp_doctor.smoke.ultralytics.driver import make_dataset
    from tests.conftest import FACTS_DIR

    data = make_dataset(tmp_path / "data")
    yolo = str(Path(ultralytics_python).parent / "yolo")
    env = {**os.environ, "YOLO_OFFLINE": "1", "YOLO_CONFIG_DIR": str(tmp_path / "cfg")}
    proc = subprocess.run(
        [sys.executable, "-m", "ddp_doctor", "run", "--facts",
         str(FACTS_DIR / "healthy_8x_h100_nvlink.json"), "--json", "-", "--",
         yolo, "train", "model=yolo11n.yaml", f"data={data}", "device=7", "epochs=1",
         "imgsz=64"], capture_output=True, text=True, timeout=600, check=False, env=env)
    assert proc.returncode == 1, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    codes = [f["code"] for f in report["findings"]]
    assert codes[0] == "RUN001"
    quoted = " ".join(e["value"] for f in report["findings"] for e in f["evidence"])
    assert "Invalid CUDA 'device=7' requested" in quoted
    # the refusal is read by the rule for an invalid device (LOG031), here as the consequence
    # of torch seeing no CUDA device on this GPU-less machine (LOG024)
    assert "LOG031" in quoted or "LOG031" in codes


# ------------------------------------------------------------------ what DDP needs

def test_a_missing_ddp_requirement_is_its_own_finding_with_the_install_command():
    run = _run(device="cuda", world=2, results_csv=None, weights=False, returncode=4,
               events=[*_events()[:2], {"kind": "error", "phase": "ddp_requirements",
                                        "missing": ["cloudpickle>=3.1.1"], "t": 103}])
    [finding] = judge(run)[0]
    assert finding.code.id == "SMK029" and finding.category.value == "package_conflict"
    assert finding.remediation[0].command == \
        "/opt/py/bin/python -m pip install 'cloudpickle>=3.1.1'"


def test_ddp_requirements_are_read_from_ultralytics_own_launch_code(tmp_path, monkeypatch):
    """Asked only of a version whose generate_ddp_file uses the module."""
    site = tmp_path / "site"
    utils = site / "ultralytics" / "utils"
    utils.mkdir(parents=True)
    (site / "ultralytics" / "__init__.py").write_text("")
    (utils / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(site))
    real_find_spec = driver.importlib.util.find_spec
    monkeypatch.setattr(driver.importlib.util, "find_spec",
                        lambda name: None if name == "cloudpickle" else real_find_spec(name))
    for name in [m for m in sys.modules if m.startswith("ultralytics")]:
        monkeypatch.delitem(sys.modules, name)
    (utils / "dist.py").write_text("def generate_ddp_file(trainer):\n"
                                   "    import cloudpickle\n    return ''\n")
    assert driver.missing_for_ddp() == ["cloudpickle>=3.1.1"]
    monkeypatch.delitem(sys.modules, "ultralytics.utils.dist")
    (utils / "dist.py").write_text("def generate_ddp_file(trainer):\n    return ''\n")
    assert driver.missing_for_ddp() == []


ULTRA_DDP_SCRIPT = '''
"""Build the marking trainer in this interpreter's Ultralytics and write its DDP script."""
import importlib, json, sys
from pathlib import Path

here, out = sys.argv[1], Path(sys.argv[2])
sys.path.insert(0, here)
driver = importlib.import_module("driver")
print(json.dumps({"missing": driver.missing_for_ddp()}), flush=True)
if sys.argv[3] == "check":
    raise SystemExit(0)
hooks = importlib.import_module("ddp_doctor_ultra_hooks")
from ultralytics.utils.dist import generate_ddp_file
data = driver.make_dataset(out / "data", train=16, val=4)
trainer = getattr(hooks, hooks.TRAINER_NAME)(overrides=dict(
    model="yolo11n.yaml", data=str(data), epochs=1, imgsz=64, batch=4, device="cpu",
    workers=0, project=str(out), name="run", exist_ok=True, plots=False, amp=False,
    val=False))
print(json.dumps({"script": generate_ddp_file(trainer)}), flush=True)
'''


@pytest.mark.slow
@pytest.mark.spawns
@pytest.mark.timeout(1500)  # the first one builds the venv (pip downloads about 5 GB)
def test_real_ultralytics_ddp_script_builds_a_trainer_that_marks_its_rank(
        ultralytics_python, tmp_path):
    """Ultralytics' own generate_ddp_file, then the script it wrote, run as one of its DDP
    ranks would run it (on the CPU here): the rank's trainer must leave its marker."""
    helper = tmp_path / "ddp.py"
    helper.write_text(ULTRA_DDP_SCRIPT)
    out = tmp_path / "out"
    (out / "ranks").mkdir(parents=True)
    env = {**driver_env(out), "YOLO_OFFLINE": "1"}
    here = str(Path(driver.__file__).resolve().parent)

    def call(*args: str) -> dict:
        proc = subprocess.run([ultralytics_python, str(helper), here, str(out), *args],
                              env=env, capture_output=True, text=True, timeout=600,
                              check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    check = call("check")
    if check["missing"]:  # 8.4 needs cloudpickle for DDP and does not declare it
        subprocess.run([ultralytics_python, "-m", "pip", "install", "-q", *check["missing"]],
                       check=True, timeout=600)
    script = Path(call("build")["script"])
    rank = subprocess.run([ultralytics_python, str(script)], env={**env, "RANK": "1"},
                          capture_output=True, text=True, timeout=600, check=False)
    assert rank.returncode == 0, rank.stderr[-3000:]
    assert (out / "ranks" / "rank1").is_file()
