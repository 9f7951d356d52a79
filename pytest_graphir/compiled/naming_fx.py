"""Canonical op names and module scopes for the nodes of Dynamo FX graphs.

The eager side (:mod:`pytest_graphir.opnames`) names what the model's code
calls; this module names what Dynamo put into its FX ``GraphModule`` under the same
rules, so the two sequences can be aligned op for op (``docs/torch-notes.md``,
*Canonical op naming*: GPT-2
small gave 529/529 identical ops and scopes):

* ``call_function`` on an ``operator.*`` builtin maps to the op (``operator.add`` ->
  ``add``, ``operator.iadd`` -> ``add_``, ``operator.getitem`` -> ``getitem``); with a
  number first and a tensor second, ``sub``/``truediv``/``floordiv``/``mod`` are the
  reflected ops eager records (``2 - x`` is ``Tensor.__rsub__``: ``rsub``).
* ``builtins.getattr(x, "T")``, Dynamo's form of a tensor property read, maps to the
  property's op (``t``, ``transpose``, ``adjoint`` ...).
* Any other target goes through :func:`pytest_graphir.opnames.canonical_op`
  (``torch.overrides.resolve_name``): ``torch._C._nn.linear`` is ``linear``.
* ``call_method`` is ``torch.Tensor.<name>`` under the same rules.
* Dropped: placeholders, outputs, ``get_attr``; metadata queries; grad-mode,
  autocast and assertion nodes; nodes that neither take nor give a tensor; Dynamo's
  bookkeeping (compiled autograd's ``setup_input_hook`` / ``setup_output_hook`` and
  other methods of non-tensors, ``torch._dynamo.external_utils``, ``polyfills``,
  ``torch._functorch.predispatch``); ``getitem`` that indexes a Python tuple or list
  (the results of ``split``); and nodes whose value is a Python or symbolic number (shape
  arithmetic, which eager runs as plain Python and never records). NumPy functions
  Dynamo traced become ``numpy.<name>`` (``torch._dynamo.utils.wrapped_tanh``).

Scopes come from ``node.meta["nn_module_stack"]``: its entries, keyed by
``str(id(module))`` (``@<n>`` appended for a repeated call), are looked up among the
model's modules from the innermost outward, so an unregistered module's ops belong to
the registered module that called it; without the model the source name is normalised
(``L['self'].transformer.h[0].attn`` -> ``transformer.h.0.attn``).
"""

from __future__ import annotations

import operator
import re
from typing import Any

import torch
import torch.fx

from ..leaves import flatten
from ..opnames import canonical_from_qualname, canonical_op

_OPERATOR_NAMES = (
    "add sub mul truediv floordiv mod pow matmul neg pos abs invert and_ or_ xor lshift rshift "
    "eq ne lt le gt ge getitem setitem iadd isub imul itruediv ipow iand ior ixor"
)
OPERATORS: dict[Any, str] = {
    getattr(operator, name): str(canonical_from_qualname(f"torch.Tensor.__{name.strip('_')}__"))
    for name in _OPERATOR_NAMES.split()
}
OPERATORS[operator.inv] = OPERATORS[operator.invert]
"""``operator`` builtins in Dynamo graphs and the canonical op eager records for them: the
name of the ``torch.Tensor`` dunder each stands for (``operator.iadd`` -> ``__iadd__``
-> ``add_``)."""

REFLECTED = {"sub": "rsub", "div": "rdiv", "floor_divide": "rfloordiv", "remainder": "rremainder"}
"""Ops whose reflected form eager records under its own name (``2 - x`` -> ``rsub``)."""

CONTEXT_OPS = frozenset(
    {
        "_set_grad_enabled",
        "set_grad_enabled",
        "_enter_autocast",
        "_exit_autocast",
        "_assert",
        "_check",
        "_check_is_size",
        "_assert_async",
        "_log_api_usage_once",
        "_functorch.predispatch._add_batch_dim",
        "sym_size",
        "sym_stride",
        "sym_numel",
        "sym_storage_offset",
        "_assert_scalar",
        "_assert_tensor_metadata",
    }
)
"""Canonical names of FX nodes that only set state or assert, never ops eager records."""

BOOKKEEPING_MODULES = (
    "torch._dynamo.compiled_autograd",
    "torch._dynamo.external_utils",
    "torch._dynamo.polyfills",
    "torch.fx.experimental",
    "torch._functorch.predispatch",
)
"""Modules whose functions Dynamo puts into graphs for its own bookkeeping (compiled
autograd's ``setup_input_hook`` and the like, shape guards, the batch-dimension
calls of a traced ``torch.vmap``): never a model op."""

BOOKKEEPING_METHODS = frozenset({"setup_input_hook", "setup_output_hook"})
"""``call_method`` targets of Dynamo's in-graph module backward hooks (compiled
autograd's ``torch.utils.hooks.BackwardHook``): never a tensor op."""

NUMPY_PREFIX = "numpy."
"""Canonical prefix of a NumPy function Dynamo traced into torch ops
(``torch._dynamo.utils.wrapped_tanh`` -> ``numpy.tanh``)."""

_SCALARS = (bool, int, float, torch.SymInt, torch.SymFloat, torch.SymBool, torch.Size)
_ROOT = re.compile(r"^(?:L|G)\[(['\"])[^'\"]*\1\]\.?")
_MODULES = re.compile(r"\._(?:modules|parameters|buffers)\[(['\"])([^'\"\]]+)\1\]")
_INDEX = re.compile(r"\[(\d+)\]")
_KEY = re.compile(r"\[(['\"])([^'\"\]]+)\1\]")
_GETATTR = re.compile(r"getattr\((.*), (['\"])([^'\"]+)\2\)$")


def normalise_module_source(source: str) -> str:
    """Turn a Dynamo source name into a module path relative to the frame's root.

    Args:
        source: ``nn_module_stack`` path, e.g. ``"L['self'].transformer.h[0].attn"``
            or ``"L['self']._modules['fc']"``.

    Returns:
        ``"transformer.h.0.attn"``, ``"fc"``; ``""`` for the frame's root itself.
    """
    path = source
    while m := _GETATTR.match(path):  # getattr(L['self'].h, '0') -> L['self'].h.0
        path = f"{m.group(1)}.{m.group(3)}"
    path = _MODULES.sub(r".\2", path)
    path = _ROOT.sub("", path)
    path = _INDEX.sub(r".\1", path)
    path = _KEY.sub(r".\2", path)
    return path.strip(".")


def _holds_tensor(value: Any) -> bool:
    return any(isinstance(v, torch.Tensor) for _, v in flatten(value, ""))


def _value(arg: Any) -> Any:
    """The example value of an FX node argument; None for a constant."""
    return arg.meta.get("example_value") if isinstance(arg, torch.fx.Node) else None


def is_tensorless(node: torch.fx.Node) -> bool:
    """True when a node neither takes nor gives a tensor (``_set_grad_enabled``,
    ``_log_api_usage_once``): state calls that eager records and Dynamo may not."""
    return not any(
        _holds_tensor(n.meta.get("example_value")) or n.op == "get_attr"
        for n in (node, *node.all_input_nodes)
    )


def is_bookkeeping(target: Any) -> bool:
    """True for functions of :data:`BOOKKEEPING_MODULES` (compiled autograd, polyfills)."""
    module = getattr(target, "__module__", None) or ""
    return any(module == m or module.startswith(m + ".") for m in BOOKKEEPING_MODULES)


def numpy_name(target: Any) -> str | None:
    """``numpy.tanh`` for Dynamo's wrapper of ``np.tanh`` (``torch._dynamo.utils.
    wrapped_tanh``, or a ``torch._numpy`` function); None for anything else."""
    module = getattr(target, "__module__", None) or ""
    name = getattr(target, "__name__", "") or ""
    if module == "torch._dynamo.utils" and name.startswith("wrapped_"):
        return NUMPY_PREFIX + name[len("wrapped_") :]
    if module.startswith("torch._numpy"):
        return NUMPY_PREFIX + name
    return None


def _target_name(target: Any) -> tuple[str | None, str]:
    """Canonical name and raw qualified name of a ``call_function`` target; a
    ``torch.ops`` operator is known by its ``overloadpacket`` (an overload) or its
    ``overloads`` (a packet), as ``__torch_dispatch__`` code reads it."""
    packet = getattr(target, "overloadpacket", target if hasattr(target, "overloads") else None)
    if packet is not None:
        return canonical_from_qualname(str(packet.__name__)), str(target)
    name = OPERATORS.get(target)
    if name is not None:
        return name, f"operator.{getattr(target, '__name__', name)}"
    return canonical_op(target)


def canonical_from_fx_node(node: torch.fx.Node) -> tuple[str | None, str]:
    """Return ``(canonical op name or None, raw name)`` for one Dynamo FX node.

    Args:
        node: a node of the ``GraphModule`` a Dynamo backend receives (torch-level,
            before AOT Autograd), with ``node.meta["example_value"]`` as Dynamo sets it.

    Returns:
        The canonical name (``"linear"``, ``"add"``, ``"t"``), or ``None`` when the
        node is not an op eager would record (see the module docstring); and the raw
        name for debugging (``"call_function:torch._C._nn.linear"``,
        ``"call_method:view"``).
    """
    raw = f"{node.op}:{getattr(node.target, '__name__', node.target)}"
    if node.op not in ("call_function", "call_method", "call_module") or isinstance(
        node.meta.get("example_value"), _SCALARS
    ):
        return None, raw
    if node.op == "call_module":
        return f"module:{node.target}", raw
    if node.op == "call_function":
        if is_bookkeeping(node.target):
            return None, raw
        np_name = numpy_name(node.target)
        if np_name is not None:
            return np_name, f"call_function:{np_name}"
    if is_tensorless(node):
        return None, raw
    if node.op == "call_method":
        value_of = _value(node.args[0] if node.args else None)
        if node.target in BOOKKEEPING_METHODS or (
            value_of is not None and not isinstance(value_of, torch.Tensor)
        ):
            return None, raw  # a method of a non-tensor (compiled autograd's BackwardHook)
        name = canonical_from_qualname(f"torch.Tensor.{node.target}")
    else:
        if node.target is getattr and len(node.args) >= 2 and isinstance(node.args[1], str):
            prop = node.args[1]
            return canonical_from_qualname(f"torch.Tensor.{prop}.__get__"), f"getattr:{prop}"
        name, qual = _target_name(node.target)
        raw = f"call_function:{qual}"
        if name in REFLECTED and len(node.args) >= 2:
            first, second = node.args[0], node.args[1]
            if not isinstance(first, torch.fx.Node) and isinstance(second, torch.fx.Node):
                name = REFLECTED[name]
    if name is None or name in CONTEXT_OPS:
        return None, raw
    if name == "getitem" and node.args and not isinstance(_value(node.args[0]), torch.Tensor):
        return None, raw  # indexing a tuple or list of results, not a tensor op
    return name, raw


_STACK_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n?(?:[ \t]+(.*))?')


def stack_frames(node: torch.fx.Node) -> tuple[tuple[str, int, str, str], ...]:
    """The user stack of an FX node, outermost first: ``(file, line, function, code)``.

    Parsed from ``node.meta["stack_trace"]`` (the ``traceback`` format Dynamo writes:
    ``File "/src/model.py", line 12, in forward`` then the code line); empty when the
    node has none.
    """
    text = node.meta.get("stack_trace")
    if not isinstance(text, str) or not text:
        return ()
    return tuple(
        (m.group(1), int(m.group(2)), m.group(3), (m.group(4) or "").strip())
        for m in _STACK_FRAME.finditer(text)
    )


def module_stack_scope(node: torch.fx.Node, paths: dict[int, str] | None) -> str | None:
    """Return the module path of the innermost registered module a node was traced in.

    A module that runs but is not registered under the model (an instance held in a
    global or built in ``forward``, as transformers' hub kernels are) owns no ops: its
    ops belong to the nearest registered module on the stack, as in eager capture
    (``docs/compiled.md``, *Unregistered modules*). So the stack is walked outward from
    its innermost entry to the first module found in ``paths``.

    Args:
        node: a Dynamo FX node.
        paths: ``id(module) -> module path`` for the model's modules, or None.

    Returns:
        The module path (``"transformer.h.0.attn"``, ``""`` for the model itself), or
        ``None`` when the node has no ``nn_module_stack`` entry: it ran in the compiled
        frame's own code, whose module is known only when the graph runs. Without
        ``paths`` (or when no entry is among them) it is the normalised source name of
        the innermost entry reached through the frame's locals (``L[...]``), not a
        global (``G[...]``).
    """
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return None
    sources: list[str] = []
    for key, value in reversed(stack.items()):
        ident = str(key).split("@", 1)[0]  # "140514959955280@1": a module's id, its nth call
        path = paths.get(int(ident)) if paths is not None and ident.isdigit() else None
        if path is not None:
            return path
        sources.append(str(value[0] if isinstance(value, tuple) and value else value))
    local = [source for source in sources if not source.startswith("G[")]
    return normalise_module_source((local or sources)[0])


def aten_name(node: torch.fx.Node) -> str | None:
    """Return the op name of an ATen-level FX node (AOT Autograd graphs), or None.

    ``torch.ops.aten.addmm.default`` -> ``"addmm"``; ``operator.getitem`` (tuple
    indexing of multi-output ops) and non-call nodes give None.
    """
    if node.op != "call_function" or node.target is operator.getitem:
        return None
    named = getattr(node.target, "overloadpacket", node.target)
    return str(getattr(named, "__name__", named))
