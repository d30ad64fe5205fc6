"""The rendezvous-port part of the host probe: who listens on MASTER_PORT / 29500."""

from __future__ import annotations

import socket

from ddp_doctor.facts.host import bind_test, rendezvous_port
from tests.support.fakes import FakeEnv, FakePsutil, listening


def test_stale_torchrun_still_listening_on_29500_is_named():
    """om-ai-lab/VLM-R1#289: a second training started while the first holds 29500."""
    psutil = FakePsutil(connections=[listening(22), listening(29500, pid=4242)],
                        process_names={4242: "python3"})
    info = rendezvous_port(FakeEnv(fake_psutil=psutil))
    assert info == {"port": 29500, "source": "torchrun default", "in_use": True, "pid": 4242,
                    "process": "python3", "method": "psutil.net_connections", "error": None}


def test_master_port_from_the_environment_and_a_pid_we_may_not_see():
    psutil = FakePsutil(connections=[listening(29600, pid=None)])
    info = rendezvous_port(FakeEnv(env={"MASTER_PORT": "29600"}, fake_psutil=psutil))
    assert (info["port"], info["source"], info["in_use"], info["pid"]) == (
        29600, "MASTER_PORT", True, None)


def test_a_garbage_master_port_falls_back_to_the_default():
    info = rendezvous_port(FakeEnv(env={"MASTER_PORT": "auto"}))
    assert (info["port"], info["source"], info["in_use"]) == (29500, "torchrun default", False)


def test_without_net_connections_the_bind_test_decides():
    class Denied(FakePsutil):
        def net_connections(self, kind="inet"):
            raise PermissionError("psutil.AccessDenied (pid=1)")

    seen = []
    info = rendezvous_port(FakeEnv(fake_psutil=Denied()),
                           bind=lambda port: seen.append(port) or True)
    assert seen == [29500]
    assert info["method"] == "bind test"
    assert info["in_use"] is True
    assert info["error"] == "net_connections: PermissionError: psutil.AccessDenied (pid=1)"


def test_bind_test_on_a_real_listening_socket():
    """The fallback on this machine: a socket we hold is in use, a closed one is free."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("0.0.0.0", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        assert bind_test(port) is True
    assert bind_test(port) is False
