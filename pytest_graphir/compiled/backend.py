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
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
import torch.fx

from ..leaves import flatten
from ..names import dtype_name
from .frames import AT_LINE, clean_reason, frame_root, module_paths, rebase
from .naming_fx import aten_name, canonical_from_fx_node, module_stack_scope, stack_frames
from .records import AtenGraphRecord, CompiledOp, FxOp, GraphRecord, GraphRun, TensorSpec

BACKEND_NAME = "graphir"
"""Name of the recording backend in Dynamo's registry (``torch.compile(backend=...)``)."""
AOT_BACKEND_NAME = "graphir_aot"
"""Name of the AOT Autograd recording backend."""

ENTRY_POINTS = (
    f'{BACKEND_NAME} = "pytest_graphir.compiled.backend:graphir"',
    f'{AOT_BACKEND_NAME} = "pytest_graphir.compiled.backend:graphir_aot"',
)
"""The ``[project.entry-points.torch_dynamo_backends]`` lines of ``pyproject.toml``."""

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
    if callable(name):  # a method in older torch versions, a property in newer ones
        name = name()
    if isinstance(name, str) and name:
        return "._parameters[" in name or "._buffers[" in name
    target = str(node.target)
    return "_parameters_" in target or "_buffers_" in target


def _body(gm: torch.fx.GraphModule, node: torch.fx.Node) -> torch.fx.GraphModule | None:
    """The first ``GraphModule`` a higher-order op's node takes (``get_attr`` argument)."""
    for arg in node.args:
        if isinstance(arg, torch.fx.Node) and arg.op == "get_attr":
            sub = getattr(gm, str(arg.target), None)
            if isinstance(sub, torch.fx.GraphModule):
                return sub
    return None


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
            if isinstance(delegate, str):
                delegate = torch._dynamo.lookup_backend(delegate)
            extra = {**kwargs, "options": options} if options else kwargs
            compiled = delegate(gm, example_inputs, **extra)

        def run(*args: Any) -> Any:
            root = frame_root(sys._getframe(1), self.paths) if self.paths is not None else None
            self.runs.append(GraphRun(record.index, root))
            return compiled(*args)

        return run

    def record(self, gm: torch.fx.GraphModule) -> GraphRecord:
        """Append and return the :class:`GraphRecord` of one Dynamo graph."""
        nodes = list(gm.graph.nodes)
        ops: list[FxOp] = []
        raw_ops: list[str] = []
        for node in nodes:
            self._record_op(gm, node, ops, raw_ops, None)
        reason: Any = getattr(gm, "compile_subgraph_reason", None)
        graph_break = bool(getattr(reason, "graph_break", False))
        stack = getattr(reason, "user_stack", None) or []
        frame = AT_LINE.sub("", stack[0].name) if stack else ""  # no line numbers
        record = GraphRecord(
            index=len(self.graphs),
            ops=ops,
            inputs=_specs(n for n in nodes if n.op == "placeholder" and not _is_param(n)),
            outputs=_specs(v for n in nodes if n.op == "output" for _, v in flatten(n.args, "")),
            graph_break=graph_break,
            break_reason=clean_reason(str(reason.reason)) if graph_break else None,
            frame=frame,
            compile_id=str(gm.meta.get("dynamo_compile_id") or ""),
            frame_root=frame_root(sys._getframe(1), self.paths) if self.paths is not None else None,
            raw_ops=raw_ops,
            graph_module=gm if self.keep_graph_modules else None,
        )
        self.graphs.append(record)
        return record

    def _record_op(
        self,
        gm: torch.fx.GraphModule,
        node: torch.fx.Node,
        ops: list[FxOp],
        raw_ops: list[str],
        outer: str | None,
    ) -> None:
        """Append the op of one call node; a higher-order op (``torch.utils.checkpoint``'s
        ``tag_activation_checkpoint``, ``autograd_function_apply``, ``wrap``) is replaced
        by the ops of its body subgraph (its first ``GraphModule`` argument), which are
        the ops eager runs. Other nodes (placeholders, outputs, ``get_attr``) are skipped."""
        if node.op not in ("call_function", "call_method", "call_module"):
            return
        scope = module_stack_scope(node, self.paths)
        scope = scope if scope is not None else outer
        body = _body(gm, node) if node.op == "call_function" else None
        if body is not None:
            for inner in body.graph.nodes:
                self._record_op(body, inner, ops, raw_ops, scope)
            return
        name, raw = canonical_from_fx_node(node)
        raw_ops.append(raw)
        if name is not None:
            ops.append(FxOp(name, scope, stack_frames(node)))

    def executed_ops(self, start: int = 0, stop: int | None = None) -> list[CompiledOp]:
        """Like :meth:`executed`, as :class:`CompiledOp` (with source frames and run index)."""
        out: list[CompiledOp] = []
        for index, run in enumerate(self.runs[start:stop], start):
            graph = self.graphs[run.graph]
            base = graph.frame_root
            root = run.frame_root if run.frame_root is not None else base
            for op in graph.ops:
                scope = (root or "") if op.scope is None else rebase(op.scope, base, root)
                out.append(CompiledOp(op.target, scope, run.graph, op.frames, run=index))
        return out

    def executed(self, start: int = 0, stop: int | None = None) -> list[tuple[str, str, int]]:
        """The ops the compiled graphs ran, in run order: ``(op, scope, graph index)``.

        Args:
            start: first run to include (an index into :attr:`runs`).
            stop: run to stop before (None: to the last run).

        Ops traced in a frame's own code take the module of the frame that called the
        graph; a graph Dynamo reused for another module (same code, another instance)
        has its scopes moved to that module (:func:`~.frames.rebase`).
        """
        return [(op.op, op.scope, op.graph) for op in self.executed_ops(start, stop)]

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
            fw_compiler=self._compiler("forward"),
            bw_compiler=self._compiler("backward"),
            inference_compiler=self._compiler("inference"),
        )
        super().__init__(aot, model=model, keep_graph_modules=keep_graph_modules)

    def _compiler(self, kind: str) -> Callable[[torch.fx.GraphModule, Any], Any]:
        from functorch.compile import make_boxed_func  # type: ignore[import-untyped]

        def compile_aten(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
            ops = [name for n in gm.graph.nodes if (name := aten_name(n)) is not None]
            self.aten_graphs.append(
                AtenGraphRecord(kind, ops, gm if self.keep_graph_modules else None)
            )
            return make_boxed_func(gm.forward)

        return compile_aten

    def reset(self) -> None:
        """Forget every record, ATen graphs included."""
        super().reset()
        self.aten_graphs.clear()


default_recorder = GraphRecorder()
"""Where the ``"graphir"`` backend records outside any :func:`recording` block."""
default_aot_recorder = AotGraphRecorder()
"""Where the ``"graphir_aot"`` backend records outside any :func:`recording` block."""
_active: list[GraphRecorder] = []


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
    recorder = (
        AotGraphRecorder(model=model, keep_graph_modules=keep_graph_modules)
        if aot
        else GraphRecorder(delegate, model=model, keep_graph_modules=keep_graph_modules)
    )
    _active.append(recorder)
    try:
        yield recorder
    finally:
        _active.remove(recorder)


def _current(aot: bool) -> GraphRecorder:
    found = [r for r in _active if isinstance(r, AotGraphRecorder) == aot]
    return found[-1] if found else default_aot_recorder if aot else default_recorder


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


def register_backends() -> None:
    """Register ``"graphir"`` and ``"graphir_aot"`` with ``torch._dynamo.register_backend``.

    Idempotent. A name already registered is left alone, and so is a name that
    Dynamo's registry knows from the ``torch_dynamo_backends`` entry point but has not
    loaded yet: ``lookup_backend`` registers the entry point's object itself (importing
    this module), and a second registration would fail with ``duplicate name``.
    """
    known = torch._dynamo.list_backends(exclude_tags=())  # registered or entry points
    for name, fn in ((BACKEND_NAME, graphir), (AOT_BACKEND_NAME, graphir_aot)):
        if name not in known:
            torch._dynamo.register_backend(fn, name=name)


register_backends()
