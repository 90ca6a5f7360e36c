"""The Python calls of a captured forward's model code: counted per op, the capture's own left out,
the same count a forward makes without the capture around it."""
from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")

from pytest_charz.workloads.capture import capture  # noqa: E402


def _helper(x: "torch.Tensor") -> "torch.Tensor":
    return x


class _Chain(torch.nn.Module):
    def forward(self, x: "torch.Tensor") -> "torch.Tensor":
        y = x + 1
        _helper(y)
        _helper(y)
        return y * 2


class _Block(torch.nn.Module):
    """Model code as transformers writes it: submodules, a Python torch function (layer_norm), a
    dropout, a generator, helpers between ops."""

    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = torch.nn.Linear(16, 64), torch.nn.Linear(64, 16)
        self.act, self.drop = torch.nn.GELU(), torch.nn.Dropout(0.1)

    def forward(self, x: "torch.Tensor") -> "torch.Tensor":
        h = torch.nn.functional.layer_norm(x, (16,))
        parts = list(_helper(p) for p in h.chunk(2, dim=-1))
        h = torch.cat(parts, dim=-1)
        return x + self.drop(self.down(self.act(self.up(h))))


def _plain_count(module: "torch.nn.Module", x: "torch.Tensor") -> int:
    count = 0

    def hook(frame: object, event: str, arg: object) -> None:
        nonlocal count
        count += event == "call"

    with torch.no_grad():
        module(x)                        # first call's lazy imports and caches out of the count
        sys.setprofile(hook)
        try:
            module(x)
        finally:
            sys.setprofile(None)
    return count


def test_the_python_calls_between_two_ops_are_the_next_ops() -> None:
    add, mul = capture(_Chain(), torch.randn(8)).ops
    assert (add.source, mul.source) == ("aten.add.Tensor", "aten.mul.Tensor")
    assert add.work.shape["python_calls"] > 0            # nn.Module.__call__ and the forward entered
    assert mul.work.shape["python_calls"] == 2           # the two helper calls between the ops


def test_a_forward_counts_what_it_makes_without_the_capture() -> None:
    # failure kind: the recorder's dispatch and function modes, its module hooks and torch's way into
    # them ran 2.4x the forward's own Python calls (1023 against 421 for a two-layer OPT) and
    # nn.Module.__call__'s hooked path added two calls per module call
    block = _Block().eval()
    x = torch.randn(4, 16)
    captured = sum(op.work.shape["python_calls"] for op in capture(block, x).ops)
    assert captured == _plain_count(block, x)
    # and the profile hook the process had is put back
    assert sys.getprofile() is None
