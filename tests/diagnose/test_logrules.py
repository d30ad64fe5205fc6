"""The log rules' contract with the diagnose engine: examples match, anchors gate every
line a rule can match, symptoms point at real codes, benign output matches nothing, and
every category that shows up in logs has a rule."""

from __future__ import annotations

import re
from itertools import islice

import pytest

from ddp_doctor.categories import Category
from ddp_doctor.diagnose.line_gate import LineGate
from ddp_doctor.diagnose.synthetic import noise_lines
from ddp_doctor.logrules import (
    ANY_ERROR,
    CATEGORY_PRECEDENCE,
    GATES,
    LOG_CODES,
    RULES,
    folded,
    match_text,
)
from ddp_doctor.model import Severity
from tests.conftest import FIXTURES

IDS = [r.code.id for r in RULES]


def alternatives(pattern: str) -> list[str]:
    """The top-level alternatives ``rx`` joined (each wrapped in ``(?:...)``)."""
    return pattern[3:-1].split(")|(?:")


def literal(alternative: str) -> str:
    """The text an alternative spells out, with regex syntax reduced to spaces."""
    text = re.sub(r"\\s[*+?]?|\\b|\\W[*+?]?|\[\^\\n\]\*", " ", alternative)
    text = re.sub(r"\\(.)", r"\1", text)
    return text.lower()


# The gates whose letters pick lines of a long log's noise, and why each is worth that
# cost: the scan then tests them exactly on every such line (diagnose/line_gate.py).
NOISY_GATES = {
    "cud": "NCCL's 'cudaDev' in its Init COMPLETE lines; CUDA and cuDNN are the main sources",
    ".cc:": "its letters 'cc' are in every NCCL line; NCCL's error trace has no other gate",
}


def test_gates_pick_no_line_of_a_long_logs_noise():
    """What bounds the number of gates: the scan finds all of them in one pass over a
    chunk's distinct lines, so a gate costs a few microseconds per chunk unless its letters
    pick the lines a long log is made of (progress bars, metric rows, NCCL INFO lines),
    which it then has to test one by one. A new gate must pick none of them, or be listed
    in NOISY_GATES with its reason."""
    lines = list(islice(noise_lines(), 4000))
    chunk = "".join(lines).encode()
    for gate in GATES:
        _, _, picked = LineGate([[gate.encode()]]).select(chunk)
        assert not picked[0] or gate in NOISY_GATES, (gate, lines[picked[0][0]])
    assert set(NOISY_GATES) <= set(GATES)


def test_gates_are_lowercase_and_distinct():
    assert len(set(GATES)) == len(GATES)
    assert all(g == g.lower() and g.strip() == g and g for g in GATES)
    assert "nccl" not in GATES  # NCCL INFO lines are floods



def test_no_gate_holds_a_digit():
    """The scan skips a line equal to one that said nothing but for its numbers only while
    every gate is digit-free (scan.py _digit_free_gates): a gate with a digit ("p2p or ib")
    made the realistic throughput log 1.3 times slower."""
    assert [g for g in GATES if any(c.isdigit() for c in g)] == []


@pytest.mark.parametrize("rule", RULES, ids=IDS)
def test_rule_shape(rule):
    assert rule.anchors and set(rule.anchors) <= set(GATES)
    assert rule.pattern.flags & re.IGNORECASE
    assert rule.examples, "every rule needs at least one real example line"
    assert rule.code.what and rule.code.why and rule.code.fix and rule.code.docs_url


@pytest.mark.parametrize("rule", RULES, ids=IDS)
def test_examples_match_and_hold_an_anchor(rule):
    for example in rule.examples:
        assert "\n" not in example
        assert rule.pattern.search(example), example
        assert any(a in example.lower() for a in rule.anchors), example


@pytest.mark.parametrize("rule", RULES, ids=IDS)
def test_every_alternative_spells_one_of_its_anchors(rule):
    """The engine tries a rule only on lines with one of its anchors: an alternative that
    could match without one would silently never fire."""
    for alt in alternatives(rule.pattern.pattern):
        assert any(a in literal(alt) for a in rule.anchors), alt


def test_codes_are_unique_and_numbered_from_log001():
    ids = [c.id for c in LOG_CODES]
    assert len(ids) == len(set(ids))
    assert ids == [f"LOG{n:03d}" for n in range(1, len(ids) + 1)]


def test_symptom_of_names_existing_codes_and_alternatives_name_categories():
    known = {c.id for c in LOG_CODES}
    categories = {c.value for c in Category}
    for rule in RULES:
        for target in rule.symptom_of:
            assert target == ANY_ERROR or (target in known and target != rule.code.id), target
        for alternative in rule.alternatives:
            assert alternative.split(":")[0] in categories, alternative
        if rule.alternatives:
            assert rule.decide, f"{rule.code.id} names alternatives but not how to decide"


def test_every_category_seen_in_logs_has_an_error_rule():
    covered = {r.code.category for r in RULES if r.code.severity is Severity.ERROR}
    # node_mismatch is judged across hosts (nodes/), never from one line.
    # performance_degraded is judged from facts (links, clocks, copies), never from one line.
    # command_failed and requirement_unchecked name how ddp-doctor's own run or policy ended.
    assert set(Category) - covered <= {Category.UNKNOWN, Category.NODE_MISMATCH,
                                       Category.PERFORMANCE_DEGRADED, Category.COMMAND_FAILED,
                                       Category.REQUIREMENT_UNCHECKED}
    assert set(CATEGORY_PRECEDENCE) == set(Category)


def test_steps_with_commands_are_single_pasteable_lines():
    for rule in RULES:
        for step in (*rule.steps, *rule.decide):
            assert step.text
            if step.command:
                assert "\n" not in step.command


# Realistic output of healthy runs: YOLO banners and progress, NCCL INFO, pip, nvidia-smi,
# torchrun chatter, UserWarnings. No error rule may fire on any of it.
BENIGN = (FIXTURES / "logs" / "benign.log").read_text(encoding="utf-8")


def test_benign_output_matches_no_error_rule():
    matches = [m for m in match_text(BENIGN) if m.rule.code.severity is Severity.ERROR]
    assert matches == [], [(m.rule.code.id, m.line) for m in matches]


def test_benign_output_line_by_line_matches_nothing():
    """Context findings (INFO) may read a healthy job's lines: they say what NCCL does, not
    that anything failed (LOG115: "P2P is disabled between connected GPUs", which a working
    PCIe machine prints)."""
    for line in BENIGN.splitlines():
        hits = [r.code.id for r in RULES
                if r.pattern.search(line) and r.code.severity is not Severity.INFO]
        assert hits == [], (line, hits)


def first(text: str) -> str:
    return match_text(text)[0].rule.code.id


@pytest.mark.parametrize(("text", "code"), [
    # NCCL's generic wrapper is read through the WARN line that names the cause.
    ("NCCL WARN Error while creating shared memory segment /dev/shm/nccl-hBPyzf (size 9637888)\n"
     "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1269, unhandled system error, NCCL "
     "version 2.7.8", "LOG042"),
    ("NCCL WARN Bootstrap : no socket interface found\n"
     "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:825, unhandled system error", "LOG043"),
    ("transport/p2p.cc:238 NCCL WARN failed to open CUDA IPC handle : 217 peer access is not "
     "supported between these two devices\n"
     "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:784, unhandled cuda error", "LOG045"),
    ("NCCL WARN Cuda failure 'out of memory'\n"
     "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:784, unhandled cuda error", "LOG005"),
    # cuDNN's handle failure after an out-of-memory is the out-of-memory.
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB\n"
     "RuntimeError: cuDNN error: CUDNN_STATUS_INTERNAL_ERROR", "LOG005"),
    ("Could not load library libcudnn_cnn_infer.so.8. Error: libcuda.so: cannot open shared "
     "object file: No such file or directory", "LOG018"),
    # A watchdog timeout after a rank's death is about the death.
    ("[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
     "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=812, "
     "OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600087 milliseconds before timing out.",
     "LOG005"),
    ("  exitcode  : -9 (pid: 14750)\n"
     "torch.distributed.DistNetworkError: Connection reset by peer", "LOG007"),
    ("[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, "
     "OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600087 "
     "milliseconds before timing out.\n"
     "Some NCCL operations have failed or timed out.", "LOG046"),
    # YOLO's device message is the consequence of torch having no CUDA.
    ("UserWarning: CUDA initialization: The NVIDIA driver on your system is too old (found "
     "version 11040).\nValueError: Invalid CUDA 'device=0' requested. Use 'device=cpu'\n"
     "torch.cuda.is_available(): False", "LOG011"),
    ("ValueError: Invalid CUDA 'device=0,1' requested. Use 'device=cpu'\n"
     "torch.cuda.is_available(): True\ntorch.cuda.device_count(): 1", "LOG031"),
    ("OSError: [WinError 1455] The paging file is too small for this operation to complete. "
     "Error loading \"C:\\Python\\lib\\site-packages\\torch\\lib\\cudnn_cnn_infer64_8.dll\" "
     "or one of its dependencies.", "LOG039"),
    ("[W socket.cpp:601] [c10d] The client socket has failed to connect to [node1]:29500 "
     "(errno: 111 - Connection refused).\n"
     "torch.distributed.DistNetworkError: The client socket has timed out after 1800s while "
     "trying to connect to (node1, 29500).", "LOG052"),
    ("[W socket.cpp:426] [c10d] The server socket has failed to listen on [::]:29500 (errno: "
     "98 - Address already in use).\ntorch.distributed.DistNetworkError: The client socket "
     "has timed out after 900s while trying to connect to (127.0.0.1, 29500).", "LOG001"),
    ("RuntimeError: CUDA error: an illegal memory access was encountered\n"
     "NVRM: Xid (PCI:0000:3b:00): 48, pid=1234, DBE (double bit error) ECC error", "LOG017"),
])
def test_root_cause_comes_before_its_symptoms(text, code):
    assert first(text) == code


def test_survivor_messages_alone_still_give_a_finding():
    matches = match_text("torch.distributed.DistNetworkError: Connection reset by peer")
    assert [m.rule.code.id for m in matches] == ["LOG049"]
    assert not folded(matches[0].rule, {"LOG049"})


def test_two_generic_symptoms_do_not_explain_each_other_away():
    rule = next(r for r in RULES if r.code.id == "LOG004")
    assert not folded(rule, {"LOG004", "LOG003"})
    assert folded(rule, {"LOG004", "LOG042"})


def test_nccl_refusal_is_network_and_store_refusal_is_rendezvous():
    assert first("node:1:2 [0] NCCL INFO Call to connect returned Connection refused, "
                 "retrying") == "LOG043"
    assert first("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:799] connect "
                 "[127.0.1.1]:31863: Connection refused") == "LOG053"
    assert match_text("requests.exceptions.ConnectionError: HTTPSConnectionPool(host='github."
                      "com', port=443): Max retries exceeded (Caused by NewConnectionError("
                      "'[Errno 111] Connection refused'))") == []


@pytest.mark.parametrize(("line", "code"), [
    ("ModuleNotFoundError: No module named 'torch'", "LOG021"),
    # not torch's absence: a package missing from the environment (the python catalogue)
    ("ModuleNotFoundError: No module named 'torchvision'", "LOG132"),
    ("ImportError: /site-packages/torchvision/_C.so: undefined symbol: _ZN2at4_ops", "LOG025"),
    ("ImportError: /site-packages/torch/lib/libtorch_cuda.so: undefined symbol: ncclCommRegister",
     "LOG022"),
    ("RuntimeError: CUDA error: no kernel image is available for execution on the device",
     "LOG028"),
    ("RuntimeError: Distributed package doesn't have NCCL built in", "LOG050"),
    ("AssertionError: Torch not compiled with CUDA enabled", "LOG023"),
    ("Killed", "LOG038"),
    ("NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception", "LOG035"),
    ("NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.", "LOG017"),
    # found by review: other launchers' and libraries' wording of known causes
    ("[ERROR] [launch.py:325:sigkill_handler] ['python', 'train.py'] exits with return code "
     "= -9", "LOG007"),
    ("RuntimeError: Unable to find a valid cuDNN algorithm to run convolution", "LOG037"),
    ("RuntimeError: No CUDA GPUs are available", "LOG030"),
    ("ImportError: /usr/lib/x86_64-linux-gnu/libstdc++.so.6: version `GLIBCXX_3.4.30' not "
     "found (required by /opt/venv/lib/python3.11/site-packages/torch/lib/libtorch_python.so)",
     "LOG022"),
    ("Failed to initialize NVML: Unknown Error", "LOG014"),
    ("nvidia-container-cli: initialization error: load library failed: libnvidia-ml.so.1: "
     "cannot open shared object file: no such file or directory: unknown", "LOG010"),
    ("UserWarning: Plan failed with a cudnnException: CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: "
     "cudnnFinalize Descriptor Failed cudnn_status: CUDNN_STATUS_NOT_SUPPORTED (Triggered "
     "internally at ../aten/src/ATen/native/cudnn/Conv_v8.cpp:919.)", None),
    ("RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you "
     "passed in a non-contiguous input.", "LOG034"),
])
def test_specific_lines(line, code):
    matches = match_text(line)
    assert (matches[0].rule.code.id if matches else None) == code


# Each rule added for what an error means, on the real line(s) of its thread (the case file
# in tests/data/logs names the thread) and on the same core in other wording.
@pytest.mark.parametrize(("text", "code"), [
    # torchvision's CUDA check, wrapped by the terminal before "CUDA versions"
    # (acheong08/Diffusion-ColabUI#108)
    ("RuntimeError: Detected that PyTorch and torchvision were compiled with different\n"
     "CUDA versions. PyTorch has CUDA Version=11.7 and torchvision has CUDA \n", "LOG025"),
    # cudaErrorInsufficientDriver in ethminer's words (ethereum-mining/ethminer#1640)
    ("CUDA error: Insufficient CUDA driver: 9020", "LOG011"),
    # the NGC container banner, wrapped before the detected version (ultralytics/yolov5#1232)
    ("ERROR: This container was built for NVIDIA Driver Release 455.23 or later, but\n"
     "       version 450.66 was detected and compatibility mode is UNAVAILABLE.", "LOG011"),
    # torch < 1.8's wording of the missing process group (open-mmlab/mmsegmentation#192)
    ("AssertionError: Default process group is not initialized", "LOG056"),
    # cudaErrorECCUncorrectable inside ggml's JSON (ollama/ollama#4226)
    ('{"error":{"message":"timed out waiting for llama runner to start:CUDA error:uncorrectable '
     'ECC error encountered\\n current device:0', "LOG017"),
    # the kernel's fatal PCIe AER report is hardware, not SIGBUS (rwth-i6/returnn#1500)
    ("pcieport 0000:00:03.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction "
     "Layer, (Requester ID)", "LOG017"),
    ("pcieport 0000:00:03.0: AER: Multiple Uncorrected (Fatal) error received: 0000:00:03.0",
     "LOG017"),
    ("pcieport 0000:00:1c.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, "
     "(Receiver ID)", None),
    ("Bus error (core dumped)", "LOG008"),
    # accelerate's own port check (NovaSearch-Team/RAG-Retrieval#50)
    ("ConnectionError: Tried to launch distributed communication on port `29500`, but another "
     "process is utilizing it. Please specify a different port", "LOG001"),
    # the watchdog's C++ frame when its message was cut (jpata/particleflow#390)
    ("frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::"
     "duration<long, std::ratio<1l, 1000l> > >) + 0x1d2 (0x1554e9e0f8f2 in /envs/mlpf/lib/"
     "python3.11/site-packages/torch/lib/libtorch_cuda.so)", "LOG047"),
    # Docker without an NVIDIA runtime, for `--gpus` and for a compose file's driver: nvidia
    # (AbdBarho/stable-diffusion-webui-docker#130)
    ('Error response from daemon: could not select device driver "nvidia" with capabilities: '
     '[[gpu]]', "LOG071"),
    ('docker: Error response from daemon: could not select device driver "" with '
     'capabilities: [[gpu]].', "LOG071"),
    # libnvidia-container on a cgroup v2 host (NVIDIA/nvidia-docker#1486, #1447)
    ("docker: Error response from daemon: OCI runtime create failed: container_linux.go:367: "
     "starting container process caused: process_linux.go:495: container init caused: Running "
     "hook #1:: error running hook: exit status 1, stdout: , stderr: nvidia-container-cli: "
     "container error: cgroup subsystem devices not found: unknown.", "LOG072"),
    ("nvidia-container-cli: container error: failed to get device cgroup mount path: relative "
     "path in absolute URI: unknown", "LOG072"),
    # NVML's return codes where only the number is printed (ollama/ollama#1898): 9 is
    # NVML_ERROR_DRIVER_NOT_LOADED, 17 NVML_ERROR_OPERATING_SYSTEM; others are not these
    ("gpu.go:39: CUDA not detected: nvml vram init failure: 9", "LOG009"),
    ("gpu.go:39: CUDA not detected: nvml vram init failure: 17", "LOG020"),
    ("gpu.go:39: CUDA not detected: nvml vram init failure: 999", None),
    # NCCL's error trace, first frame in its network code (NVIDIA/nccl#1000)
    ("dso-s1-r1-a100-03:2330:2658 [2] NCCL INFO misc/socket.cc:567 -> 2", "LOG073"),
    ("node1:2330:2658 [2] NCCL INFO transport/net_ib.cc:1012 -> 6", "LOG073"),
    ("node1:2330:2658 [2] NCCL INFO init.cc:1236 -> 2", None),  # only passed the error on
    # gloo's file:line is not NCCL's trace
    ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by "
     "peer [10.0.0.2]:40283", "LOG049"),
    # moby's missing GPU device driver as docker-compose v1 prints it
    # (easydiffusion/easydiffusion#27); a service that fails for another reason is not it
    ('ERROR: for stability-ai  Cannot start service stability-ai: could not select device '
     'driver "" with capabilities: [[gpu]]', "LOG071"),
    ("ERROR: for web  Cannot start service web: driver failed programming external "
     "connectivity on endpoint web", None),
    # libnvidia-container's NVIDIA_REQUIRE_CUDA check (Xilinx/Vitis-AI#103); a brand
    # constraint alone says nothing of the driver's age
    ('docker: Error response from daemon: OCI runtime create failed: container_linux.go:345: '
     'starting container process caused "process_linux.go:430: container init caused '
     '\\"process_linux.go:413: running prestart hook 0 caused \\\\\\"error running hook: '
     'exit status 1, stdout: , stderr: nvidia-container-cli: requirement error: unsatisfied '
     'condition: cuda>=10.0\\\\\\\\n\\\\\\"\\"": unknown.', "LOG074"),
    ("nvidia-container-cli: requirement error: unsatisfied condition: brand = tesla", None),
    # its driver query failing (docker/for-win#10379)
    ("docker: Error response from daemon: OCI runtime create failed: container_linux.go:370: "
     "starting container process caused: process_linux.go:459: container init caused: Running "
     "hook #0:: error running hook: exit status 1, stdout: , stderr: nvidia-container-cli: "
     "initialization error: driver error: failed to process request: unknown.", "LOG075"),
    # a WSL-mode library mount colliding with the image's own copy
    # (NVIDIA/nvidia-container-toolkit#371); the versioned file a Linux host mounts is not it:
    # that is the image's own driver files on a Linux host (the `container` catalogue, LOG123)
    ("nvidia-container-cli: mount error: file creation failed: /var/lib/docker/overlay2/6011c57d"
     "/merged/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1: file exists: unknown.", "LOG076"),
    ("nvidia-container-cli: mount error: file creation failed: /var/lib/docker/overlay2/6011c57d"
     "/merged/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.129.03: file exists: unknown.",
     "LOG123"),
    # torch's capability warning wrapped before "PyTorch" (jhj0517/Whisper-WebUI#653); the
    # supported-list line alone does not name the GPU
    ("NVIDIA GeForce GTX 1080 Ti with CUDA capability sm_61 is not compatible with the current",
     "LOG028"),
    ("NVIDIA GeForce GTX 1080 Ti with CUDA capability sm_61 is not compatible with the current "
     "driver", None),
    # the DataLoader's SIGBUS with "error" wrapped to the next line
    # (fastai/docker-containers#21); another signal is not shared memory
    ("RuntimeError: DataLoader worker (pid 47) is killed by signal: Bus", "LOG040"),
    ("RuntimeError: DataLoader worker (pid 47) is killed by signal: Busy", None),
])
def test_rules_read_each_errors_stable_core(text, code):
    matches = match_text(text)
    assert (matches[0].rule.code.id if matches else None) == code


def test_every_step_command_is_valid_shell():
    """A `$` line must paste into a shell: Python statements belong in the step's text."""
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    from ddp_doctor.diagnose.compose import ATTACH_STEPS
    from ddp_doctor.diagnose.context import HANG_STEPS, WSL_STEPS

    steps = [s for rule in RULES for s in (*rule.steps, *rule.decide)]
    steps += [*ATTACH_STEPS, *HANG_STEPS, *WSL_STEPS]
    commands = sorted({step.command for step in steps if step.command})

    def parse(command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-n", "-c", command], capture_output=True, text=True)

    # one bash per command, several at a time: each is mostly process start-up
    with ThreadPoolExecutor(max_workers=8) as pool:
        for command, checked in zip(commands, pool.map(parse, commands)):
            assert checked.returncode == 0, (command, checked.stderr)
