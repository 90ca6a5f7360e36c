"""Which module is running: the module path a captured op is named after (see :mod:`.capture`)."""
from __future__ import annotations

from typing import Any


def tensors_in(tree: Any) -> list[Any]:
    """The tensors among the leaves of a pytree (args, kwargs, outputs)."""
    import torch
    from torch.utils._pytree import tree_leaves

    return [leaf for leaf in tree_leaves(tree) if isinstance(leaf, torch.Tensor)]


def _depth(path: str) -> int:
    return path.count(".") + 1 if path else 0


class ModulePaths:
    """The innermost module running now, as its path from the root (``model.layers.0.mlp``).

    Forward: a stack pushed by global forward pre-hooks and popped by forward hooks. Backward:
    grad hooks on a module's outputs enter it and on its inputs leave it (the way
    ``torch.utils.module_tracker`` does), so backward ops carry the module that made them.
    """

    def __init__(self, root: Any, root_name: str = "") -> None:
        self.names = {id(module): name for name, module in root.named_modules(prefix=root_name)}
        self.root = self.names.get(id(root), root_name)
        self.forward: list[str] = []
        self.backward: list[str] = []
        self.override: str | None = None
        self._handles: list[Any] = []
        #: module calls entered (forward) since the last op took them (:meth:`take_calls`)
        self.entered = 0

    def current(self) -> str:
        import torch

        if self.override is not None:
            return self.override
        if torch._C._current_graph_task_id() != -1:  # inside autograd's backward
            if not self.backward:
                return "backward"
            # A module and its parents enter together (they share the output): the deepest is running.
            order = range(len(self.backward))
            return self.backward[max(order, key=lambda i: (_depth(self.backward[i]), i))]
        return self.forward[-1] if self.forward else ""

    def _pre(self, module: Any, inputs: Any) -> None:
        import torch
        from torch.autograd.graph import register_multi_grad_hook

        name = self.names.get(id(module))
        if name is None:
            return
        self.forward.append(name)
        self.entered += 1
        grads = [t for t in tensors_in(inputs) if t.requires_grad]
        if grads and torch.is_grad_enabled():
            self._handles.append(register_multi_grad_hook(grads, lambda *_: self._leave_backward(name)))

    def in_root(self) -> bool:
        """Whether the root module's own ``forward`` is running (no submodule inside it)."""
        return bool(self.forward) and self.forward[-1] == self.root and len(self.forward) == 1

    def take_calls(self) -> int:
        """The module calls entered since the last call of this (the root's included): what the
        next op's host pays in ``nn.Module.__call__`` before the op itself runs."""
        entered, self.entered = self.entered, 0
        return entered

    def _post(self, module: Any, inputs: Any, output: Any) -> None:
        import torch
        from torch.autograd.graph import register_multi_grad_hook

        name = self.names.get(id(module))
        if name is None:
            return
        if self.forward and self.forward[-1] == name:
            self.forward.pop()
        grads = [t for t in tensors_in(output) if t.requires_grad]
        if grads and torch.is_grad_enabled():
            self._handles.append(register_multi_grad_hook(grads, lambda *_: self.backward.append(name)))

    def _leave_backward(self, name: str) -> None:
        if name in self.backward:
            del self.backward[len(self.backward) - 1 - self.backward[::-1].index(name)]

    def __enter__(self) -> "ModulePaths":
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

        self._handles += [register_module_forward_pre_hook(self._pre), register_module_forward_hook(self._post)]
        return self

    def __exit__(self, *exc: Any) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
