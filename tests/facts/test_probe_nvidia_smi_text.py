"""The nvidia_smi_text probe: raw `nvidia-smi -q` / `topo -m` text, only when a bundle asks."""

from __future__ import annotations

from ddp_doctor.facts.gather import GatherOptions, gather
from ddp_doctor.facts.nvidia_smi_text import WSL_NVIDIA_SMI, probe_nvidia_smi_text
from ddp_doctor.facts.seam import CommandResult
from tests.facts.test_gather import ALL_FACTS, PY, v100_server
from tests.support.fakes import FakeEnv, ok
from tests.support.smi_captures import capture

SMI_Q = capture("nvidia-smi-q-bsyonline-v100.txt")
TOPO = capture("topo-bsyonline-8xv100.txt")
MISSING = CommandResult(("nvidia-smi", "-q"), None, "", "No such file", not_found=True)


def test_both_texts_are_kept_as_printed():
    env = FakeEnv(commands=[(("nvidia-smi", "-q"), ok(SMI_Q)),
                            (("nvidia-smi", "topo", "-m"), ok(TOPO))])
    value = probe_nvidia_smi_text(env, timeout_s=5)
    assert value == {"command": "nvidia-smi", "q": SMI_Q, "topo": TOPO,
                     "errors": {"q": None, "topo": None}}
    assert env.calls == [("nvidia-smi", "-q"), ("nvidia-smi", "topo", "-m")]


def test_no_nvidia_smi_says_why_and_does_not_try_topo():
    env = FakeEnv(commands=[(("nvidia-smi",), MISSING)])  # any other command would raise
    value = probe_nvidia_smi_text(env, timeout_s=5)
    assert value["q"] is None and value["topo"] is None
    assert value["errors"]["q"] == "nvidia-smi: not found"
    assert value["errors"]["topo"].startswith("not tried: nvidia-smi -q failed (not found)")
    assert env.calls == [("nvidia-smi", "-q")]


def test_a_hung_driver_stops_after_q():
    hung = CommandResult(("nvidia-smi", "-q"), -9, "", "", timed_out=True, duration_s=5)
    env = FakeEnv(commands=[(("nvidia-smi", "-q"), hung)])
    value = probe_nvidia_smi_text(env, timeout_s=5)
    assert value["errors"]["q"] == "nvidia-smi: no answer within 5s, killed"
    assert "timed out" in value["errors"]["topo"]
    assert len(env.calls) == 1


def test_wsl_nvidia_smi_off_path_is_used_and_topo_refusal_kept():
    topo_refused = CommandResult((WSL_NVIDIA_SMI, "topo", "-m"), 3, "",
                                 "Topology is not supported on this platform\n")
    env = FakeEnv(files={WSL_NVIDIA_SMI: ""},
                  commands=[(("nvidia-smi",), MISSING),
                            ((WSL_NVIDIA_SMI, "-q"), ok(SMI_Q)),
                            ((WSL_NVIDIA_SMI, "topo", "-m"), topo_refused)])
    value = probe_nvidia_smi_text(env, timeout_s=5)
    assert value["command"] == WSL_NVIDIA_SMI and value["q"] == SMI_Q
    assert value["topo"] is None
    assert value["errors"]["topo"].endswith("exit code 3: Topology is not supported on this "
                                            "platform")


def test_gather_runs_it_only_when_asked():
    plain = v100_server()
    assert set(gather(plain, GatherOptions(python=PY)).records) == ALL_FACTS
    assert not any(call[0] == "nvidia-smi" for call in plain.calls)

    env = v100_server()
    env.commands += [(("nvidia-smi", "-q"), ok(SMI_Q)), (("nvidia-smi", "topo"), ok(TOPO))]
    facts = gather(env, GatherOptions(python=PY, nvidia_smi_text=True, nvidia_smi_timeout_s=5))
    assert set(facts.records) == ALL_FACTS | {"nvidia_smi_text"}
    assert facts["nvidia_smi_text"]["q"] == SMI_Q
    assert facts["nvidia_smi_text"]["topo"] == TOPO
