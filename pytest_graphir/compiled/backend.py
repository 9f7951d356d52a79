"""Recording Dynamo backends: keep what ``torch.compile`` captured, then run it.

A Dynamo backend is a callable ``(gm: torch.fx.GraphModule, example_inputs) ->
callable``. :class:`GraphRecorder` is one: for every ``GraphModule`` Dynamo hands it,
it keeps a :class:`~pytest_graphir.compiled.records.GraphRecord` (canonical ops with
module scopes, input and output shapes, graph-break reason) and returns a callable
that runs the graph, eagerly (``gm.forward``) or through another backend
(``"aot_eager"``, ``"inductor"``: ``torch._dynamo.lookup_backend``). Each call of a
compiled graph is logged as a :class:`~pytest_graphir.compiled.records.GraphRun`, so
the op sequence a forward executed can be rebuilt even where Dynamo reuses one graph
for several modules. :class:`AotGraphRecorder` also records the ATen forward,
backward and inference graphs from AOT Autograd (``aot_autograd`` with
``fw_compiler``/``bw_compiler``/``inference_compiler`` and ``make_boxed_func``).

Two backends are registered with ``torch._dynamo.register_backend`` when this module
is imported, and are also published through the ``torch_dynamo_backends`` entry
point group, so ``torch.compile(model, backend="graphir")`` works after
``pip install`` without importing anything first:

* ``"graphir"``: :func:`graphir`, a :class:`GraphRecorder` running graphs eagerly;
  ``options={"delegate": "aot_eager"}`` picks another backend for running them.
* ``"graphir_aot"``: :func:`graphir_aot`, an :class:`AotGraphRecorder`.

The named backends record into the innermost :func:`recording` block, or else into
:data:`default_recorder` / :data:`default_aot_recorder`::

    with recording(model=model) as rec:
        torch.compile(model, backend="graphir")(x)
    rec.graphs[0].op_counts()
"""

from __future__ import annotations

import contextlib
import functools
import operator
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from ..leaves import flatten
from ..names import dtype_name
from ..opnames import REFLECTED, canonical_from_qualname, canonical_op
from .records import AtenGraphRecord, CompiledOp, FxOp, GraphRecord, GraphRun, TensorSpec
from .watch import AT_LINE, STACK_FRAME, clean_reason, frame_root, module_paths, rebase

BACKEND_NAME = "graphir"
"""Name of the recording backend in Dynamo's registry (``torch.compile(backend=...)``)."""
AOT_BACKEND_NAME = "graphir_aot"
"""Name of the AOT Autograd recording backend."""

Delegate = str | Callable[..., Any]
"""``"eager"`` (run ``gm.forward``), a registered backend's name, or a backend callable."""


def _specs(nodes: Iterable[Any]) -> list[TensorSpec]:
    """Shape and dtype of each FX node of ``nodes`` whose example value is a tensor."""
    values = [n.meta.get("example_value") for n in nodes if isinstance(n, torch.fx.Node)]
    return [
        TensorSpec([d if isinstance(d, int) else str(d) for d in v.shape], dtype_name(v.dtype))
        for v in values
        if isinstance(v, torch.Tensor)
    ]


def _is_param(node: torch.fx.Node) -> bool:
    name = getattr(getattr(node.meta.get("grapharg"), "source", None), "name", None)
    name = name() if callable(name) else name  # a method in older torch, a property in newer
    if isinstance(name, str) and name:
        return "._parameters[" in name or "._buffers[" in name
    return "_parameters_" in str(node.target) or "_buffers_" in str(node.target)


def _body(gm: torch.fx.GraphModule, node: torch.fx.Node) -> torch.fx.GraphModule | None:
    """The first ``GraphModule`` a higher-order op's node takes (``get_attr`` argument)."""
    args = [a for a in node.args if isinstance(a, torch.fx.Node) and a.op == "get_attr"]
    subs = (getattr(gm, str(a.target), None) for a in args)
    return next((sub for sub in subs if isinstance(sub, torch.fx.GraphModule)), None)


class GraphRecorder:
    """A Dynamo backend that records every FX graph, then runs it.

    Pass an instance to ``torch.compile(model, backend=recorder)``. Relies on the
    Dynamo backend contract (``(gm, example_inputs) -> callable``),
    ``node.meta["nn_module_stack"]`` / ``["example_value"]`` / ``["grapharg"]``,
    ``gm.compile_subgraph_reason`` and ``torch._guards.CompileContext``.

    Args:
        delegate: how graphs run: ``"eager"`` (``gm.forward``, the default; nothing
            is compiled further), a registered backend's name (``"aot_eager"``,
            ``"inductor"``, looked up with ``torch._dynamo.lookup_backend``), or a
            backend callable.
        model: the model being compiled. With it, op scopes are module paths of
            this model, and the module each graph's frame belongs to is found on the
            stack; without it, scopes are normalised ``nn_module_stack`` source names.
        keep_graph_modules: keep each ``GraphModule`` on its record (for debugging;
            off by default so records hold no graph).

    Attributes:
        graphs: one :class:`GraphRecord` per graph received, in compile order.
        runs: one :class:`GraphRun` per call of a compiled graph, in call order.
    """

    def __init__(
        self,
        delegate: Delegate = "eager",
        *,
        model: torch.nn.Module | None = None,
        keep_graph_modules: bool = False,
    ) -> None:
        self.delegate = delegate
        self.keep_graph_modules = keep_graph_modules
        self.paths: dict[int, str] | None = module_paths(model) if model is not None else None
        self.graphs: list[GraphRecord] = []
        self.runs: list[GraphRun] = []

    def __call__(
        self, gm: torch.fx.GraphModule, example_inputs: list[Any], **kwargs: Any
    ) -> Callable[..., Any]:
        """Record ``gm`` and return a callable that runs it (see the class docstring).

        Args:
            gm: the graph Dynamo captured.
            example_inputs: its example inputs, passed on to the delegate.
            **kwargs: ``options`` (a dict; ``{"delegate": name}`` overrides the
                delegate for this graph) and ``mode``, as ``torch.compile`` passes
                them; other keys are passed on to a named delegate.

        Returns:
            A callable running the graph that logs each call in :attr:`runs`.

        Raises:
            torch._dynamo.exc.InvalidBackend: the delegate's name is unknown.
        """
        options = dict(kwargs.pop("options", None) or {})
        delegate = options.pop("delegate", self.delegate)
        record = self.record(gm)
        compiled: Callable[..., Any] = gm.forward
        if delegate not in ("eager", BACKEND_NAME):  # "graphir": the graph is recorded already
            extra = {**kwargs, "options": options} if options else kwargs
            # lookup_backend returns a callable as is, and looks a name up
            compiled = torch._dynamo.lookup_backend(delegate)(gm, example_inputs, **extra)

        def run(*args: Any) -> Any:
            self.runs.append(GraphRun(record.index, self._root()))
            return compiled(*args)

        return run

    def _root(self) -> str | None:
        """The module path of the frame that calls the graph or is compiled, if known."""
        return frame_root(sys._getframe(), self.paths) if self.paths is not None else None

    def record(self, gm: torch.fx.GraphModule) -> GraphRecord:
        """Append and return the :class:`GraphRecord` of one Dynamo graph."""
        nodes = gm.graph.nodes
        calls = [(canonical_from_fx_node(n), n, scope) for n, scope in self._calls(gm, None)]
        reason: Any = getattr(gm, "compile_subgraph_reason", None)
        graph_break = bool(getattr(reason, "graph_break", False))
        stack = getattr(reason, "user_stack", None) or []
        record = GraphRecord(
            index=len(self.graphs),
            ops=[FxOp(name, scope, stack_frames(n)) for name, n, scope in calls if name],
            inputs=_specs(n for n in nodes if n.op == "placeholder" and not _is_param(n)),
            outputs=_specs(v for n in nodes if n.op == "output" for _, v in flatten(n.args, "")),
            graph_break=graph_break,
            break_reason=clean_reason(str(reason.reason)) if graph_break else None,
            frame=AT_LINE.sub("", stack[0].name) if stack else "",  # no line numbers
            compile_id=str(gm.meta.get("dynamo_compile_id") or ""),
            frame_root=self._root(),
            # every call node's kind and target name: "call_function:linear"
            raw_ops=[f"{n.op}:{getattr(n.target, '__name__', n.target)}" for _, n, _ in calls],
            graph_module=gm if self.keep_graph_modules else None,
        )
        self.graphs.append(record)
        return record

    def _calls(
        self, gm: torch.fx.GraphModule, outer: str | None
    ) -> Iterator[tuple[torch.fx.Node, str | None]]:
        """Each call node with its module scope (``outer`` when it has none); a
        higher-order op (``torch.utils.checkpoint``'s ``tag_activation_checkpoint``,
        ``autograd_function_apply``, ``wrap``) is replaced by the calls of its body
        subgraph (its first ``GraphModule`` argument), which are the ops eager runs.
        Other nodes (placeholders, outputs, ``get_attr``) are skipped."""
        for node in gm.graph.nodes:
            if node.op in ("call_function", "call_method", "call_module"):
                scope = module_stack_scope(node, self.paths)
                scope = scope if scope is not None else outer
                body = _body(gm, node) if node.op == "call_function" else None
                yield from self._calls(body, scope) if body is not None else [(node, scope)]

    def executed_ops(self, start: int = 0, stop: int | None = None) -> list[CompiledOp]:
        """The ops the compiled graphs ran, in run order, as :class:`CompiledOp` (op,
        scope, graph index, source frames, run index).

        Args:
            start: first run to include (an index into :attr:`runs`).
            stop: run to stop before (None: to the last run).

        Ops traced in a frame's own code take the module of the frame that called the
        graph; a graph Dynamo reused for another module (same code, another instance)
        has its scopes moved to that module (:func:`~.watch.rebase`).
        """
        out: list[CompiledOp] = []
        for index, run in enumerate(self.runs[start:stop], start):
            graph = self.graphs[run.graph]
            base = graph.frame_root
            root = run.frame_root if run.frame_root is not None else base
            for op in graph.ops:
                scope = (root or "") if op.scope is None else rebase(op.scope, base, root)
                out.append(CompiledOp(op.target, scope, run.graph, op.frames, run=index))
        return out

    def reset(self) -> None:
        """Forget every record and run (``torch._dynamo.reset()`` calls a named backend's)."""
        self.graphs.clear()
        self.runs.clear()


class AotGraphRecorder(GraphRecorder):
    """A :class:`GraphRecorder` whose graphs run through AOT Autograd, recording the ATen
    forward, backward and inference graphs as well.

    Relies on ``torch._dynamo.backends.common.aot_autograd`` (with ``fw_compiler``,
    ``bw_compiler``, ``inference_compiler``) and
    ``make_boxed_func`` (``torch._functorch``). With grad enabled, the forward
    and backward compilers fire (the backward graph is compiled when backward first
    runs); under ``torch.no_grad()`` only the inference compiler does. Its cost against
    Dynamo alone is measured in ``docs/torch-notes.md`` (*aot_autograd compilers and
    their cost*).

    Args:
        model: as for :class:`GraphRecorder`.
        keep_graph_modules: keep the Dynamo and ATen ``GraphModule``s on the records.

    Attributes:
        aten_graphs: one :class:`AtenGraphRecord` per ATen graph, in compile order.
    """

    def __init__(
        self, *, model: torch.nn.Module | None = None, keep_graph_modules: bool = False
    ) -> None:
        from torch._dynamo.backends.common import aot_autograd

        self.aten_graphs: list[AtenGraphRecord] = []
        aot = aot_autograd(
            fw_compiler=functools.partial(self._compile_aten, "forward"),
            bw_compiler=functools.partial(self._compile_aten, "backward"),
            inference_compiler=functools.partial(self._compile_aten, "inference"),
        )
        super().__init__(aot, model=model, keep_graph_modules=keep_graph_modules)

    def _compile_aten(self, kind: str, gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        from functorch.compile import make_boxed_func  # type: ignore[import-untyped]

        ops = [name for n in gm.graph.nodes if (name := aten_name(n)) is not None]
        self.aten_graphs.append(AtenGraphRecord(kind, ops, gm if self.keep_graph_modules else None))
        return make_boxed_func(gm.forward)

    def reset(self) -> None:
        """Forget every record, ATen graphs included."""
        super().reset()
        self.aten_graphs.clear()


default_recorder = GraphRecorder()
"""Where the ``"graphir"`` backend records outside any :func:`recording` block."""
default_aot_recorder = AotGraphRecorder()
"""Where the ``"graphir_aot"`` backend records outside any :func:`recording` block."""
_active: list[GraphRecorder] = [default_recorder, default_aot_recorder]
"""The recorders the named backends record into: the defaults, then the open
:func:`recording` blocks' (innermost last)."""


@contextlib.contextmanager
def recording(
    model: torch.nn.Module | None = None,
    *,
    aot: bool = False,
    delegate: Delegate = "eager",
    keep_graph_modules: bool = False,
) -> Iterator[GraphRecorder]:
    """Collect what the named backends (``"graphir"``, ``"graphir_aot"``) record.

    Args:
        model: the model, for module-path scopes (see :class:`GraphRecorder`).
        aot: yield an :class:`AotGraphRecorder` (used by ``"graphir_aot"``).
        delegate: how ``"graphir"`` runs graphs recorded here (not with ``aot``).
        keep_graph_modules: keep the ``GraphModule``s on the records.

    Yields:
        The recorder; graphs compiled by the named backends inside the block land in it.
    """
    kept: dict[str, Any] = {"model": model, "keep_graph_modules": keep_graph_modules}
    recorder = AotGraphRecorder(**kept) if aot else GraphRecorder(delegate, **kept)
    _active.append(recorder)
    try:
        yield recorder
    finally:
        _active.remove(recorder)


def _current(aot: bool) -> GraphRecorder:
    return next(r for r in reversed(_active) if isinstance(r, AotGraphRecorder) == aot)


def graphir(
    gm: torch.fx.GraphModule, example_inputs: list[Any], **kwargs: Any
) -> Callable[..., Any]:
    """The ``"graphir"`` Dynamo backend: record the graph, run it eagerly.

    ``torch.compile(model, backend="graphir", options={"delegate": "aot_eager"})``
    runs graphs through another backend. Records go to the innermost :func:`recording`
    block, else to :data:`default_recorder`.

    Args:
        gm: the graph Dynamo captured.
        example_inputs: its example inputs.
        **kwargs: ``options``/``mode`` from ``torch.compile``.

    Returns:
        The callable that runs the graph.
    """
    return _current(False)(gm, example_inputs, **kwargs)


def graphir_aot(
    gm: torch.fx.GraphModule, example_inputs: list[Any], **kwargs: Any
) -> Callable[..., Any]:
    """The ``"graphir_aot"`` Dynamo backend: record the Dynamo graph and its ATen graphs.

    Records go to the innermost ``recording(aot=True)`` block, else to
    :data:`default_aot_recorder`.

    Args:
        gm: the graph Dynamo captured.
        example_inputs: its example inputs.
        **kwargs: ``options``/``mode`` from ``torch.compile`` (ignored).

    Returns:
        The callable that runs the graph through AOT Autograd.
    """
    return _current(True)(gm, example_inputs)


# "graphir" and "graphir_aot" registered with torch._dynamo.register_backend, once: a name
# already registered is left alone, and so is a name that Dynamo's registry knows from the
# torch_dynamo_backends entry point but has not loaded yet (lookup_backend registers the
# entry point's object itself, importing this module, and a second registration would
# fail with "duplicate name")
_known = torch._dynamo.list_backends(exclude_tags=())  # registered or entry points
for _name, _fn in ((BACKEND_NAME, graphir), (AOT_BACKEND_NAME, graphir_aot)):
    if _name not in _known:
        torch._dynamo.register_backend(_fn, name=_name)

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

CONTEXT_OPS = frozenset(
    "_set_grad_enabled set_grad_enabled _enter_autocast _exit_autocast _assert _check "
    "_check_is_size _assert_async _log_api_usage_once _functorch.predispatch._add_batch_dim "
    "sym_size sym_stride sym_numel sym_storage_offset _assert_scalar "
    "_assert_tensor_metadata".split()
)
"""Canonical names of FX nodes that only set state or assert, never ops eager records."""

BOOKKEEPING_MODULES = tuple(
    "torch._dynamo.compiled_autograd torch._dynamo.external_utils torch._dynamo.polyfills "
    "torch.fx.experimental torch._functorch.predispatch".split()
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
    for pattern, replacement in ((_MODULES, r".\2"), (_ROOT, ""), (_INDEX, r".\1"), (_KEY, r".\2")):
        path = pattern.sub(replacement, path)
    return path.strip(".")


def _value(arg: Any) -> Any:
    """The example value of an FX node argument; None for a constant."""
    return arg.meta.get("example_value") if isinstance(arg, torch.fx.Node) else None


def _target_name(target: Any) -> str | None:
    """Canonical name of a ``call_function`` target; a ``torch.ops`` operator is known
    by its ``overloadpacket`` (an overload) or its ``overloads`` (a packet), as
    ``__torch_dispatch__`` code reads it."""
    packet = getattr(target, "overloadpacket", target if hasattr(target, "overloads") else None)
    if packet is not None:
        return canonical_from_qualname(str(packet.__name__))
    return OPERATORS.get(target) or canonical_op(target)[0]


def canonical_from_fx_node(node: torch.fx.Node) -> str | None:
    """Return the canonical op name of one Dynamo FX node, or None.

    Args:
        node: a call node of the ``GraphModule`` a Dynamo backend receives (torch-level,
            before AOT Autograd), with ``node.meta["example_value"]`` as Dynamo sets it.

    Returns:
        The canonical name (``"linear"``, ``"add"``, ``"t"``), or ``None`` when the
        node is not an op eager would record (see the module docstring).
    """
    if isinstance(node.meta.get("example_value"), _SCALARS):
        return None
    if node.op == "call_module":
        return f"module:{node.target}"
    # a function of BOOKKEEPING_MODULES is never an op; Dynamo's wrapper of np.tanh
    # (torch._dynamo.utils.wrapped_tanh, or a torch._numpy function) is numpy.tanh
    module = getattr(node.target, "__module__", None) or ""  # "" for a call_method's name
    if any(module == m or module.startswith(m + ".") for m in BOOKKEEPING_MODULES):
        return None
    function = getattr(node.target, "__name__", "") or ""
    if module == "torch._dynamo.utils" and function.startswith("wrapped_"):
        return NUMPY_PREFIX + function.removeprefix("wrapped_")
    if module.startswith("torch._numpy"):
        return NUMPY_PREFIX + function
    if not any(  # neither takes nor gives a tensor: a state call (_set_grad_enabled,
        # _log_api_usage_once) that eager records and Dynamo may not
        n.op == "get_attr"
        or any(isinstance(v, torch.Tensor) for _, v in flatten(n.meta.get("example_value"), ""))
        for n in (node, *node.all_input_nodes)
    ):
        return None
    args = node.args
    if node.op == "call_method":
        value_of = _value(args[0] if args else None)
        if node.target in BOOKKEEPING_METHODS or (
            value_of is not None and not isinstance(value_of, torch.Tensor)
        ):
            return None  # a method of a non-tensor (compiled autograd's BackwardHook)
        name = canonical_from_qualname(f"torch.Tensor.{node.target}")
    elif node.target is getattr and len(args) >= 2 and isinstance(args[1], str):
        return canonical_from_qualname(f"torch.Tensor.{args[1]}.__get__")
    else:
        name = _target_name(node.target)
        if name in REFLECTED and len(args) >= 2 and isinstance(args[1], torch.fx.Node):
            name = REFLECTED[name] if not isinstance(args[0], torch.fx.Node) else name
    if name is None or name in CONTEXT_OPS:
        return None
    if name == "getitem" and args and not isinstance(_value(args[0]), torch.Tensor):
        return None  # indexing a tuple or list of results, not a tensor op
    return name


def stack_frames(node: torch.fx.Node) -> tuple[tuple[str, int, str, str], ...]:
    """The user stack of an FX node, outermost first: ``(file, line, function, code)``.

    Parsed from ``node.meta["stack_trace"]`` (the ``traceback`` format Dynamo writes:
    ``File "/src/model.py", line 12, in forward`` then the code line); empty when the
    node has none.
    """
    text = node.meta.get("stack_trace") or ""  # None where Dynamo recorded none
    return tuple(
        (m.group(1), int(m.group(2)), m.group(3), (m.group(4) or "").strip())
        for m in STACK_FRAME.finditer(text)
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
        The module path (``"transformer.h.0.attn"``, ``""`` for the model itself).
        ``None`` when the node ran in the compiled frame's own code, whose module is
        known only when the graph runs: no ``nn_module_stack`` entry, or none among
        ``paths`` (only modules registered nowhere: a frame Dynamo resumed after a
        graph break has its own module off the stack, and calls them through a global,
        ``G[...]``, or a value it held on the stack, ``L['___stack0']``). Without
        ``paths``, the normalised source name of the innermost entry reached through
        the frame's own locals.
    """
    sources: list[str] = []  # no nn_module_stack: None, below
    for key, value in reversed((node.meta.get("nn_module_stack") or {}).items()):
        ident = str(key).split("@", 1)[0]  # "140514959955280@1": a module's id, its nth call
        path = paths.get(int(ident)) if paths is not None and ident.isdecimal() else None
        if path is not None:
            return path
        sources.append(str(value[0] if isinstance(value, tuple) and value else value))
    if paths is not None:  # only modules registered nowhere: the frame's own module's
        return None
    local = [source for source in sources if not source.startswith(("G[", "L['___stack"))]
    return normalise_module_source(local[0]) if local else None


def aten_name(node: torch.fx.Node) -> str | None:
    """Return the op name of an ATen-level FX node (AOT Autograd graphs), or None.

    ``torch.ops.aten.addmm.default`` -> ``"addmm"``; ``operator.getitem`` (tuple
    indexing of multi-output ops) and non-call nodes give None.
    """
    if node.op != "call_function" or node.target is operator.getitem:
        return None
    named = getattr(node.target, "overloadpacket", node.target)
    return str(getattr(named, "__name__", named))
