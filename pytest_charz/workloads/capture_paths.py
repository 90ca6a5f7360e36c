"""What the host's model code does around a captured op (see :mod:`.capture`): which module is
running (the module path an op is named after), and the ``nn.Module`` calls and Python function
calls it made since the op before."""
from __future__ import annotations

import os
import sys
from typing import Any


def tensors_in(tree: Any) -> list[Any]:
    """The tensors among the leaves of a pytree (args, kwargs, outputs)."""
    import torch
    from torch.utils._pytree import tree_leaves

    return [leaf for leaf in tree_leaves(tree) if isinstance(leaf, torch.Tensor)]


def _depth(path: str) -> int:
    return path.count(".") + 1 if path else 0


#: Where the capture's own Python runs while it records (its dispatch and function modes, its
#: module hooks): calls made from frames of these files, and every call nested in them, are the
#: recorder's, not the model's, and are not counted (:class:`PythonCalls`).
RECORDER_FILES = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,)
#: torch's own Python between an op and a mode's handler (its function-mode dispatch, and the way
#: into a Python dispatch mode: the dispatch rule lookup, the dynamo-disabled wrapper, the op
#: packets), paths under ``torch/``: a forward without modes runs none of it per op. A model that
#: calls ``torch.ops`` or ``torch.compile`` itself has those calls left out too.
RECORDER_TORCH_PATHS = ("overrides.py", "utils/_python_dispatch.py", "_compile.py", "_ops.py", "_library/",
                        "_dynamo/")
_TORCH_DIR = os.sep + "torch" + os.sep
#: ``nn.Module.__call__`` takes a slower path while global module hooks are set (the recorder's):
#: a closure ``inner`` around the forward and a ``torch.compiler.is_compiling()`` check, per call,
#: which a forward without hooks does not make. Neither is counted (``inner``'s own callees are).
MODULE_FILE = os.path.join("torch", "nn", "modules", "module.py")
HOOKED_CALL_CLOSURE, HOOKED_CALL_CHECK = "inner", "is_compiling"


class PythonCalls:
    """Python function calls the host makes while the model runs, counted by a profile hook
    (``sys.setprofile``'s ``call`` events: every Python frame entered, a generator's each resume).

    They are eager model code's host time beyond its ops that the ops and module calls do not
    show: a model's forward builds its masks, positions and cache updates, reads its config and
    wraps its outputs in Python between ops, two to eleven calls per op in the transformers
    families the runtime suite runs. The recorder's own frames (its dispatch and function modes,
    its hooks: :data:`RECORDER_FILES`, torch's mode handlers) and everything they call are left
    out, so the count is what the forward makes without the capture around it. A call into C
    (``c_call``) is the op or the builtin it runs, not counted."""

    def __init__(self) -> None:
        self.count = 0
        self._skipping: Any = None
        self._previous: Any = None
        self._uncounted = 0

    def _event(self, frame: Any, event: str, arg: Any) -> None:
        if self._skipping is not None:
            if event == "return" and frame is self._skipping:
                self._skipping = None
            return
        if event != "call":
            return
        code = frame.f_code
        path = code.co_filename
        if path.startswith(RECORDER_FILES) or _recorder_torch_path(path):
            self._skipping = frame
            return
        if self._uncounted:                      # a torch function entered again by the recorder
            self._uncounted -= 1
            return
        if path.endswith(MODULE_FILE) and code.co_name == HOOKED_CALL_CLOSURE:
            return
        caller = frame.f_back
        if (code.co_name == HOOKED_CALL_CHECK and caller is not None
                and caller.f_code.co_filename.endswith(MODULE_FILE)):
            self._skipping = frame
            return
        self.count += 1

    def resumed(self, function: Any) -> "_Resumed":
        """A context in which the model's calls are counted again inside the recorder's function
        mode, around its call of ``function``: the torch function the model called (its frame
        counted once already, when the model entered it) running its body, whose calls a forward
        without the capture makes too."""
        return _Resumed(self, 1 if hasattr(function, "__code__") else 0)

    def __enter__(self) -> "PythonCalls":
        self._previous = sys.getprofile()
        sys.setprofile(self._event)
        return self

    def __exit__(self, *exc: Any) -> None:
        sys.setprofile(self._previous)
        self._skipping = None

    def take(self) -> int:
        """The calls counted since the last take."""
        count, self.count = self.count, 0
        return count


def _recorder_torch_path(path: str) -> bool:
    at = path.rfind(_TORCH_DIR)
    return at >= 0 and path[at + len(_TORCH_DIR):].replace(os.sep, "/").startswith(RECORDER_TORCH_PATHS)


class _Resumed:
    def __init__(self, calls: PythonCalls, uncounted: int) -> None:
        self.calls, self.uncounted = calls, uncounted

    def __enter__(self) -> None:
        self.saved = self.calls._skipping
        self.calls._skipping, self.calls._uncounted = None, self.uncounted

    def __exit__(self, *exc: Any) -> None:
        self.calls._skipping, self.calls._uncounted = self.saved, 0


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
        #: Python calls of the model's code, where counted (:meth:`counting`, :meth:`take_python_calls`)
        self.python: PythonCalls | None = None

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

    def counting(self) -> PythonCalls:
        """A context inside which the model's Python calls are counted (:class:`PythonCalls`)."""
        self.python = PythonCalls()
        return self.python

    def take_python_calls(self) -> int | None:
        """The model code's Python calls since the last call of this: what the next op's host runs
        in Python before the op itself; None where they are not counted."""
        return None if self.python is None else self.python.take()

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
