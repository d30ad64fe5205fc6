"""The recipes of docs/ci.md, run as written: GitHub Actions, GitLab CI, a Slurm pre-flight.

Each block marked ``<!-- test: NAME -->`` is taken from the Markdown and run in a temporary
directory with the installed ``ddp-doctor`` on PATH. The only change: ``ddp-doctor check``
gets ``--facts`` with a recorded machine, and ``ddp-doctor smoke`` runs a small CPU job,
since no GPU is here (docs/ci.md says so). The CI systems themselves are stood in for by
what they do with the recipe: GitHub runs a ``run:`` step with ``bash -e`` and sets
``GITHUB_ACTIONS``/``GITHUB_STEP_SUMMARY``; GitLab runs each ``script`` line in order and
stops at the first failure; Slurm's ``srun`` runs the command once per task with the
``SLURM_*`` variables set and exits with the highest task exit code (a shim here).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from tests.conftest import FACTS_DIR
from tests.support.smoke import short_tmpdir

DOC = Path(__file__).resolve().parents[2] / "docs" / "ci.md"
BIN = Path(sys.executable).parent
HEALTHY = FACTS_DIR / "healthy_8x_h100_nvlink.json"
SMALL_SHM = FACTS_DIR / "container_64mb_shm.json"  # HST001: /dev/shm 64 MiB in Docker
NO_DRIVER = FACTS_DIR / "no_driver.json"  # DRV001


def doc_block(name: str) -> str:
    """The fenced block right after ``<!-- test: NAME -->`` in docs/ci.md."""
    text = DOC.read_text(encoding="utf-8")
    found = re.search(rf"<!-- test: {name} -->\n```[a-z]*\n(.*?)\n```", text, re.S)
    assert found, f"docs/ci.md has no block marked test: {name}"
    return found.group(1) + "\n"


def replay(command: str, facts: Path) -> str:
    """The documented command with this machine's GPU replaced by a recorded one."""
    command = command.replace("ddp-doctor check", f"ddp-doctor check --facts {facts}")
    return command.replace("ddp-doctor smoke",
                           "ddp-doctor smoke --device cpu --nproc 1 --steps 20 --imgsz 64")


def ci_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GITHUB_", "SLURM_", "MASTER_"))}
    env.update(PATH=f"{tmp_path / 'shims'}{os.pathsep}{BIN}{os.pathsep}{env.get('PATH', '')}",
               COLUMNS="100", HOME=str(tmp_path), **extra)
    (tmp_path / "shims").mkdir(exist_ok=True)
    return env


def run_script(script: str, cwd: Path, env: dict[str, str], shell: tuple[str, ...],
               timeout: float = 120) -> subprocess.CompletedProcess[str]:
    path = cwd / "step.sh"
    path.write_text(script, encoding="utf-8")
    return subprocess.run([*shell, str(path)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


def assert_reports(workdir: Path, junit: str, json_path: str, exit_code: int, *codes: str):
    """The JSON and JUnit files exist, agree with the exit code and name the codes."""
    report = json.loads((workdir / json_path).read_text(encoding="utf-8"))
    assert report["exit_code"] == exit_code
    assert [f["code"] for f in report["findings"] if f["severity"] == "error"] == list(codes)
    root = ET.parse(workdir / junit).getroot()
    assert root.tag in ("testsuites", "testsuite")
    failures = [el for el in root.iter() if el.tag in ("failure", "error")]
    failed_text = " ".join(f"{el.get('message', '')} {el.text or ''}" for el in failures)
    assert bool(failures) == bool(codes)
    for code in codes:
        assert code in failed_text


# --- GitHub Actions -------------------------------------------------------------------------

def github_workflow() -> dict:
    workflow = yaml.safe_load(doc_block("github"))
    (job,) = workflow["jobs"].values()
    return job


def test_github_recipe_is_a_workflow_that_installs_checks_keeps_reports_then_trains():
    steps = github_workflow()["steps"]
    names = [s.get("name") or s.get("uses") for s in steps]
    assert names == ["actions/checkout@v4", "Install ddp-doctor", "GPU pre-flight",
                     "Keep the ddp-doctor reports", "Train"]
    assert steps[1]["run"] == "python -m pip install ./ddp-doctor"  # a path, never the PyPI
    # name: "ddp-doctor" on PyPI is an unrelated project
    upload = steps[3]
    assert upload["uses"].startswith("actions/upload-artifact@")
    assert upload["if"] == "always()"  # the reports matter most when the check failed
    assert upload["with"]["path"].split() == ["ddp-doctor.xml", "ddp-doctor.json"]
    assert "if" not in steps[4]  # training runs only after a passing pre-flight


@pytest.mark.spawns
@pytest.mark.parametrize("facts, exit_code, codes", [
    (SMALL_SHM, 1, ("HST001",)),
    (HEALTHY, 0, ()),
])
def test_github_preflight_step_runs_annotates_and_summarises(tmp_path, facts, exit_code, codes):
    job = github_workflow()
    (step,) = [s for s in job["steps"] if s.get("name") == "GPU pre-flight"]
    summary = tmp_path / "step_summary.md"
    summary.write_text("Output of an earlier tool in this step.\n", encoding="utf-8")
    env = ci_env(tmp_path, GITHUB_ACTIONS="true", GITHUB_STEP_SUMMARY=str(summary))
    work = tmp_path / "checkout"
    work.mkdir()
    # GitHub runs a run: step with bash -e when no shell is given.
    result = run_script(replay(step["run"], facts), work, env, ("bash", "-e"))
    assert result.returncode == exit_code, result.stdout + result.stderr
    # The upload step's paths are exactly the files the pre-flight wrote.
    for path in job["steps"][3]["with"]["path"].split():
        assert (work / path).is_file(), path
    assert_reports(work, "ddp-doctor.xml", "ddp-doctor.json", exit_code, *codes)

    annotations = [line for line in result.stdout.splitlines() if line.startswith("::")]
    assert [line.split("::")[1].split(" title=")[0] for line in annotations] == \
        ["error"] * len(codes)
    for line, code in zip(annotations, codes):
        assert line.startswith(f"::error title={code} ")
        assert "%0AFix: " in line and "\n" not in line
    assert "::" not in result.stderr

    text = summary.read_text(encoding="utf-8")
    assert text.startswith("Output of an earlier tool in this step.\n## ")  # appended
    verdict = "problems found" if exit_code else "no problems found"
    assert f"ddp-doctor: {verdict}" in text
    for code in codes:
        assert f"| `{code}` |" in text


# --- The ddp-doctor action (action.yml) ------------------------------------------------------

ACTION = Path(__file__).resolve().parents[2] / "action.yml"
# GitHub runs a composite step's `shell: bash` as `bash --noprofile --norc -eo pipefail {0}`.
GITHUB_BASH = ("bash", "--noprofile", "--norc", "-eo", "pipefail")


def action() -> dict:
    return yaml.safe_load(ACTION.read_text(encoding="utf-8"))


def expand(text: str, context: dict[str, str]) -> str:
    """Replace ``${{ name }}`` as the runner does; a name this test does not know fails."""
    def value(found: re.Match[str]) -> str:
        name = found.group(1)
        assert name in context, f"action.yml uses ${{{{ {name} }}}}, unknown here"
        return context[name]
    return re.sub(r"\$\{\{\s*([\w.-]+)\s*\}\}", value, text)


def run_action_steps(steps: list[dict], inputs: dict[str, str], action_path: Path,
                     work: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Each step's ``run:`` with its ``env:``, in order, stopping at the first failure."""
    context = {"github.action_path": str(action_path),
               **{f"inputs.{k}": v for k, v in inputs.items()}}
    for step in steps:
        assert step["shell"] == "bash"  # composite run steps must name their shell
        step_env = {**env, **{k: expand(str(v), context) for k, v in step.get("env", {}).items()}}
        result = run_script(expand(step["run"], context), work, step_env, GITHUB_BASH,
                            timeout=300)
        if result.returncode:
            break
    return result


def documented_action_inputs() -> dict[str, str]:
    """The docs' ``uses:`` step's ``with:`` over the action's defaults."""
    workflow = yaml.safe_load(doc_block("action"))
    (job,) = workflow["jobs"].values()
    (step,) = [s for s in job["steps"] if s.get("uses") == "./ddp-doctor"]
    defaults = {name: str(spec["default"]) for name, spec in action()["inputs"].items()}
    assert set(step["with"]) <= set(defaults), "the docs pass an input action.yml lacks"
    return {**defaults, **{k: str(v) for k, v in step["with"].items()}}


def test_action_is_a_composite_action_with_the_documented_inputs():
    spec = action()
    assert spec["runs"]["using"] == "composite"
    assert {name: str(i["default"]) for name, i in spec["inputs"].items()} == {
        "python": "python3", "args": "check --strict", "junit": "ddp-doctor.xml",
        "json": "ddp-doctor.json"}
    doc = DOC.read_text(encoding="utf-8")
    for name, i in spec["inputs"].items():
        assert f"| `{name}` | `{i['default']}` |" in doc  # the inputs table agrees
    # The workflow after the action keeps the files the action wrote.
    workflow = yaml.safe_load(doc_block("action"))
    (job,) = workflow["jobs"].values()
    (upload,) = [s for s in job["steps"] if str(s.get("uses", "")).startswith(
        "actions/upload-artifact@")]
    assert upload["if"] == "always()"
    inputs = documented_action_inputs()
    assert upload["with"]["path"].split() == [inputs["junit"], inputs["json"]]


@pytest.mark.slow
@pytest.mark.spawns
def test_action_installs_its_checkout_into_a_venv_and_runs_the_preflight(tmp_path):
    """The action's scripts, run as the runner would: the install is real (pip from the
    configured index), then the documented inputs run the pre-flight on recorded facts."""
    # The action's own checkout: a copy, as `uses:` gets one (and pip builds in it).
    checkout = tmp_path / "action"
    shutil.copytree(ACTION.parent, checkout, ignore=shutil.ignore_patterns(
        ".git", "build", "dist", "*.egg-info", ".venv*", "__pycache__", ".pytest_cache",
        ".ruff_cache", ".mypy_cache"))
    summary = tmp_path / "step_summary.md"
    env = ci_env(tmp_path, GITHUB_ACTIONS="true", GITHUB_STEP_SUMMARY=str(summary),
                 RUNNER_TEMP=str(tmp_path / "runner_temp"))
    (tmp_path / "runner_temp").mkdir()
    work = tmp_path / "workspace"
    work.mkdir()
    install, preflight = action()["runs"]["steps"]
    inputs = documented_action_inputs()

    result = run_action_steps([install], inputs, checkout, work, env)
    assert result.returncode == 0, result.stdout + result.stderr
    venv = tmp_path / "runner_temp" / "ddp-doctor-venv"
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import ddp_doctor, ddp_doctor.checks; print(ddp_doctor.checks.__file__)"],
        cwd=tmp_path, capture_output=True, text=True, check=True, env=env)
    assert Path(where.stdout.strip()).is_relative_to(venv)  # installed, not this checkout
    assert result.stdout.strip().endswith(f"ddp-doctor {ddp_version()}")

    for facts, exit_code, codes in ((SMALL_SHM, 1, ("HST001",)), (HEALTHY, 0, ())):
        replayed = {**inputs, "args": f"{inputs['args']} --facts {facts}"}
        result = run_action_steps([preflight], replayed, checkout, work, env)
        assert result.returncode == exit_code, result.stdout + result.stderr
        assert_reports(work, inputs["junit"], inputs["json"], exit_code, *codes)
        annotations = [line for line in result.stdout.splitlines() if line.startswith("::")]
        assert [line.split(" title=")[1].split()[0] for line in annotations] == list(codes)
    assert summary.read_text(encoding="utf-8").count("ddp-doctor: ") == 2

    # Without --facts, the `python` input is the interpreter diagnosed (--python).
    not_python = tmp_path / "not-python"
    not_python.write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
    not_python.chmod(stat.S_IRWXU)
    result = run_action_steps([preflight], {**inputs, "python": str(not_python)}, checkout,
                              work, env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"--python {not_python}: not a Python interpreter" in result.stderr


def ddp_version() -> str:
    from ddp_doctor import __version__

    return __version__


# --- GitLab CI ------------------------------------------------------------------------------

def gitlab_job() -> dict:
    config = yaml.safe_load(doc_block("gitlab"))
    (job,) = config.values()
    return job


def test_gitlab_recipe_reports_junit_and_keeps_artifacts_on_failure():
    job = gitlab_job()
    assert job["stage"] == ".pre"
    assert job["artifacts"]["when"] == "always"
    assert job["artifacts"]["reports"]["junit"] == "ddp-doctor.xml"
    assert job["script"][0] == "python -m pip install ./ddp-doctor"


@pytest.mark.spawns
@pytest.mark.parametrize("facts, exit_code, codes", [
    (NO_DRIVER, 1, ("DRV001",)),
    (HEALTHY, 0, ()),
])
def test_gitlab_script_runs_and_writes_the_reported_files(tmp_path, facts, exit_code, codes):
    job = gitlab_job()
    work = tmp_path / "build"
    work.mkdir()
    env = ci_env(tmp_path, GITLAB_CI="true", CI="true")
    # The install line is not run here (no network); the doctor is installed in this venv.
    for line in job["script"][1:]:
        result = run_script(replay(line, facts) + "\n", work, env, ("bash", "-e"))
        if result.returncode:
            break
    assert result.returncode == exit_code, result.stdout + result.stderr
    assert "::error" not in result.stdout  # no GitHub annotations outside GitHub
    artifacts = job["artifacts"]
    for path in (*artifacts["paths"], artifacts["reports"]["junit"]):
        assert (work / path).is_file(), path
    assert_reports(work, artifacts["reports"]["junit"], "ddp-doctor.json", exit_code, *codes)


# --- Slurm ----------------------------------------------------------------------------------

SRUN = '''\
#!{python}
"""A stand-in for srun: each task runs the command with Slurm's variables; all tasks run
at once (the smoke job's nodes must meet); the exit code is the highest task's."""
import os, subprocess, sys
log = os.environ["SHIM_LOG"]
args = sys.argv[1:]
opts = {{}}
while args and args[0].startswith("-"):
    key, _, value = args.pop(0).partition("=")
    opts[key] = value
nodes = int(opts.get("--nodes") or os.environ["SLURM_JOB_NUM_NODES"])
per_node = int(opts.get("--ntasks-per-node") or 1)
with open(log, "a") as f:
    f.write("srun " + " ".join(args) + "\\n")
step = str(sum(1 for line in open(log) if line.startswith("srun ")) - 1)
procs = []
for node in range(nodes):
    for local in range(per_node):
        env = dict(os.environ, SLURM_STEP_ID=step, SLURM_NNODES=str(nodes),
                   SLURM_NTASKS=str(nodes * per_node), SLURM_NODEID=str(node),
                   SLURM_PROCID=str(node * per_node + local), SLURM_LOCALID=str(local),
                   SLURM_STEP_NODELIST=os.environ["SLURM_JOB_NODELIST"],
                   SLURMD_NODENAME=f"node{{node}}")
        procs.append(subprocess.Popen(args, env=env))
sys.exit(max(p.wait() for p in procs))
'''

SCONTROL = '''\
#!/bin/sh
# scontrol show hostnames LIST: one host a line (the test's node list is plain names).
[ "$1 $2" = "show hostnames" ] && echo "$3" | tr ',' '\\n'
'''

TORCHRUN = '''\
#!/bin/sh
# The real training job: only records that it was started, and with what.
echo "torchrun $* node=$SLURMD_NODENAME" >> "$SHIM_LOG"
'''


def free_slurm_job_id() -> str:
    """A job id whose derived smoke port (20000 + id % 20000) is free right now."""
    for _ in range(50):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if 20000 <= port < 40000:
            return str(40000 + port - 20000)
    raise AssertionError("no free port in 20000-39999")


def slurm_job(tmp_path: Path, facts: Path, node1: Path | None = None
              ) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The documented sbatch script, node0 replaying ``facts`` and node1 ``node1`` (the
    same machine when not given)."""
    shims = tmp_path / "shims"
    env = ci_env(tmp_path, SLURM_JOB_ID=free_slurm_job_id(), SLURM_JOB_NUM_NODES="2",
                 SLURM_NNODES="2", SLURM_JOB_NODELIST="localhost",
                 SHIM_LOG=str(tmp_path / "calls.log"))
    for name, text in (("srun", SRUN.format(python=sys.executable)), ("scontrol", SCONTROL),
                       ("torchrun", TORCHRUN)):
        (shims / name).write_text(text, encoding="utf-8")
        (shims / name).chmod(stat.S_IRWXU)
    work = tmp_path / "job"
    work.mkdir()
    for node, recorded in (("node0", facts), ("node1", node1 or facts)):
        shutil.copy(recorded, tmp_path / f"recorded-{node}.json")
    # Inside each task's `bash -c '...'`, $SLURMD_NODENAME picks that node's recording.
    script = replay(doc_block("slurm"), Path(f"{tmp_path}/recorded-$SLURMD_NODENAME.json"))
    assert script.startswith("#!/bin/bash\n")
    result = run_script(script, work, env, ("bash",), timeout=280)
    return result, work


def calls(tmp_path: Path) -> list[str]:
    return (tmp_path / "calls.log").read_text(encoding="utf-8").splitlines()


@pytest.mark.slow
@pytest.mark.spawns
def test_slurm_preflight_stops_the_job_when_a_node_has_problems(tmp_path):
    result, work = slurm_job(tmp_path, NO_DRIVER)
    assert result.returncode == 1, result.stdout + result.stderr
    logged = calls(tmp_path)
    assert len(logged) == 1 and logged[0].startswith("srun bash -c ddp-doctor check ")
    assert not any(line.startswith("torchrun") for line in logged)  # no training started
    for node in ("node0", "node1"):
        assert_reports(work / "preflight", f"check-{node}.xml", f"check-{node}.json", 1,
                       "DRV001")
    assert result.stdout.count("DRV001") >= 2  # each node's console report


@pytest.mark.slow
@pytest.mark.spawns
def test_slurm_preflight_stops_the_job_when_the_nodes_differ(tmp_path):
    other = json.loads(HEALTHY.read_text(encoding="utf-8"))
    other["facts"]["torch"]["value"]["libraries"]["nccl_version"] = "2.18.3"
    other["facts"]["env_vars"]["value"]["NCCL_IB_DISABLE"] = "1"
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps(other), encoding="utf-8")
    result, work = slurm_job(tmp_path, HEALTHY, node1=odd)
    assert result.returncode == 1, result.stdout + result.stderr
    logged = calls(tmp_path)
    assert len(logged) == 1 and logged[0].startswith("srun bash -c ddp-doctor check ")
    pre = work / "preflight"
    root = ET.parse(pre / "compare.xml").getroot()
    failed = " ".join(f"{el.get('message', '')} {el.text or ''}" for el in root.iter()
                      if el.tag in ("failure", "error"))
    assert "NOD001" in failed
    table = (pre / "nodes.md").read_text(encoding="utf-8")
    assert "| NCCL | NOD001 | 2.28.9 | **2.18.3** |" in table
    assert "| NCCL_IB_DISABLE | NOD005 | (unset) | **1** |" in table


@pytest.mark.slow
@pytest.mark.spawns
def test_slurm_preflight_checks_every_node_smokes_across_them_then_trains(tmp_path):
    result, work = slurm_job(tmp_path, HEALTHY)
    assert result.returncode == 0, result.stdout + result.stderr
    logged = calls(tmp_path)
    assert [line.split()[:4] for line in logged[:3]] == [
        ["srun", "bash", "-c", "ddp-doctor"]] * 2 + [["srun", "torchrun", "--nnodes=2",
                                                       "--nproc-per-node=8"]]
    assert "check" in logged[0] and "smoke" in logged[1]
    trained = sorted(line for line in logged if line.startswith("torchrun"))
    assert len(trained) == 2 and all("--rdzv-endpoint=localhost:29500" in line
                                     for line in trained)
    assert [line.rsplit("node=", 1)[1] for line in trained] == ["node0", "node1"]
    pre = work / "preflight"
    for node in ("node0", "node1"):
        assert_reports(pre, f"check-{node}.xml", f"check-{node}.json", 0)
        assert (pre / f"facts-{node}.json").is_file()
    compared = ET.parse(pre / "compare.xml").getroot()
    assert not [el for el in compared.iter() if el.tag in ("failure", "error")]
    assert "The 2 nodes agree" in (pre / "nodes.md").read_text(encoding="utf-8")
    ranks = []
    for node in ("node0", "node1"):
        smoke = json.loads((pre / f"smoke-{node}.json").read_text(encoding="utf-8"))
        assert smoke["exit_code"] == 0, smoke["findings"]
        assert_reports(pre, f"smoke-{node}.xml", f"smoke-{node}.json", 0)
        data = smoke["smoke"]
        assert data["ok"] and data["ranks"] == 2 and data["params_in_sync"] is True
        ranks += [r["rank"] for r in data["per_rank"]]
    assert sorted(ranks) == [0, 1]  # one rank on each node, one job across both



# --- Kubernetes -----------------------------------------------------------------------------

def k8s_objects() -> dict[str, dict]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(doc_block("kubernetes"))}


def test_kubernetes_recipe_is_an_indexed_job_behind_a_headless_service():
    objects = k8s_objects()
    service, job = objects["Service"], objects["Job"]
    assert service["spec"]["clusterIP"] == "None"
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == 2
    assert spec["backoffLimit"] == 0
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == service["metadata"]["name"] == job["metadata"]["name"]
    assert service["spec"]["selector"] == {"job-name": job["metadata"]["name"]}
    (container,) = pod["containers"]
    script = container["args"][0]
    # The rendezvous host is pod 0's DNS name: <job>-0.<subdomain>.
    assert f"--master-addr {job['metadata']['name']}-0.{pod['subdomain']}" in script
    assert "--nnodes 2" in script and '--node-rank "$JOB_COMPLETION_INDEX"' in script
    assert script.index("ddp-doctor smoke") < script.index("torchrun")
    (volume,) = pod["volumes"]
    assert volume["emptyDir"]["medium"] == "Memory"
    assert container["volumeMounts"][0]["mountPath"] == "/dev/shm"


def run_pods(tmp_path: Path, pod_env: list[dict[str, str]]) -> list[tuple[int, str]]:
    """The Job's pod script, run at once as one process per pod with the variables a Job
    sets (and each pod's own extra ones); pod 0's DNS name is this host, the smoke job is the
    small CPU one, and torchrun is the shim that records it was started."""
    job = k8s_objects()["Job"]
    script = job["spec"]["template"]["spec"]["containers"][0]["args"][0]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    script = replay(script, HEALTHY).replace("train-0.train", "127.0.0.1")
    script = script.replace("--master-port 29400", f"--master-port {port}")
    script = script.replace("/tmp/smoke-", f"{tmp_path}/smoke-")
    env = ci_env(tmp_path, SHIM_LOG=str(tmp_path / "calls.log"))
    (tmp_path / "shims" / "torchrun").write_text(TORCHRUN.replace("$SLURMD_NODENAME",
                                                                  "$JOB_COMPLETION_INDEX"))
    (tmp_path / "shims" / "torchrun").chmod(stat.S_IRWXU)
    (tmp_path / "pod.sh").write_text(script, encoding="utf-8")
    with short_tmpdir("pods-") as temp:  # a pod's failed smoke keeps its folder there
        pods = [subprocess.Popen(["bash", str(tmp_path / "pod.sh")], cwd=tmp_path,
                                 env=dict(env, JOB_COMPLETION_INDEX=str(index), TMPDIR=temp,
                                          **extra),
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                for index, extra in enumerate(pod_env)]
        outputs = [pod.communicate(timeout=280)[0] for pod in pods]
    return [(pod.returncode, output) for pod, output in zip(pods, outputs)]


@pytest.mark.slow
@pytest.mark.spawns
@pytest.mark.timeout(1500)  # may build the registry-torch venv (about 5 GB) first
def test_kubernetes_pods_with_another_torch_build_stop_before_training(tmp_path,
                                                                      ultralytics_python):
    """Pod 1's image has the registry's CUDA build of torch where pod 0 has the +cpu one: the
    cross-node smoke names the difference on both pods, `set -e` ends each pod with the smoke's
    exit code, and torchrun never starts (the Job then fails: backoffLimit 0)."""
    other = tmp_path / "pod1-image"
    other.mkdir()
    # What differs between the two images: the interpreter the smoke job's workers use.
    (other / "ddp-doctor").write_text(
        f'#!/bin/sh\nexec "{sys.executable}" -m ddp_doctor "$@" --python "{ultralytics_python}"\n')
    (other / "ddp-doctor").chmod(stat.S_IRWXU)
    path = ci_env(tmp_path)["PATH"]
    pods = run_pods(tmp_path, [{}, {"PATH": f"{other}{os.pathsep}{path}"}])
    assert [code for code, _ in pods] == [1, 1], pods
    for index in range(2):
        smoke = json.loads((tmp_path / f"smoke-{index}.json").read_text(encoding="utf-8"))
        codes = {f["code"] for f in smoke["findings"]}
        assert {"NOD002", "NOD003"} <= codes, codes  # the torch build, on both pods alike
        assert smoke["nodes"]["nodes"][1].startswith("node 1")
    assert not (tmp_path / "calls.log").exists()  # no pod started the real training


@pytest.mark.slow
@pytest.mark.spawns
def test_kubernetes_pods_smoke_across_both_nodes_then_train(tmp_path):
    """Both pods alike: one smoke job across them, then each pod starts the real torchrun."""
    pods = run_pods(tmp_path, [{}, {}])
    assert [code for code, _ in pods] == [0, 0], pods
    ranks = []
    for index in range(2):
        smoke = json.loads((tmp_path / f"smoke-{index}.json").read_text(encoding="utf-8"))
        assert smoke["exit_code"] == 0, smoke["findings"]
        assert smoke["smoke"]["ranks"] == 2
        ranks += [r["rank"] for r in smoke["smoke"]["per_rank"]]
    assert sorted(ranks) == [0, 1]  # one job across both pods
    trained = sorted(calls(tmp_path))
    assert [line.rsplit("node=", 1)[1] for line in trained] == ["0", "1"]
    assert all("--master-addr 127.0.0.1 --master-port 29500" in line for line in trained)
