"""What the recording backends keep of each graph Dynamo compiles: plain data, no torch.

A :class:`GraphRecord` is one FX ``GraphModule`` as Dynamo handed it to the backend:
its canonical ops with module scopes, its user inputs and outputs (shapes and
dtypes), and whether it ended at a graph break. A :class:`GraphRun` is one call of
a compiled graph; the runs of a forward, in order, give the op sequence the compiled
model executed. An :class:`AtenGraphRecord` is one ATen graph from AOT Autograd.
None of them holds a tensor or a ``GraphModule`` unless asked to (``keep_graph_modules``).

A :class:`BreakRecord` is one graph break, located in the model (made by
:meth:`~.watch.CompileWatch.breaks`). The op alignment's records live here too: an
:class:`EagerOp` (one op of the eager trace), a :class:`CompiledOp` (one op a compiled
graph ran) and an :class:`OpDivergence` (where the two sequences part).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from ..names import GRAPH_BREAK_PLACE, first_names, op_node_base


@dataclass
class FxOp:
    """One op of a Dynamo graph, canonically named.

    Attributes:
        target: canonical op name (``linear``, ``add``, ``t``), as in the eager trace.
        scope: module path of the innermost module the op was traced in (``""`` for
            the model itself), resolved when the graph was compiled; ``None`` when the
            op ran in the compiled frame's own code (its module is the frame's, known
            when the graph runs).
        frames: the user stack the op was traced from, outermost first, as
            ``(file, line, function, code)``, parsed from the FX node's
            ``meta["stack_trace"]``; empty when Dynamo recorded none. Never written
            into a snapshot (paths and line numbers differ between machines).
    """

    target: str
    scope: str | None
    frames: tuple[tuple[str, int, str, str], ...] = ()


@dataclass
class TensorSpec:
    """Shape and dtype of one graph input or output (symbolic sizes as text, ``s0``)."""

    shape: list[int | str]
    dtype: str


@dataclass
class GraphRecord:
    """One FX ``GraphModule`` Dynamo handed to a recording backend.

    Attributes:
        index: position among the graphs the recorder received (0-based).
        ops: the graph's canonical ops, in graph order.
        inputs: user inputs (placeholders that are not parameters or buffers).
        outputs: tensor outputs of the graph.
        graph_break: True when the graph ended at a graph break
            (``gm.compile_subgraph_reason.graph_break``).
        break_reason: the break's reason, cleaned of paths and line numbers, or None.
        frame: the Python frame Dynamo compiled (``forward``,
            ``torch_dynamo_resume_in_forward``), line numbers dropped.
        compile_id: Dynamo's compile id (``"0/0"``: frame 0, first compile; ``"0/1"``
            is a recompile of frame 0), or ``""`` when unknown.
        frame_root: module path of the module whose code the frame runs, when the
            recorder knows the model and found it on the stack; else None.
        raw_ops: every call node's raw name, dropped ones included (debugging).
        graph_module: the ``GraphModule`` itself when the recorder keeps them.
    """

    index: int
    ops: list[FxOp]
    inputs: list[TensorSpec] = field(default_factory=list)
    outputs: list[TensorSpec] = field(default_factory=list)
    graph_break: bool = False
    break_reason: str | None = None
    frame: str = ""
    compile_id: str = ""
    frame_root: str | None = None
    raw_ops: list[str] = field(default_factory=list)
    graph_module: Any = None

    def op_counts(self) -> dict[str, int]:
        """Canonical op name -> occurrences, sorted by name."""
        return dict(sorted(Counter(op.target for op in self.ops).items()))

    def to_data(self, sequence: bool = False) -> dict[str, Any]:
        """Return a plain, machine-independent summary of this graph.

        Args:
            sequence: include the full op sequence (``scope/op`` strings; an op of the
                frame's own code takes :attr:`frame_root`) besides the per-op counts.

        Returns:
            ``{"frame", "ops", "op_counts", "inputs", "outputs", "graph_break",
            "break_reason"}`` (+ ``"sequence"``); no ids, paths or line numbers.
        """
        data: dict[str, Any] = {
            "frame": self.frame,
            "ops": len(self.ops),
            "op_counts": self.op_counts(),
            "inputs": [asdict(t) for t in self.inputs],  # {"shape": [...], "dtype": "float32"}
            "outputs": [asdict(t) for t in self.outputs],
            "graph_break": self.graph_break,
        }
        if self.break_reason:
            data["break_reason"] = self.break_reason
        if sequence:
            ops = [(self.frame_root if o.scope is None else o.scope, o.target) for o in self.ops]
            data["sequence"] = [op_node_base(scope or "", target) for scope, target in ops]
        return data


@dataclass
class GraphRun:
    """One call of a compiled graph.

    Attributes:
        graph: index of the :class:`GraphRecord` that ran.
        frame_root: module path of the module whose frame called the graph (found on
            the Python stack), or None when unknown.
    """

    graph: int
    frame_root: str | None = None


@dataclass
class AtenGraphRecord:
    """One ATen-level graph from AOT Autograd.

    Attributes:
        kind: ``"forward"``, ``"backward"`` or ``"inference"`` (which compiler got it).
        ops: ATen op names in graph order (``addmm``, ``native_layer_norm``), tuple
            indexing left out.
        graph_module: the ``GraphModule`` when the recorder keeps them.
    """

    kind: str
    ops: list[str]
    graph_module: Any = None


@dataclass
class BreakRecord:
    """One graph break, located in the model.

    Attributes:
        reason: cleaned reason (:func:`~.watch.clean_reason`), no paths or lines.
        scope: module path where it happened (``""`` for the model itself); None
            when it could not be located.
        location: the function and source line, ``"Gate.forward: if h.sum() > 0:"``.
        count: how many times Dynamo hit it while compiling (a break inside a
            submodule is hit by the outer frame and by the submodule's own frame).
        scopes: every module path it applies to, ``scope`` first: the candidates when
            the instance could not be told apart, or the modules a graph ending at
            this break was reused for.
        compile_ids: the compiles (``"0/0"``) that hit it; not part of ``to_data``.
        source: ``"path/to/file.py:57"`` of the break's source line (readable path;
            messages only, never in ``to_data``).
        hook: ``"a backward hook on fc1"`` when a module hook caused the break.
    """

    reason: str
    scope: str | None
    location: str = ""
    count: int = 1
    scopes: list[str] = field(default_factory=list)
    compile_ids: set[str] = field(default_factory=set, repr=False)
    source: str = field(default="", compare=False)
    hook: str = field(default="", compare=False)

    def where(self) -> str:
        """``"gate (Gate.forward: if h.sum() > 0:, models.py:57)"``, for messages;
        ``"... caused by a backward hook on fc1"`` when a module hook caused it."""
        shown = first_names(s or "<model>" for s in self.scopes) or "<unknown module>"
        detail = ", ".join(p for p in (self.location, self.source) if p)
        text = f"{shown} ({detail})" if detail else shown
        return f"{text}, caused by {self.hook}" if self.hook else text

    def to_data(self) -> dict[str, Any]:
        """``{"reason", "scope", "location", "count"}``, machine-independent."""
        data: dict[str, Any] = {key: getattr(self, key) for key in (*GRAPH_BREAK_PLACE, "count")}
        if len(self.scopes) > 1:
            data["scopes"] = list(self.scopes)
        return data


@dataclass
class EagerOp:
    """One op of the eager trace: node name (``fc2/linear#0``), op and module scope;
    ``dead`` when nothing used its result; ``index`` its position among eager ops."""

    name: str
    op: str
    scope: str
    dead: bool = False
    index: int = 0


@dataclass
class CompiledOp:
    """One op the compiled graphs ran: op, module scope and the graph it belongs to."""

    op: str
    scope: str
    graph: int
    frames: tuple[tuple[str, int, str, str], ...] = ()
    hook_of: str | None = None
    """Module path whose forward hook ran this op (its scope is then the parent's)."""
    run: int = -1
    """Index of the graph run it belongs to (``GraphRecorder.runs``): consecutive ops
    of one run share it; -1 where unknown."""

    def __str__(self) -> str:
        return f"{op_node_base(self.scope, self.op)} (graph #{self.graph})"


@dataclass
class OpDivergence:
    """Where the compiled op sequence departs from the eager one.

    Attributes:
        kind: ``"missing"`` (eager ops no compiled graph ran: they ran outside the
            graphs, or Dynamo dropped them), ``"extra"`` (compiled ops eager did not
            run), ``"changed"`` (different ops at the same place) or ``"scope"``
            (same op, another module).
        eager: the eager ops concerned.
        compiled: the compiled ops concerned.
        eager_index: position of the first eager op concerned (or where the extra
            ops would go).
        category: ``"divergence"`` (fails the check), ``"library"`` (compile-only ops
            traced from code outside the user's package: a library compile path,
            fails only with ``strict``), ``"rewrite"`` (a NumPy round trip Dynamo
            traced into torch ops: ``compare_compiled`` aligns it, in
            ``CompiledReport.rewrites``, not a divergence) or ``"between"`` (missing eager
            ops that ran between two graph runs, or before the first or after the
            last: outside the graphs, as around a graph break; fails unless graph
            breaks happened and are allowed).
        source: ``"file.py:12 in function"`` the compiled ops were traced from (the
            FX node's ``stack_trace``), or ``""``; never in a snapshot.
    """

    kind: str
    eager: list[EagerOp]
    compiled: list[CompiledOp]
    eager_index: int
    category: str = "divergence"
    source: str = ""

    def __str__(self) -> str:
        eager = first_names(o.name for o in self.eager)
        compiled = first_names(str(o) for o in self.compiled)
        src = f"; compiled ops from {self.source}" if self.source else ""
        if self.kind == "missing":
            near = f"; between compiled ops from {self.source}" if self.source else ""
            why = "between two graph runs" if self.category == "between" else "or Dynamo dropped it"
            return (
                f"eager op{'s' if len(self.eager) > 1 else ''} {eager} in no compiled graph "
                f"(ran outside the graphs, {why}){near}"
            )
        if self.kind == "extra":
            many = "s" if len(self.compiled) > 1 else ""
            return f"compiled op{many} {compiled} not run eagerly{src}"
        if self.kind == "scope":
            e, c = (s or "<model>" for s in (self.eager[0].scope, self.compiled[0].scope))
            return f"eager op {self.eager[0].name} ran in module {e} but compiled in {c}"
        return f"eager {eager} -> compiled {compiled}{src}"

    def to_data(self) -> dict[str, Any]:
        """``{"kind", "category", "eager": [names], "compiled": ["scope/op"]}``; no
        source lines (they differ between machines)."""
        return {
            "kind": self.kind,
            "category": self.category,
            "eager": [e.name for e in self.eager],
            "compiled": [op_node_base(c.scope, c.op) for c in self.compiled],
        }
