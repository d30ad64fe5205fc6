"""Write docs/first-hour.md: the three paths a new user takes, run for real on this machine.

    python docs/first_hour.py            # rewrite docs/first-hour.md
    python docs/first_hour.py --check    # exit 1 when the page's commands or outcomes drifted

Each command is run with the installed ``ddp-doctor`` in a scratch folder, in a pipe (as CI
runs it) at 80 columns, and the page shows what it printed and its exit code, so the page
cannot promise what the tool does not do. The machine that writes the page is the one it
describes: the page says so at its top (this repository's CI has no GPU).

``--check`` regenerates into memory and compares what must not drift without anyone
noticing: the commands, their exit codes, the finding codes each one reported, and what
each printed, rendering included, with its numbers masked (times, sizes, dates, versions)
and its progress lines left out (they are stderr's, and their count depends on speed).
Whitespace is compared as one space: a line break moves when a number's width changes.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

PAGE = Path(__file__).resolve().parent / "first-hour.md"
WIDTH = "80"
# A real failure, as its reporter pasted it: Megatron-LM#343 (the rendezvous port was taken;
# https://github.com/NVIDIA/Megatron-LM/issues/343).
TRAIN_LOG = """\
MASTER_ADDR=localhost
MASTER_PORT=8514
File "/megatron/initialize.py", line 181, in _initialize_distributed
torch.distributed.init_process_group(
File "/root/miniconda3/lib/python3.8/site-packages/torch/distributed/distributed_c10d.py", \
line 520, in init_process_group
store, rank, world_size = next(rendezvous_iterator)
File "/root/miniconda3/lib/python3.8/site-packages/torch/distributed/rendezvous.py", line \
142, in _tcp_rendezvous_handler
store = TCPStore(result.hostname, result.port, world_size, start_daemon, timeout)
RuntimeError: Address already in use
"""
POLICY = """\
# ddp-doctor.toml: what this CI job requires of its runner
require-gpu-training = true
fail-on-warnings = ["SMK017"]
"""


@dataclass(frozen=True)
class Step:
    """One command of a path, and what the page says before it."""

    intro: str
    command: str


PATHS: tuple[tuple[str, str, tuple[Step, ...]], ...] = (
    ("Before training", "You are about to launch a multi-GPU job and want to know whether it "
     "will start.", (
         Step("Run the doctor: it gathers facts about the machine, runs every check, then "
              "trains a small YOLO detector with DDP the way torchrun would.", "ddp-doctor"),
         Step("Every finding has a code; `explain` says what it means and how to fix it.",
              "ddp-doctor explain DRV001"),
         Step("Check a launch plan before you use it: 2 GPUs and a global batch of 63.",
              "ddp-doctor check --gpus 2 --global-batch 63 -q"),
     )),
    ("CI pre-flight", "A pipeline step runs before the training job and stops it on a broken "
     "runner. Files for the CI system, the exit code for the step, progress on stderr.", (
         Step("The checks alone, strict (warnings fail), with JUnit and JSON for the CI "
              "system.", "ddp-doctor check --strict -q --junit preflight.xml --json "
                         "preflight.json"),
         Step("A policy file states what the job needs: here, proof that training ran on "
              "the GPUs.", "cat ddp-doctor.toml"),
         Step("The smoke job under that policy. On a runner whose GPUs are not usable it "
              "still trains on the CPU, but the pre-flight fails instead of passing.",
              "ddp-doctor smoke -q --junit smoke.xml"),
     )),
    ("Support ticket", "Something failed and you need help: a redacted bundle to attach, and "
     "a diagnosis of the log you have.", (
         Step("The policy file was the CI job's; the ticket is made without it.",
              "rm ddp-doctor.toml"),
         Step("A support bundle: reports, facts, nvidia-smi output, packages; secrets always "
              "removed, host and user names replaced with --anonymize.",
              "ddp-doctor doctor --no-smoke -q --bundle ticket.zip --anonymize"),
         Step("The failure log you have (here a real one, pasted in Megatron-LM#343).",
              "cat train.log"),
         Step("Diagnose it.", "ddp-doctor diagnose train.log"),
         Step("Whoever gets the ticket diagnoses the bundle: the machine's own report leads.",
              "ddp-doctor diagnose ticket.zip -q"),
     )),
)


@dataclass(frozen=True)
class Ran:
    command: str
    exit_code: int
    output: str

    @property
    def codes(self) -> list[str]:
        return sorted(set(re.findall(r"\b(?:[A-Z]{3}\d{3}|DIAG\d{3})\b", self.output)))


def _run(command: str, cwd: Path, ddp_doctor: str) -> Ran:
    argv = command.split()
    if argv[0] == "ddp-doctor":
        argv[0] = ddp_doctor
    env = {**os.environ, "COLUMNS": WIDTH, "TERM": "dumb", "NO_COLOR": "1"}
    env.pop("GITHUB_ACTIONS", None)
    proc = subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=600, check=False)
    text = proc.stdout.replace(str(cwd), "~/project")
    # The interpreter's folder is this machine's; a reader's venv is somewhere else.
    text = text.replace(str(Path(ddp_doctor).resolve().parent.parent), "~/venv")
    text = text.replace(str(Path(ddp_doctor).parent.parent), "~/venv")
    return Ran(command, proc.returncode, text.rstrip("\n"))


def run_all(ddp_doctor: str) -> list[list[Ran]]:
    with tempfile.TemporaryDirectory(prefix="ddp-doctor-first-hour-") as folder:
        cwd = Path(folder)
        (cwd / "train.log").write_text(TRAIN_LOG, encoding="utf-8")
        return [[_run_step(step, cwd, ddp_doctor) for step in steps]
                for _, _, steps in PATHS]


def _run_step(step: Step, cwd: Path, ddp_doctor: str) -> Ran:
    """A step as the page shows it: the files it shows or removes are real, so every
    change to the folder between two commands is a step of its own on the page."""
    if step.command == "cat ddp-doctor.toml":  # the policy the next step reads
        (cwd / "ddp-doctor.toml").write_text(POLICY, encoding="utf-8")
        return Ran(step.command, 0, POLICY.rstrip("\n"))
    if step.command == "cat train.log":
        return Ran(step.command, 0, TRAIN_LOG.rstrip("\n"))
    if step.command == "rm ddp-doctor.toml":
        (cwd / "ddp-doctor.toml").unlink()
        return Ran(step.command, 0, "")
    return _run(step.command, cwd, ddp_doctor)


def render(results: list[list[Ran]]) -> str:
    lines = [
        "# The first hour with ddp-doctor",
        "",
        "<!-- Generated by `python docs/first_hour.py` from real runs; do not edit by hand. "
        "`python docs/first_hour.py --check` (run by the test suite) fails when the commands, "
        "their exit codes, the codes they report or what they print (numbers and progress "
        "lines masked) drift from this page. -->",
        "",
        "Three paths, each as the commands a new user types and what they print. The "
        f"machine that ran them has no GPU ({platform.system()} {platform.machine()}, "
        "Python " + platform.python_version() + ", the CPU build of torch): the output shows "
        "what ddp-doctor says there, which is also what a GPU runner with a broken driver "
        "looks like. Output is captured in a pipe at 80 columns, stderr included (progress "
        "and file confirmations go there, so stdout stays the report's).",
        "",
    ]
    for (title, why, steps), ran in zip(PATHS, results):
        lines += [f"## {title}", "", why, ""]
        for step, result in zip(steps, ran):
            shown = [result.output] if result.output else []
            lines += [step.intro, "", "```console", f"$ {result.command}", *shown,
                      f"[exit code {result.exit_code}]", "```", ""]
    return "\n".join(lines)


# Lines whose count and numbers depend on the machine's speed: progress on stderr.
_PROGRESS = re.compile(r"^ddp-doctor: (?:gathering |done in |smoke: |asking torch )",
                       re.MULTILINE)
_NUMBER = re.compile(r"\d+(?:[.,:]\d+)*")


def masked(output: str) -> str:
    """What a command printed, as compared: progress lines out, every number 0, all
    whitespace one space (a wider number moves a line break)."""
    kept = "\n".join(line for line in output.splitlines() if not _PROGRESS.match(line))
    return " ".join(_NUMBER.sub("0", kept).split())


def page_results(text: str) -> list[Ran]:
    """The commands, outputs and exit codes the page shows, in order."""
    found = []
    for block in re.findall(r"```console\n(.*?)\n```", text, re.S):
        lines = block.split("\n")
        command, code = lines[0].removeprefix("$ "), re.fullmatch(r"\[exit code (\d+)\]",
                                                                  lines[-1])
        if code is not None:
            found.append(Ran(command, int(code.group(1)), "\n".join(lines[1:-1])))
    return found


def drift(shown: list[Ran], now: list[Ran]) -> list[str]:
    """How the page differs from today's runs: one line per difference, none when equal."""
    found = []
    if len(shown) != len(now):
        found.append(f"the page shows {len(shown)} commands, the script runs {len(now)}")
    for before, after in zip(shown, now):
        if (before.command, before.exit_code, before.codes) != \
                (after.command, after.exit_code, after.codes):
            found.append(f"`{after.command}`: the page has exit code {before.exit_code} and "
                         f"{before.codes}, now {after.exit_code} and {after.codes}")
        elif masked(before.output) != masked(after.output):
            old, new = masked(before.output), masked(after.output)
            at = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b),
                      min(len(old), len(new)))
            found.append(f"`{after.command}` prints otherwise: page ...{old[at - 40:at + 60]!r}"
                         f"... now ...{new[at - 40:at + 60]!r}...")
    return found


def main(argv: list[str]) -> int:
    # The ddp-doctor installed beside this interpreter (the venv running the script), else
    # the one on PATH.
    beside = Path(sys.executable).parent / "ddp-doctor"
    ddp_doctor = str(beside) if beside.exists() else shutil.which("ddp-doctor") or "ddp-doctor"
    results = run_all(ddp_doctor)
    if "--check" in argv:
        found = drift(page_results(PAGE.read_text(encoding="utf-8")),
                      [r for path in results for r in path])
        for line in found:
            print(f"drifted: {line}", file=sys.stderr)
        if found:
            print("run: python docs/first_hour.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(render(results) + "\n", encoding="utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
