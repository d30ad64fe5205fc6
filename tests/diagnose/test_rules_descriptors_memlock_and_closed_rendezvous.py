"""Messages read from the programs' sources whose cause a generic word on the same line hid:
torch's DataLoader out of file descriptors, InfiniBand's memory registration refused by the
locked-memory limit (ENOMEM's string, not the host's memory), a closed elastic rendezvous,
and the dynamic loader's version error cut before its parenthesis."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.rules import diagnosed, lead, lead_reading


def test_the_dataloaders_own_words_for_too_many_open_files(tmp_path: Path) -> None:
    line = ("RuntimeError: Too many open files. Communication with the workers is no longer "
            "possible. Please increase the limit using `ulimit -n` in the shell or change the "
            "sharing strategy by calling `torch.multiprocessing.set_sharing_strategy("
            "'file_system')` at the beginning of your code")
    assert lead_reading(tmp_path, line) == ("LOG110", "nccl_shared_memory")


def test_a_file_the_dataset_opens_is_not_the_handoff(tmp_path: Path) -> None:
    line = "OSError: [Errno 24] Too many open files: '/data/images/0001.jpg'"
    assert lead_reading(tmp_path, line)[0] != "LOG110"


def test_infiniband_registration_without_locked_memory_is_the_memlock_limit(
        tmp_path: Path) -> None:
    found = lead(tmp_path, "misc/ibvwrap.cc:278 NCCL WARN Call to ibv_reg_mr_iova2 failed with "
                           "error Cannot allocate memory\n")
    assert (found.code.id, found.code.category.value) == ("LOG044", "nccl_network")
    assert found.remediation[0].command == "ulimit -l"
    assert "memlock" in found.remediation[1].command


def test_another_verbs_failure_keeps_the_ports_steps(tmp_path: Path) -> None:
    found = lead(tmp_path, "NCCL WARN Call to ibv_create_qp failed\n")
    assert found.code.id == "LOG044" and found.remediation[0].command == "ibstat"


def test_enomem_elsewhere_is_still_the_hosts_memory(tmp_path: Path) -> None:
    assert lead_reading(tmp_path, "OSError: [Errno 12] Cannot allocate memory") == \
        ("LOG006", "host_out_of_memory")


def test_a_closed_rendezvous_is_a_rendezvous_failure(tmp_path: Path) -> None:
    assert lead_reading(tmp_path, "torch.distributed.elastic.rendezvous.api."
                                  "RendezvousClosedError") == ("LOG052", "rendezvous_failure")


def test_a_closed_rendezvous_follows_the_failure_that_closed_it(tmp_path: Path) -> None:
    codes = [f.code.id for f in diagnosed(
        tmp_path, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.\n"
                  "torch.distributed.elastic.rendezvous.api.RendezvousClosedError\n")]
    assert codes[0] == "LOG005" and "LOG052" not in codes


def test_the_loaders_version_error_cut_before_its_parenthesis(tmp_path: Path) -> None:
    line = ("ImportError: /usr/lib/x86_64-linux-gnu/libstdc++.so.6: version `GLIBCXX_3.4.29' "
            "not found")
    assert lead_reading(tmp_path, line)[0] == "LOG022"


def test_no_network_interface_after_torchs_last_error_is_the_network(tmp_path: Path) -> None:
    log = ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
           "ProcessGroupNCCL.cpp:1970, internal error - please report this issue to the NCCL "
           "developers, NCCL version 2.19.3\nncclInternalError: Internal check failed.\n"
           "Last error:\nBootstrap : no socket interface found\n")
    assert lead_reading(tmp_path, log) == ("LOG043", "nccl_network")


TORCH_NCCL_ERROR = ("[rank0]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/"
                    "distributed/c10d/ProcessGroupNCCL.cpp:1970, remote process exited or there "
                    "was a network error, NCCL version 2.19.3\n[rank0]: ncclRemoteError: A call "
                    "failed possibly due to a network error or a remote process exiting "
                    "prematurely.\n[rank0]: Last error:\n")


@pytest.mark.parametrize(("detail", "code"), [
    ("NET/IB : Got completion from peer 10.0.0.3<46234> with status=12 opcode=0 len=0 vendor "
     "err 129 (Recv)", "LOG044"),
    ("socketPollConnect: Connect to 10.0.0.2<43271> returned 113(No route to host) errno "
     "115(Operation now in progress)", "LOG043"),
    ("Mismatched NCCL version detected : rank 0 version 21903 rank 8 version 21805", "LOG077"),
])
def test_nccls_warning_after_torchs_last_error_is_read_as_that_warning(
        tmp_path: Path, detail: str, code: str) -> None:
    found = lead(tmp_path, TORCH_NCCL_ERROR + f"[rank0]: {detail}\n")
    assert found.code.id == code
    assert found.evidence[0].value == detail  # quoted as the log has it, without "NCCL WARN"


def test_the_same_line_without_last_error_before_it_is_not_read(tmp_path: Path) -> None:
    assert lead_reading(tmp_path, "NET/IB : Got completion from peer 10.0.0.3<46234> with "
                                  "status=12 opcode=0 len=0 vendor err 129 (Recv)")[0] != "LOG044"
