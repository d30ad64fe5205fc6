"""A stand-in for the few torch calls the probe's GPU tests make, with per-GPU faults.

The probe's ``functional_test``, ``cudnn_test``, ``test_gpus`` and ``p2p_matrix`` take
``torch`` as an argument; these fakes let tests run them in-process and make one GPU
hang, raise a CUDA error, or compute wrong numbers, without a GPU.
"""

from __future__ import annotations

import threading
from typing import Any


class FakeTensor:
    """A "tensor" that is one number: enough to tell right results from wrong ones."""

    def __init__(self, owner: FakeTorch, value: float, device: str = "cpu") -> None:
        self.owner = owner
        self.value = value
        self.device = device
        self.grad: FakeTensor | None = None

    def _gpu(self) -> int | None:
        return int(self.device.split(":")[1]) if self.device.startswith("cuda") else None

    def to(self, device: str) -> FakeTensor:
        self.owner.fault(int(device.split(":")[1]), "to")
        return FakeTensor(self.owner, self.value, device)

    def cpu(self) -> FakeTensor:
        return FakeTensor(self.owner, self.value, "cpu")

    def __sub__(self, other: FakeTensor) -> FakeTensor:
        return FakeTensor(self.owner, self.value - other.value, self.device)

    def abs(self) -> FakeTensor:
        return FakeTensor(self.owner, abs(self.value), self.device)

    def max(self) -> FakeTensor:
        return self

    def all(self) -> FakeTensor:
        return self

    def sum(self) -> FakeTensor:
        return self

    def item(self) -> Any:
        return self.value

    def requires_grad_(self) -> FakeTensor:
        return self

    def backward(self) -> None:
        gpu = self._gpu()
        if gpu is not None:
            self.owner.fault(gpu, "backward")
        for leaf in self.owner.leaves:
            leaf.grad = FakeTensor(self.owner, 1.0, leaf.device)


class _Generator:
    def manual_seed(self, seed: int) -> _Generator:
        return self


class FakeTorch:
    """``faults``: GPU index -> (operation, what) with what "hang", "wrong", or an error text.

    Operations: "to", "matmul", "synchronize", "conv", "backward", "peer".
    """

    def __init__(self, faults: dict[int, tuple[str, str]] | None = None,
                 peers: dict[tuple[int, int], bool] | None = None) -> None:
        self.faults = faults or {}
        self.peers = peers or {}
        self.release = threading.Event()  # set by the test to let hung threads finish
        self.leaves: list[FakeTensor] = []
        owner = self

        class cuda:
            @staticmethod
            def synchronize(device: str) -> None:
                owner.fault(int(device.split(":")[1]), "synchronize")

            @staticmethod
            def can_device_access_peer(i: int, j: int) -> bool:
                owner.fault(i, "peer")
                return owner.peers.get((i, j), True)

        class _Conv:
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                self.device = "cpu"

            def to(self, device: str) -> _Conv:
                self.device = device
                return self

            def __call__(self, x: FakeTensor) -> FakeTensor:
                owner.fault(int(self.device.split(":")[1]), "conv")
                owner.leaves.append(x)
                return FakeTensor(owner, x.value * 2, self.device)

        class nn:
            Conv2d = _Conv

        class backends:
            class cudnn:
                enabled = False

        self.cuda = cuda
        self.nn = nn
        self.backends = backends

    def fault(self, index: int, operation: str) -> None:
        op, what = self.faults.get(index, (None, None))
        if op != operation:
            return
        if what == "hang":
            self.release.wait(30)
        elif what != "wrong":
            raise RuntimeError(what)

    def Generator(self) -> _Generator:
        return _Generator()

    def rand(self, *shape: int, generator: Any = None) -> FakeTensor:
        return FakeTensor(self, 0.5)

    def matmul(self, a: FakeTensor, b: FakeTensor) -> FakeTensor:
        value = a.value * b.value * 1024
        gpu = a._gpu()
        if gpu is not None:
            self.fault(gpu, "matmul")
            if self.faults.get(gpu) == ("matmul", "wrong"):
                value = 0.0
        return FakeTensor(self, value, a.device)

    def allclose(self, a: FakeTensor, b: FakeTensor, rtol: float, atol: float) -> bool:
        return abs(a.value - b.value) <= atol + rtol * abs(b.value)

    def isfinite(self, t: FakeTensor) -> FakeTensor:
        return FakeTensor(self, t.value == t.value and abs(t.value) != float("inf"))
