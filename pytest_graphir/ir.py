"""The graph IR: the data model every other layer reads or writes.

Floor 1 of the package: no torch import here, so the serializer and the comparer
work on snapshots without loading torch.

A :class:`GraphIR` holds

* ``meta``: how the model was called (model class, argument names, train/eval mode,
  grad mode, which statistics were taken);
* ``inputs``: one :class:`TensorMeta` (or constant) per model input leaf, keyed by
  argument name (``input_ids``, ``past.0``);
* ``nodes``: module calls and op calls in firing order, keyed by a stable,
  hierarchical name (``transformer.h.1.mlp/gelu#0``);
* ``outputs``: the model's return value, flattened to paths (``logits``) that point
  at the node output that produced each tensor.

Edges are written as references: ``$input_ids`` (a model input),
``$transformer.wte.weight`` (a parameter or buffer, by qualified name),
``$transformer.h.0.attn/split#0[1]`` (output 1 of a node; ``[i]`` is left out for a
node with one tensor output). Anything else in an argument list is a constant.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from .names import (
    GRANULARITY_KEYS,
    aligned,
    call_index,
    fmt,
    map_plain,
    module_path,
    op_scope,
    parse_hook_event,
    parse_op_name,
    parse_ref,
    plural,
    strings_in,
)

__all__ = [
    "PARAMS_SECTION",
    "GraphIR",
    "IRLintError",
    "Interceptor",
    "Node",
    "NodeKind",
    "TensorMeta",
    "View",
]

NodeKind = Literal["op", "module"]
"""What a :class:`Node` is: an op call or a module call."""
View = Literal["ops", "modules"]
"""``trace(view=...)``: module and op nodes, or module nodes only."""
Interceptor = Literal["mode", "patch"]
"""``trace(interceptor=...)``: a ``TorchFunctionMode`` or symbol patches."""

FORMAT_VERSION = 2
"""Version of the snapshot text format; bumped on any incompatible change (2: each
entry's value is one line of JSON; version 1, YAML flow mappings, is converted by
``graphir migrate``, not read)."""

STAT_KEYS_FLOAT = ("mean", "std", "min", "max", "nan", "inf")
"""Statistics kept for floating-point tensors, in snapshot order."""
STAT_KEYS_INT = ("min", "max", "sum")
"""Statistics kept for integer tensors, in snapshot order."""
STAT_KEYS_BOOL = ("true",)
"""Statistics kept for bool tensors: the number of ``True`` elements."""

SEQUENCE_SECTIONS = ("hooks", "autograd")
"""Optional sections that are ordered lists (compared as sequences)."""
KEYED_SECTIONS = ("backward", "collectives", "grads")
"""Optional sections that are mappings keyed by module label or parameter name."""
PARAMS_SECTION = "params"
"""The section of parameter fingerprints: parameter name -> shape, dtype, statistics."""
OPTIONAL_SECTIONS = ("plan", PARAMS_SECTION, "hooks", *KEYED_SECTIONS, "autograd", "compiled")
"""Optional sections, in the order they are written after ``outputs``:

* ``plan``: how a parallel model is parallelised, per module path: tensor-parallel
  styles, DTensor parameter placements, FSDP2 units, wrappers
  (``capture/dtensor.py`` ``plan_section``); only for a model that has any;
* ``params``: per parameter (``model.named_parameters()``, tied weights once under
  their first name), its shape, dtype and statistics after the forward, a tensor
  entry like an input's (every ``trace()``; shape and dtype only without statistics).
  Snapshots written before it existed have none, and are compared without it;
* ``hooks``: hook events in firing order (``trace(..., hooks=True)``);
* ``backward``: per module call, ``grad_output`` and ``grad_input`` statistics;
* ``collectives``: the collectives of the backward (and of its activation
  checkpointing recompute) in firing order, keyed ``<phase>/<op>#<k>``: each one's
  op, module path where known, group, group size, reduce op, bytes, phase, whether
  DTensor issued it implicitly, dtype, input and output shapes (a distributed
  ``trace(..., backward=True)``; see :mod:`pytest_graphir.capture.collectives`);
* ``grads``: per parameter, gradient statistics, ``frozen`` or ``no gradient``;
* ``autograd``: ``grad_fn`` type names reachable from the loss, depth-first;
* ``compiled``: what ``torch.compile`` made of the model (graph count, graph breaks
  with reasons and module scopes, per-graph op summary), from
  ``pytest_graphir.compiled.compare_compiled(...).graphir``.
"""

COUNT_KEYS = frozenset({"nan", "inf", "true"})
"""Statistics that are counts and compare exactly, not within a tolerance."""


@dataclass(slots=True)
class TensorMeta:
    """Shape, dtype and statistics of one tensor seen during a trace.

    Attributes:
        shape: sizes, one int per dimension (``[]`` for a 0-d tensor); for a nested
            tensor the number of components, then ``"ragged"`` where they differ
            (``capture/nested.py``).
        dtype: torch dtype without the ``torch.`` prefix (``"float32"``).
        stats: statistic name -> value (see ``capture.stats``): filled when the
            tensor is recorded on CPU, at the end of the trace on other devices.
            Empty for empty, complex, quantized, sparse and meta tensors, for
            uninitialised memory (``torch.empty``) and random draws, and in
            structure-only traces.
        random: the tensor was drawn from a random generator (``torch.rand``,
            dropout in training): written as ``random: true``, with no statistics.
        dist: for a ``DTensor``, its placements, mesh dimension names and local
            shard shape (``capture/dtensor.py``); ``shape`` is then the logical
            (global) shape and ``stats`` the local shard's. ``"local"`` for a plain
            tensor computed from a local shard (after ``to_local()``), whose shape
            is this rank's part. None for any other tensor.
    """

    shape: list[int | str]
    dtype: str
    stats: dict[str, float | int] = field(default_factory=dict)
    random: bool = False
    dist: dict[str, Any] | str | None = None

    def to_data(self) -> dict[str, Any]:
        """Return the plain-data form written into a snapshot."""
        data: dict[str, Any] = {"shape": list(self.shape), "dtype": self.dtype}
        if self.dist is not None:
            data["dist"] = self.dist
        if self.random:
            data["random"] = True
        data.update(self.stats)
        return data


@dataclass(slots=True)
class Node:
    """One node of the graph: a module call or an op call.

    Attributes:
        name: stable hierarchical name. Op nodes are ``<scope>/<op>#<k>`` where
            ``<scope>`` is the module path of the innermost traced module (empty
            for ops run directly in the root forward, giving ``<op>#<k>``) and
            ``k`` counts that op within that scope call. Module nodes are the
            module path, with ``@<i>`` appended for the i-th call (i >= 1) of a
            module that runs more than once.
        kind: ``"op"`` or ``"module"``. A blackbox module (``trace(blackbox=...)``,
            ``depth=``) is a module node with nothing inside, whose outputs carry
            statistics like an op node's.
        target: canonical op name (``linear``, ``add``, ``t``) for op nodes, the
            module class name for module nodes.
        args: positional arguments, tensors replaced by references.
        kwargs: keyword arguments, tensors replaced by references.
        outputs: one entry per output leaf: a :class:`TensorMeta`, or for module
            nodes a reference plus shape and dtype; constants for non-tensors.
        raw: the resolved qualified name of the callable (op nodes only), kept
            for debugging; it is not written into snapshots.
    """

    name: str
    kind: NodeKind
    target: str
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    outputs: list[Any] = field(default_factory=list)
    raw: str = ""
    params: int | None = None
    """Module nodes of the module-level view: parameter count of the module, children
    included (as ``sum(p.numel() for p in module.parameters())``)."""

    def to_data(self) -> dict[str, Any]:
        """Return the plain-data form written into a snapshot (one line)."""
        data: dict[str, Any] = {("op" if self.kind == "op" else "module"): self.target}
        if self.args:
            data["args"] = self.args
        if self.kwargs:
            data["kwargs"] = self.kwargs
        if self.params is not None:
            data["params"] = self.params
        data["out"] = [o.to_data() if isinstance(o, TensorMeta) else o for o in self.outputs]
        return data


@dataclass
class GraphIR:
    """A traced forward pass: meta, inputs, nodes and outputs (see module docstring).

    Produced by :func:`pytest_graphir.trace`; compared against a snapshot by
    ``graphir_snapshot`` (``assert trace(model, x) == graphir_snapshot``).
    """

    meta: dict[str, Any]
    inputs: dict[str, Any]
    nodes: list[Node]
    outputs: dict[str, Any]
    sections: dict[str, Any] = field(default_factory=dict)
    """Optional sections by name (see :data:`OPTIONAL_SECTIONS`)."""
    provenance: dict[str, Any] | None = None
    """Where the trace ran (torch and package versions, Python, device, float32 math;
    see :mod:`pytest_graphir.provenance`). Written as a comment line, never compared,
    and not part of :meth:`to_data`."""

    def to_data(self) -> dict[str, Any]:
        """Return the plain-data document the serializer writes.

        Returns:
            ``{"meta": {...}, "inputs": {name: ...}, "nodes": {name: {...}},
            "outputs": {path: ...}}`` with insertion order preserved.
        """

        def leaf(v: Any) -> Any:
            return v.to_data() if isinstance(v, TensorMeta) else v

        return {
            "meta": dict(self.meta),
            "inputs": {k: leaf(v) for k, v in self.inputs.items()},
            "nodes": {n.name: n.to_data() for n in self.nodes},
            "outputs": {k: leaf(v) for k, v in self.outputs.items()},
            **{
                s: map_plain(self.sections[s], leaf)
                for s in OPTIONAL_SECTIONS
                if s in self.sections
            },
        }

    def lint(self, parameters: Iterable[str] | None = None) -> None:
        """Check that the graph is well-formed, as ``torch.fx.Graph.lint`` does for an FX
        graph: the invariants every consumer (serializer, comparer, report) relies on.

        Args:
            parameters: the qualified names of the model's parameters and buffers
                (``model.state_dict().keys()``); when given, a reference to anything
                that is not an input or a node must name one of them.

        Raises:
            IRLintError: naming each problem (node, field, reference): a duplicate node
                name; an op node name that is not ``<scope>/<op>#<k>`` or whose op is
                not its target; an op whose scope is no earlier module call; a
                reference that resolves to nothing, or (in an argument) to a node not
                yet run; an output index out of range; a malformed optional section.
        """
        if problems := self.lint_problems(parameters):
            raise IRLintError(
                f"{len(problems)} problem(s) in the GraphIR of "
                f"{self.meta.get('model', '?')}:\n  " + "\n  ".join(problems)
            )

    def lint_problems(self, parameters: Iterable[str] | None = None) -> list[str]:
        """The problems :meth:`lint` raises for, one line each (``[]``: none)."""
        problems: list[str] = []
        params = set(parameters) if parameters is not None else None
        tensor_outputs: dict[str, int] = {}  # node name -> number of tensor outputs
        modules: set[str] = set()
        later = {n.name for n in self.nodes}

        def check(value: Any, where: str, own: str = "") -> None:
            """Every reference anywhere in ``value`` resolves (to an earlier node while
            the nodes are walked: ``later`` is empty after them)."""
            for text in strings_in(value):
                target = parse_ref(text)
                if target is None or target[0] in self.inputs or target[0] == own:
                    continue
                name, index = target
                if name in tensor_outputs:
                    count = tensor_outputs[name]
                    if not (index is None or name in modules or (count > 1 and 0 <= index < count)):
                        problems.append(
                            f"{where}: {text} has no output {index} "
                            f"({name} has {count} tensor output(s))"
                        )
                elif name in later:
                    problems.append(f"{where}: {text} reads node {name}, which runs later")
                elif parse_op_name(name) is not None:
                    problems.append(f"{where}: {text} names no node")
                elif params is not None and name not in params:
                    problems.append(f"{where}: {text} names no input, node, parameter or buffer")

        for n in self.nodes:
            if n.name in tensor_outputs:
                problems.append(f"node {n.name}: name used twice")
            later.discard(n.name)
            if n.kind == "op":
                if (parsed := parse_op_name(n.name)) is None:
                    problems.append(f"node {n.name}: an op node name is <scope>/<op>#<k>")
                elif parsed.op != n.target:
                    problems.append(
                        f"node {n.name}: op {n.target!r} under the name of {parsed.op!r}"
                    )
                if (scope := op_scope(n.name)) and scope not in modules:
                    problems.append(f"node {n.name}: scope {scope} is no earlier module call")
            elif n.kind == "module":
                if "/" in n.name or "#" in n.name:
                    problems.append(f"node {n.name}: a module node name is a module path")
                modules.add(n.name)
            else:
                problems.append(f"node {n.name}: kind {n.kind!r} is neither op nor module")
            check(n.args, f"node {n.name} args")
            check(n.kwargs, f"node {n.name} kwargs")
            tensor_outputs[n.name] = sum(  # a module node's count is not checked
                isinstance(o, TensorMeta) or (isinstance(o, dict) and "shape" in o)
                for o in n.outputs
            )
        for n in self.nodes:  # a module's outputs are ops that ran inside it, after it
            if n.kind == "module":
                check(n.outputs, f"node {n.name} out", own=n.name)
        for key, value in self.outputs.items():
            check(value, f"output {key}", own=key)
        problems += [f"section {name}: {what}" for name, what in section_problems(self.sections)]
        for event in self.sections.get("hooks") or []:
            if isinstance(event, str) and not parse_hook_event(event).kind:
                problems.append(f"section hooks: {event!r} is not '<module> <kind>[ <hook>]'")
        return problems

    def node(self, name: str) -> Node:
        """Return the node called ``name``.

        Raises:
            KeyError: no node has that name; the message lists close names.
        """
        for n in self.nodes:
            if n.name == name:
                return n
        import difflib

        close = difflib.get_close_matches(name, [n.name for n in self.nodes], n=5)
        raise KeyError(f"no node {name!r} in this GraphIR; close names: {close}")

    def ops(self) -> list[str]:
        """Return the canonical op names of the op nodes, in firing order."""
        return [n.target for n in self.nodes if n.kind == "op"]

    def __repr__(self) -> str:
        return self.summary()

    def summary(self, depth: int = 3, stats: bool = False) -> str:
        """A short, torchinfo-like summary: what ``print(graph)`` and ``repr`` show,
        the summary ``graphir show`` prints of a snapshot (:func:`describe`), under a
        ``GraphIR of <model>`` line.

        Args:
            depth: deepest module level shown (0: all), as ``graphir show --depth``.
            stats: add mean/std/min/max of each module's first output, as ``--stats``.

        Returns:
            The lines of :func:`describe`, ending without a newline.
        """
        lines = [f"GraphIR of {self.meta.get('model', '?')}"]
        describe(self.to_data(), lambda line="", style=None: lines.append(line), depth, stats)
        return "\n".join(lines)


class IRLintError(ValueError):
    """:meth:`GraphIR.lint` found a malformed graph; the message lists every problem."""


def section_problems(sections: dict[Any, Any]) -> list[tuple[Any, str]]:
    """``(section, what is wrong)`` for each entry of ``sections`` that is no optional
    section, or not of its kind (a list of strings, or a mapping): the one check of
    the optional sections, for :meth:`GraphIR.lint` and the snapshot loader."""
    problems: list[tuple[Any, str]] = []
    for name, value in sections.items():
        if name not in OPTIONAL_SECTIONS:
            problems.append((name, f"not an optional section ({', '.join(OPTIONAL_SECTIONS)})"))
        elif name in SEQUENCE_SECTIONS:
            if not (isinstance(value, list) and all(isinstance(e, str) for e in value)):
                problems.append((name, "not a list of strings"))
        elif not isinstance(value, dict):
            problems.append((name, "not a mapping"))
    return problems


def describe(
    doc: dict[str, Any], out: Callable[..., None], depth: int = 0, stats: bool = False
) -> None:
    """The torchinfo-like summary of a snapshot document (:meth:`GraphIR.to_data`, or a
    loaded snapshot), one ``out(line, style)`` call per line: the call, the mode, the
    module tree with op counts, output shapes and per-module parameter counts (the
    ``# params`` column, left out when no module has one), op totals, the ``params``
    section's fingerprint count, the other optional sections. ``graphir show`` prints
    it (then a parallel model's plan and communication table), ``repr(graph)`` shows it.

    Args:
        depth: deepest module level shown (0: all).
        stats: add mean/std/min/max of each module's first output.
    """
    meta, nodes, outputs = doc.get("meta", {}), doc.get("nodes", {}), doc.get("outputs", {})
    model = str(meta.get("model", "?"))
    args = ", ".join(f"{k}: {_shape(v)}" for k, v in doc.get("inputs", {}).items())
    outs = ", ".join(f"{k}: {_shape(v)}" for k, v in outputs.items())
    out(f"call: {model}({args}) -> {outs or 'nothing'}")
    flags = [
        f"{k}={fmt(meta[k])}"
        for k in ("training", "grad_enabled", *GRANULARITY_KEYS, "stats")
        if k in meta
    ]
    if flags:
        out("mode: " + ", ".join(flags), "dim")
    every = _module_rows(nodes)
    rows = [r for r in every if depth <= 0 or r[0] <= depth]
    recorded = any(isinstance(v.get("params"), int) for v in nodes.values())
    kept = 5 if recorded else 4  # the # params column only where a module has a count
    stat_keys = ("mean", "std", "min", "max") if stats else ()

    def cells(name: str, cls: str, ops: int, node: dict[str, Any], first: Any) -> list[str]:
        shapes = ", ".join(_shape(o) for o in node.get("out", [])) or "-"
        count = node.get("params")
        shown = [name, cls, str(ops), shapes, f"{count:,}" if isinstance(count, int) else "-"]
        return shown[:kept] + [fmt(first[k]) if k in first else "-" for k in stat_keys]

    counts = Counter(str(v["op"]) for v in nodes.values() if "op" in v)
    # the root row, like torchinfo's: the model, every op, its outputs, the parameter
    # counts of its top-level modules
    top_level = [node for level, name, node, _ in rows if level == 1 and not call_index(name)]
    params = [n["params"] for n in top_level if isinstance(n.get("params"), int)]
    total = {"out": list(outputs.values()), "params": sum(params) if params else None}
    table = [["module", "class", "ops", "output", "# params"][:kept] + list(stat_keys)]
    table.append(cells("(model)", model, counts.total(), total, {}))
    for level, name, node, ops in rows:
        first = _resolve(doc, (node.get("out") or [None])[0])
        table.append(cells("  " * level + name, str(node["module"]), ops, node, first))
    out()
    for i, line in enumerate(aligned(table)):
        out(line, "bold" if i == 0 else None)
    if hidden := len(every) - len(rows):
        out(f"({plural(hidden, 'module call')} deeper than depth {depth} not shown)", "dim")
    out()
    out(f"{plural(len(every), 'module call')}, {plural(counts.total(), 'op call')}", "bold")
    if counts:
        top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        out("ops: " + ", ".join(f"{op} {n}" for op, n in top))
    if section := doc.get(PARAMS_SECTION):  # loads: every optional section is a mapping
        # per-parameter fingerprints: how many, what each holds, their values in all
        entries = [e for e in section.values() if isinstance(e, dict)]
        values = sum(
            math.prod(e["shape"])
            for e in entries
            if isinstance(e.get("shape"), list) and all(isinstance(d, int) for d in e["shape"])
        )
        held = "shape, dtype, statistics" if any("mean" in e for e in entries) else "shape, dtype"
        fingerprints = plural(len(section), "parameter fingerprint")
        out(f"params section: {fingerprints} ({held}), {values:,} values")
    if not recorded and every:  # the column is left out
        out(
            "# params: per-module parameter counts, recorded in module-view snapshots "
            "(trace(view='modules'))",
            "dim",
        )
    sections = [
        f"{s} ({len(doc[s])})" for s in ("hooks", "autograd", "backward", "grads") if doc.get(s)
    ]
    if doc.get("compiled"):
        breaks = len(doc["compiled"].get("graph_breaks", []) or [])
        sections.append(f"compiled ({breaks} graph breaks)")
    if sections:
        out("sections: " + ", ".join(sections))


def _shape(entry: Any) -> str:
    """``float32[2,4]`` for a tensor entry, :func:`~pytest_graphir.names.fmt` of a
    constant."""
    if isinstance(entry, dict) and "shape" in entry:
        return f"{entry.get('dtype', '')}{fmt(entry['shape'])}"
    return fmt(entry)


def _resolve(doc: dict[str, Any], entry: Any) -> dict[str, Any]:
    """A ``{ref: $node[i]}`` output entry -> the referenced op output (with statistics);
    ``{}`` where that is no mapping (a constant)."""
    for _ in range(64):
        target = parse_ref(entry.get("ref")) if isinstance(entry, dict) else None
        outs = doc.get("nodes", {}).get(target[0], {}).get("out", []) if target else []
        if not target or (target[1] or 0) >= len(outs):
            break
        entry = outs[target[1] or 0]
    return entry if isinstance(entry, dict) else {}


def _module_rows(nodes: dict[str, Any]) -> list[tuple[int, str, dict[str, Any], int]]:
    """(tree depth, module node name, node, ops inside it) in snapshot order."""
    modules = [n for n, v in nodes.items() if "module" in v]
    paths = {module_path(m) for m in modules}
    scopes = [op_scope(name) for name, v in nodes.items() if "op" in v]
    calls = [(module_path(s), call_index(s)) for s in scopes]
    rows = []
    for m in modules:
        path, call = module_path(m), call_index(m)
        depth = 1 + sum(p != path and path.startswith(p + ".") for p in paths)
        ops = sum(
            (p == path and c == call) or (p.startswith(path + ".") and (not call or c == call))
            for p, c in calls
        )
        rows.append((depth, m, nodes[m], ops))
    return rows
