"""The smoke job as a cluster runs it: a shell that already holds rendezvous variables
(Slurm batch scripts, Kubeflow pods, a doctor started inside a torchrun job), nodes that
run different numbers of ranks, a torch older than 2.3, and the arithmetic that sizes each
rank's share (DataParallel's batch, each node's rank numbers).

The real runs are two or three gloo ranks on this CPU; the unit tests drive the same
helpers the job uses.
"""

from __future__ import annotations

import argparse
import os
import socket
import stat
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from ddp_doctor.train_smoke import compat, spawn_layout, worker

from ddp_doctor.nodes import compare_nodes
from ddp_doctor.smoke.launch import (
    RENDEZVOUS_VARIABLES,
    SmokeOptions,
    child_env,
    free_port,
    without_rendezvous,
)
from ddp_doctor.smoke.monitor import RankState
from ddp_doctor.smoke.run import job_world, run_smoke
from ddp_doctor.smoke.ultralytics.trainer import driver_env
from tests.support.smoke import assert_nothing_left, run_tag

FAST = {"steps": 6, "imgsz": 64, "timeout": 150.0}


# -- inherited rendezvous variables ----------------------------------------------------

CLUSTER_SHELL = {
    # What a Slurm batch script or a Kubeflow PyTorchJob pod exports, and what a doctor
    # started from inside a torchrun job inherits.
    "RANK": "5", "LOCAL_RANK": "3", "WORLD_SIZE": "9", "LOCAL_WORLD_SIZE": "4",
    "GROUP_RANK": "1", "TORCHELASTIC_USE_AGENT_STORE": "True",
    "TORCHELASTIC_RESTART_COUNT": "0", "PET_NPROC_PER_NODE": "4",
}
# (PET_NNODES and PET_NODE_RANK are left out of the shell above: they lay out the nodes on
# purpose, as torchrun would, see test_smoke_options.py.)


def test_the_childrens_environment_drops_every_inherited_rendezvous_value(tmp_path):
    inherited = {**CLUSTER_SHELL, "PET_NNODES": "3", "MASTER_ADDR": "10.0.0.7",
                 "MASTER_PORT": "29400",
                 "PET_RDZV_BACKEND": "c10d", "PET_RDZV_ENDPOINT": "10.0.0.7:29400",
                 "NCCL_DEBUG": "WARN", "CUDA_VISIBLE_DEVICES": "2,3", "HOME": "/root"}
    kept = without_rendezvous(inherited)
    assert kept == {"NCCL_DEBUG": "WARN", "CUDA_VISIBLE_DEVICES": "2,3", "HOME": "/root"}
    old = dict(os.environ)
    try:
        os.environ.update(inherited)
        for env in (child_env(tmp_path, 2), driver_env(tmp_path)):
            assert not any(k in env for k in RENDEZVOUS_VARIABLES)
            # Only the doctor's own torchrun option: its log directory, in the run directory.
            assert not any(k.startswith(("PET_", "TORCHELASTIC_")) for k in env
                           if k != "PET_LOG_DIR")
            assert env.get("PET_LOG_DIR", str(tmp_path)).startswith(str(tmp_path))
            assert env["CUDA_VISIBLE_DEVICES"] == "2,3"  # the user's GPU choice stays
    finally:
        os.environ.clear()
        os.environ.update(old)


def test_the_spawn_launcher_sets_its_rendezvous_instead_of_defaulting_it():
    args = worker.parse_args(["--run-dir", "/tmp/x", "--spawn", "2", "--master-addr",
                              "127.0.0.1", "--master-port", "41234"])
    assert worker.spawn_environment(args) == {"MASTER_ADDR": "127.0.0.1",
                                              "MASTER_PORT": "41234"}


@pytest.fixture
def held_port():
    """A port some other process listens on, as a shell's MASTER_PORT may name."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield sock.getsockname()[1]


@pytest.mark.spawns
@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["spawn", "torchrun"])
def test_a_job_started_in_a_cluster_shell_meets_where_the_doctor_says(
        launcher, held_port, monkeypatch):
    """MASTER_PORT (and torchrun's PET_ rendezvous) point at a port another process holds;
    the doctor was given a free one. Before: spawn's ranks met at the shell's port and
    failed; torchrun took PET_RDZV_BACKEND/ENDPOINT from the environment."""
    for name, value in {**CLUSTER_SHELL, "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": str(held_port), "PET_RDZV_BACKEND": "c10d",
                        "PET_RDZV_ENDPOINT": f"127.0.0.1:{held_port}"}.items():
        monkeypatch.setenv(name, value)
    result = run_smoke(SmokeOptions(device="cpu", nproc=2, launcher=launcher,
                                    master_port=free_port(), **FAST))
    assert result.ok, [f.title for f in result.findings]
    assert result.data["ranks"] == 2 and result.data["steps_done"] == FAST["steps"]
    # This is also each launcher's healthy two-rank run (spawn has no other one): it is
    # recorded as launched, the ranks' parameters end bit-identical, nothing is left.
    assert result.data["launcher"] == launcher and result.data["params_in_sync"] is True
    assert ("--spawn 2" in result.data["command"]) == (launcher == "spawn")
    assert_nothing_left(run_tag(result.data["command"]))


# -- nodes with different numbers of ranks -----------------------------------------------

def test_spawned_ranks_are_numbered_from_every_nodes_real_count():
    assert spawn_layout.layout_from_counts([2, 1], 0) == spawn_layout.SpawnLayout(0, 3, (2, 1))
    assert spawn_layout.layout_from_counts([2, 1], 1) == spawn_layout.SpawnLayout(2, 3, (2, 1))
    assert spawn_layout.layout_from_counts([8, 7, 8], 2).first_rank == 15
    assert spawn_layout.single_node(4) == spawn_layout.SpawnLayout(0, 4, (4,))


def test_a_rank_state_takes_the_rank_and_world_the_rank_reports(tmp_path):
    path = tmp_path / "local0.jsonl"
    path.write_text('{"rank": 2, "kind": "info", "phase": "startup", "world_size": 3}\n')
    state = RankState(1, str(path))  # node 1 of 2 with 1 rank expected rank 1
    state.read_new(1.0)
    assert (state.rank, state.world_size) == (2, 3)
    assert job_world([state], expected=2) == 3
    assert job_world([RankState(0, str(tmp_path / "none"))], expected=2) == 2


def test_between_peers_the_node_with_fewer_gpus_ranks_or_rails_is_named():
    eight = {"gpu_count": 8, "ranks": 8, "ib_active": [f"mlx5_{i}:1" for i in range(8)]}
    seven = {"gpu_count": 7, "ranks": 7, "ib_active": ["mlx5_0:1"]}
    for order in ((eight, seven), (seven, eight)):
        names = ["node 0", "node 1"]
        peers = compare_nodes(names, list(order), fewer_is_odd=True)  # type: ignore[arg-type]
        short = names[list(order).index(seven)]
        found = {f.code.id: f for f in peers.findings}
        assert set(found) == {"NOD004", "NOD013", "NOD016"}, found
        assert all(f.affects == (short,) for f in found.values())
        rows = {r.label: r for r in peers.rows}
        assert "1 active port: mlx5_0:1" in rows["InfiniBand"].values
    # Against a known-good baseline (`compare`), a tie still names the later node.
    baseline = compare_nodes(["good", "this"], [seven, eight])  # type: ignore[list-item]
    assert {f.affects for f in baseline.findings} == {("this",)}


@pytest.mark.spawns
@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["torchrun", "spawn"])
def test_nodes_with_different_rank_counts_train_and_both_name_the_short_node(launcher):
    """Node 0 runs 2 ranks, node 1 one (a node short of a GPU): the suite's two-node job on
    loopback under each launcher (both nodes pass, with the short node named). Before: node
    1 watched the event file of a rank numbered 1 that torchrun had numbered 2, and reported
    SMK004 "Ranks 1 (0/4 steps) did not finish"; under spawn the nodes disagreed on the
    world size and never met."""
    port = free_port()

    def node(node_rank: int):
        return run_smoke(SmokeOptions(device="cpu", nproc=2 - node_rank, nnodes=2,
                                      node_rank=node_rank, master_addr="127.0.0.1",
                                      master_port=port, launcher=launcher,
                                      **{**FAST, "steps": 12}))

    with ThreadPoolExecutor(2) as pool:
        first, second = pool.map(node, (0, 1))
    for result, ranks in ((first, [0, 1]), (second, [2])):
        assert result.data["ranks"] == 3, result.findings
        assert [r["rank"] for r in result.data["per_rank"]] == ranks
        assert result.data["steps_done"] == 12
        assert result.data["params_in_sync"] is True
        assert [f.code.id for f in result.findings] == ["NOD016"], result.findings
        assert result.findings[0].affects[0].startswith("node 1")
        assert result.ok  # a warning: it trained, on fewer ranks than a peer
        assert_nothing_left(run_tag(result.data["command"]))
    assert first.nodes == second.nodes
    assert first.data["loss_trend"] == second.data["loss_trend"]


# -- the torch the user trains with may be older than 2.3 --------------------------------

OLD_TORCH = '''
"""Makes this torch answer as torch 2.2 does: no torch.amp.GradScaler (added in 2.3) and
an init_process_group without device_id (added in 2.3)."""
import torch
import torch.distributed as dist

del torch.amp.GradScaler
_init = dist.init_process_group


def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1,
                       rank=-1, store=None, group_name="", pg_options=None):
    return _init(backend, init_method=init_method, timeout=timeout, world_size=world_size,
                 rank=rank, store=store, group_name=group_name)


dist.init_process_group = init_process_group
'''


@pytest.fixture
def torch_2_2_python(tmp_path):
    """This interpreter, with torch made to look like 2.2 in every process it starts."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(textwrap.dedent(OLD_TORCH))
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="{site}${{PYTHONPATH:+:$PYTHONPATH}}" '
                       f'exec "{sys.executable}" "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return str(wrapper)


@pytest.mark.spawns
@pytest.mark.slow
def test_the_job_trains_with_a_torch_older_than_2_3(torch_2_2_python):
    """Before: every run died in ``torch.amp.GradScaler("cuda", ...)`` (AttributeError),
    built even on the CPU."""
    result = run_smoke(SmokeOptions(device="cpu", nproc=2, python=torch_2_2_python, **FAST))
    assert result.ok, [(f.code.id, f.title) for f in result.findings]
    assert result.data["steps_done"] == FAST["steps"]


def test_the_gradient_scaler_falls_back_to_torch_cuda_amp(monkeypatch):
    monkeypatch.delattr(torch.amp, "GradScaler")
    scaler = compat.grad_scaler(False)
    assert isinstance(scaler, torch.cuda.amp.GradScaler)
    assert scaler.is_enabled() is False


def test_device_id_and_barrier_ids_only_where_torch_takes_them(monkeypatch):
    cuda = torch.device("cuda", 3)
    assert compat.init_kwargs(torch.device("cpu")) == {}
    assert compat.init_kwargs(cuda) == {"device_id": cuda}  # torch 2.13 takes it

    def old_init(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1,
                 store=None, group_name="", pg_options=None):
        return None

    monkeypatch.setattr(compat.dist, "init_process_group", old_init)
    assert compat.init_kwargs(cuda) == {}
    assert compat.accepts(len, "x") is False  # a builtin without a readable signature


# -- DataParallel's batch ------------------------------------------------------------------

def test_dataparallel_gets_the_per_gpu_batch_on_every_gpu(monkeypatch):
    args = argparse.Namespace(mode="dp", batch=8)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    assert worker.replicas(args, torch.device("cuda", 0)) == 8
    assert worker.images_per_step(8, worker.replicas(args, torch.device("cuda", 0))) == 64
    assert worker.replicas(args, torch.device("cpu")) == 1
    ddp = argparse.Namespace(mode="ddp", batch=8)
    assert worker.images_per_step(8, worker.replicas(ddp, torch.device("cuda", 0))) == 8


def test_events_are_named_by_the_ranks_place_on_its_node():
    from ddp_doctor.train_smoke.events import event_path, stderr_path

    assert Path(event_path("/run", 1)).name == "local1.jsonl"
    assert Path(stderr_path("/run", 1)).name == "local1.stderr"


# -- ranks sharing one GPU over gloo (the multi-rank CUDA paths where one GPU exists) ----

def test_gloo_lets_ranks_share_the_gpus_nccl_does_not(monkeypatch):
    from ddp_doctor.smoke import device
    from ddp_doctor.smoke.launch import backend_for

    monkeypatch.setattr(device, "_probe", lambda options: {"cuda": True, "gpus": 1,
                                                              "torch": "2.13.0+cu130",
                                                              "cuda_build": "13.0"})
    shared = SmokeOptions(device="cuda", nproc=2, backend="gloo")
    assert device.resolve_device(shared) == ("cuda", 2)
    assert device.shared_gpus(shared, "cuda", 2) == 1
    refused = device.resolve_device(SmokeOptions(device="cuda", nproc=2))
    assert not isinstance(refused, tuple) and refused.code.id == "SMK012"
    assert refused.remediation[-1].command == "ddp-doctor smoke --nproc 2 --backend gloo"
    assert backend_for(shared, "cuda") == "gloo"
    assert backend_for(SmokeOptions(), "cuda") == "nccl"
    assert backend_for(SmokeOptions(), "cpu") == "gloo"
    assert backend_for(SmokeOptions(mode="dp"), "cuda") is None


def test_two_ranks_on_one_gpu_say_so_and_prove_no_nccl():
    from ddp_doctor.smoke.result import proved, summarize

    data = {"ok": True, "device": "cuda", "backend": "gloo", "launcher": "torchrun",
            "ranks": 2, "gpus_shared": 1, "steps_done": 30, "steps": 30, "wall_s": 9.0}
    assert summarize(data).startswith("2 ranks on 1 shared GPU (gloo), 30/30 steps")
    shown = proved(data, SmokeOptions(device="cuda", nproc=2, backend="gloo"))
    assert shown["gpu_training"] is True and shown["gpus_shared"] == 1
    assert shown["nccl_across_gpus"] is False
    nccl = proved({**data, "backend": "nccl", "gpus_shared": None}, SmokeOptions())
    assert nccl["nccl_across_gpus"] is True


def test_a_rank_takes_its_own_gpu_or_shares_them_round_robin():
    assert [worker.gpu_index(r, 8) for r in range(3)] == [0, 1, 2]
    assert [worker.gpu_index(r, 1) for r in range(3)] == [0, 0, 0]
    assert [worker.gpu_index(r, 2) for r in range(4)] == [0, 1, 0, 1]


@pytest.mark.parametrize(("options", "message"), [
    (SmokeOptions(device="cpu", backend="nccl"), "--backend nccl needs CUDA"),
    (SmokeOptions(device="cuda", mode="dp", backend="gloo"), "--backend needs --mode ddp"),
    (SmokeOptions(trainer="ultralytics", backend="gloo"), "--backend: only for --trainer"),
])
def test_backends_that_cannot_work_are_refused(options, message):
    from ddp_doctor.smoke.launch import OptionsError, check_options

    with pytest.raises(OptionsError, match=message):
        check_options(options)
