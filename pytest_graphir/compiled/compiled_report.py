"""The result of a compiled-versus-eager check: what differed, in words a reviewer reads.

:class:`CompiledReport` is plain data (no tensors, no graphs): the graphs Dynamo
captured, the graph breaks with reasons and module scopes, the op-sequence
alignment against the eager trace, hook events under both, recompiles, guards and
the numeric comparison of the outputs. ``bool(report)`` is ``report.ok``;
:meth:`CompiledReport.lines` is the failure message; :meth:`CompiledReport.to_data`
is the machine-independent summary meant for a snapshot section.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from ..capture.hooks import HookEvent
from ..compare import DEFAULT_MAX_LINES, Tolerance
from ..ir import GraphIR
from ..names import GRAPH_BREAKS, PER_GRAPH, RECOMPILED_GRAPHS, first_names, plural
from .records import BreakRecord, EagerOp, GraphRecord, OpDivergence

_EXCUSED = {  # how lines() names a divergence that does not fail, by category
    "library": "library compile path (not failing; strict=True fails it)",
    "between": "outside the graphs at an allowed graph break",
}
_HOOK_WORDS = {  # HookProblem.kind -> (forward wording, backward wording)
    "skipped": ("fired eagerly but not under compile", "vanished under compile"),
    "extra": ("fired under compile but not eagerly", "appeared under compile"),
    "order": ("fired in another order under compile", "moved under compile"),
}


@dataclass
class HookProblem:
    """A difference between the hook events of the eager and the compiled call.

    Attributes:
        kind: ``"skipped"`` (fired eagerly, not under compile), ``"late_skipped"``
            (the same, for a hook registered after the first compiled call while
            ``skip_nnmodule_hook_guards`` is True), ``"extra"`` or ``"order"``; in
            the backward: vanished, appeared, moved.
        event: the hook event.
        call: 1 for the first call, 2 for the second.
        phase: ``"forward"`` or ``"backward"`` (backward pre-hooks and full backward
            hooks, with ``compare_compiled(..., backward=True)``).
    """

    kind: str
    event: HookEvent
    call: int
    phase: str = "forward"

    def __str__(self) -> str:
        call = "first call" if self.call == 1 else "second call"
        call = f"backward of the {call}" if self.phase == "backward" else call
        if self.kind == "late_skipped":
            return (
                f"{self.event} did not fire under compile ({call}): it was registered after the "
                "first compiled call, and with torch._dynamo.config.skip_nnmodule_hook_guards=True"
                " Dynamo does not guard module hooks, so the graph compiled without it was reused "
                "(set it to False, or call torch._dynamo.reset(), to recompile)"
            )
        return f"{self.event} {_HOOK_WORDS[self.kind][self.phase == 'backward']} ({call})"


@dataclass
class NumericDiff:
    """A compiled output that differs from the eager one beyond the tolerance.

    Attributes:
        path: output path (``logits``, ``0``, ``output``).
        detail: what differs: ``max |compiled - eager| 0.0123 > allowed 0.000524``,
            a shape, dtype or value change.
        call: 1 for the first call, 2 for the second.
    """

    path: str
    detail: str
    call: int

    def __str__(self) -> str:
        call = "" if self.call == 1 else " (second call)"
        return f"output {self.path}{call}: {self.detail}"


@dataclass
class CompiledReport:
    """What ``torch.compile`` did with a model, compared with the model run eagerly.

    Produced by :func:`pytest_graphir.compiled.compare_compiled`.

    ``report.ok`` (and ``bool(report)``) is True when the compiled model behaved as
    the eager one: no graph break (unless the check allowed them), the compiled
    graphs ran the eager op sequence with the same module scopes (folded ops, NumPy
    round trips traced into torch ops and, unless ``strict``, library compile paths
    aside, while outputs match), the same hooks fired in the same order, and every
    output (and gradient, with ``backward``) is within the tolerance.
    Recompiles and guard counts are reported but do not make a report fail.

    Attributes:
        backend: what ran the graphs (``"eager"``, ``"aot_eager"``, a callable's name).
        graphs: every graph Dynamo compiled, first call first.
        first_call_graphs: how many of them the first call compiled.
        breaks: graph breaks with reasons and scopes.
        allow_graph_breaks: whether breaks count against ``ok``.
        eager_ops: number of ops in the eager trace.
        compiled_ops: number of ops the compiled graphs ran in the first call.
        divergences: op-sequence differences (first call).
        hook_events: hook events per call: ``{"eager": [...], "compiled": [...]}``
            for the first call, ``"eager_2"``/``"compiled_2"`` for the second.
        hook_problems: differences between those.
        numerics: outputs beyond tolerance.
        tolerance: the tolerance used (``compare.Tolerance`` semantics: ``|c - e| <=
            atol + rtol * max(|min|, |max|, std)`` of the eager tensor).
        eager: the eager trace (a structure-only :class:`~pytest_graphir.ir.GraphIR`).
        second_call: whether a second call was made (``second_args`` or
            ``after_first_call``).
        recompiles: recompiles during the second call (compile ids ``N/k``, k >= 1).
        recompile_reasons: the guard failures behind them, cleaned.
        guards: guards installed, summed over compiles (None when unavailable).
        folded: eager ops whose result nothing used, which Dynamo dropped.
        rewrites: NumPy round trips Dynamo traced into torch ops: the eager
            ``Tensor.numpy`` / ``torch.from_numpy`` ops aligned with the compiled
            ``view_as``, ``numpy.*``, ``as_tensor`` ops that replace them. Their eager
            ops count as matched; they are no divergence and never fail the check
            (a numeric difference they cause shows in :attr:`numerics`).
        strict: library compile paths fail the check too.
        backward: a backward pass was compared (hook events ``"eager_backward"`` /
            ``"compiled_backward"``, gradients in :attr:`numerics` as ``<param>.grad``).
    """

    backend: str
    graphs: list[GraphRecord]
    first_call_graphs: int
    breaks: list[BreakRecord]
    allow_graph_breaks: bool
    eager_ops: int
    compiled_ops: int
    divergences: list[OpDivergence]
    hook_events: dict[str, list[HookEvent]]
    hook_problems: list[HookProblem]
    numerics: list[NumericDiff]
    tolerance: Tolerance
    eager: GraphIR
    second_call: bool = False
    recompiles: int = 0
    recompile_reasons: list[str] = field(default_factory=list)
    guards: int | None = None
    folded: list[EagerOp] = field(default_factory=list)
    rewrites: list[OpDivergence] = field(default_factory=list)
    strict: bool = False
    backward: bool = False

    @property
    def graph_break_count(self) -> int:
        """Graph breaks of the first call as ``torch._dynamo.explain`` counts them
        (graphs - 1)."""
        return max(self.first_call_graphs - 1, 0)

    @property
    def break_reasons(self) -> list[str]:
        """The cleaned reason of every first-call graph that ended at a graph break, in
        compile order (``explain``'s ``break_reasons``)."""
        return [
            g.break_reason or "" for g in self.graphs[: self.first_call_graphs] if g.graph_break
        ]

    @property
    def graphir(self) -> GraphIR:
        """The eager trace plus a ``compiled`` section (:meth:`to_data`), for a snapshot::

            assert compare_compiled(model, ids).graphir == graphir_snapshot

        A later run fails when the graph count changes, a graph break appears or
        goes (named with its reason and module), or the per-graph ops change.
        """
        # the eager provenance stays: a failure names an environment change first
        meta = {**self.eager.meta, "check": "compiled"}
        return replace(self.eager, meta=meta, sections={"compiled": self.to_data()})

    @property
    def ok(self) -> bool:
        """True when compiled matches eager (see the class docstring): no :meth:`problems`."""
        return not self.problems()

    @property
    def failing_divergences(self) -> list[OpDivergence]:
        """Op divergences that fail the check: all of the user's own code; library
        compile paths with :attr:`strict` or when outputs differ; eager ops that ran
        between graph runs only when no graph break happened or breaks are not allowed
        (with :attr:`allow_graph_breaks`, running outside the graphs is what a break
        does). Rewrites are in :attr:`rewrites`, never here."""
        broke = bool(self.breaks or self.graph_break_count) and self.allow_graph_breaks
        excused = {"between": broke, "library": not self.strict and not self.numerics}
        return [d for d in self.divergences if not excused.get(d.category)]

    @property
    def library_paths(self) -> list[OpDivergence]:
        """Library compile paths: divergences whose compile-only ops come from code
        outside the user's package (not failing unless :attr:`strict`)."""
        return [d for d in self.divergences if d.category == "library"]

    def __bool__(self) -> bool:
        """Same as :attr:`ok`: ``assert report`` passes when compiled matches eager."""
        return self.ok

    @property
    def graph_count(self) -> int:
        """Graphs compiled by the first call."""
        return self.first_call_graphs

    @property
    def matched_ops(self) -> int:
        """Eager ops matched, op and scope, by a compiled op."""
        unmatched = sum(len(d.eager) for d in self.divergences) + len(self.folded)
        return self.eager_ops - unmatched

    def problems(self) -> list[str]:
        """Every reason this report is not ok, one line each, breaks first."""
        allowed = self.allow_graph_breaks
        out = [] if allowed else [f"graph break in {b.where()}: {b.reason}" for b in self.breaks]
        if self.graph_break_count and not self.breaks and not allowed:
            out.append(
                f"graph break: one call compiled {self.first_call_graphs} graphs "
                f"({self.graph_break_count} breaks as torch._dynamo.explain counts "
                "them), and Dynamo recorded no reason"
            )
        failing = self.failing_divergences
        for d in failing[:1]:
            where = f"compiled {d.compiled[0]}" if not d.eager else ""
            for e in d.eager[:1]:
                where = f"eager #{d.eager_index} {e.name} ({e.op} in {e.scope or '<model>'})"
            out.append(f"first divergent op: {where}")
        out += [f"op divergence: {d}" for d in failing]
        out += [f"hooks: {p}" for p in self.hook_problems]
        return out + [f"numerics: {n}" for n in self.numerics]

    def summary(self) -> str:
        """One line: verdict, graphs, breaks, ops matched, hooks, outputs, tolerance."""
        verdict = "compiled matches eager" if self.ok else "compiled diverges from eager"
        n, sites = self.graph_break_count, len(self.breaks)
        breaks = plural(n, "graph break")
        if sites and sites != n:
            breaks += f" at {plural(sites, 'site')}" if n else f" ({plural(sites, 'break site')})"
        folded = f", {len(self.folded)} folded" if self.folded else ""
        library = [d for d in self.library_paths if d not in self.failing_divergences]
        hooked = self.hook_events.get("eager") or self.hook_problems
        parts = [
            plural(self.first_call_graphs, "graph"),
            breaks,
            f"{self.matched_ops}/{self.eager_ops} eager ops matched "
            f"({self.compiled_ops} compiled{folded})",
            plural(len(library), "library compile path") if library else "",
            plural(len(self.hook_problems), "hook problem") if hooked else "",
            f"{len(self.numerics)} output(s) beyond tolerance"
            if self.numerics
            else "outputs within tolerance",
            plural(self.recompiles, "recompile") if self.second_call else "",
        ]
        return (
            f"graphir compiled: {verdict}: {', '.join(p for p in parts if p)} "
            f"(backend={self.backend}, rtol={self.tolerance.rtol:g}, atol={self.tolerance.atol:g})"
        )

    def lines(self, max_lines: int = DEFAULT_MAX_LINES) -> list[str]:
        """The message a reviewer reads, like ``compare.Comparison.lines``.

        Args:
            max_lines: problem lines shown before the rest is summarised (0 = all).

        Returns:
            The summary line; the problems (graph breaks with reason and module,
            first divergent op, op divergences, hook problems, numerics); then the
            graphs (frame, op count, the break each ended at), recompiles and guards.
        """
        out = [self.summary()]
        problems = self.problems()
        limit = max_lines if max_lines > 0 else len(problems)
        out.extend(f"  {p}" for p in problems[:limit])
        if len(problems) > limit:
            out.append(f"  ... and {len(problems) - limit} more")
        if self.allow_graph_breaks:
            out.extend(f"  graph break (allowed) in {b.where()}: {b.reason}" for b in self.breaks)
        failing = self.failing_divergences
        out.extend(f"  {_EXCUSED[d.category]}: {d}" for d in self.divergences if d not in failing)
        for d in self.rewrites:
            eager = first_names(e.name for e in d.eager) or "-"
            out.append(
                f"  NumPy traced into torch ops (aligned): eager {eager} as compiled "
                f"{first_names(str(c) for c in d.compiled)}"
            )
        if self.folded:
            out.append(
                f"  folded by Dynamo (result unused): {first_names(e.name for e in self.folded)}"
            )
        graphs = self.graphs[: self.first_call_graphs]
        for g in graphs if max_lines <= 0 else graphs[: max(limit, 1)]:
            counts = Counter(g.op_counts())  # most_common keeps name order among ties
            ops = ", ".join(f"{k} x{n}" if n > 1 else k for k, n in counts.most_common(6))
            more = ", ..." if len(counts) > 6 else ""
            end = f"; ends at graph break: {g.break_reason}" if g.graph_break else ""
            out.append(
                f"  graph #{g.index} ({g.frame or '?'}): {len(g.ops)} ops ({ops}{more}){end}"
            )
        if self.second_call:
            reasons = f": {'; '.join(self.recompile_reasons[:3])}" if self.recompile_reasons else ""
            out.append(
                f"  second call: {plural(self.recompiles, 'recompile')}, "
                f"{len(self.graphs) - self.first_call_graphs} new graph(s){reasons}"
            )
        if self.guards is not None:
            out.append(f"  guards: {self.guards}")
        return out

    def assert_ok(self, max_lines: int = DEFAULT_MAX_LINES) -> None:
        """Raise ``AssertionError`` with :meth:`lines` as the message unless :attr:`ok`.

        Raises:
            AssertionError: the compiled model diverges from the eager one.
        """
        __tracebackhide__ = True
        if not self.ok:
            raise AssertionError("\n".join(self.lines(max_lines)))

    def to_data(self, sequence: bool = False) -> dict[str, Any]:
        """Return the plain, machine-independent summary for a ``compiled`` snapshot section.

        Args:
            sequence: include each graph's full op sequence (``scope/op``), not only
                its op counts.

        Returns:
            ``{"backend", "graphs", "graph_breaks": [{reason, scope, location,
            count}], "per_graph": [{frame, ops, op_counts, inputs, outputs,
            graph_break[, break_reason]}], "ops": {"eager", "compiled",
            "divergent"}, "hooks_match", "outputs_match"}``, plus ``"recompiles"``
            and ``"recompiled_graphs"`` after a second call, and ``"hooks"`` (event
            strings under compile) when the model has hooks; ``"backward_hooks"``
            with ``backward``; when there are any, ``"library_compile_paths"``,
            ``ops["folded"]`` and ``"graph_break_count"`` (when it differs from the
            number of break sites). No file paths, line numbers, ids, timings, guard
            counts or float differences.
        """
        first, later = self.graphs[: self.first_call_graphs], self.graphs[self.first_call_graphs :]
        divergent = sum(max(len(d.eager), len(d.compiled)) for d in self.failing_divergences)
        data: dict[str, Any] = {
            "backend": self.backend,
            "graphs": self.first_call_graphs,
            GRAPH_BREAKS: [b.to_data() for b in self.breaks],
            PER_GRAPH: [g.to_data(sequence) for g in first],
            "ops": {"eager": self.eager_ops, "compiled": self.compiled_ops, "divergent": divergent},
            "hooks_match": not self.hook_problems,
            "outputs_match": not self.numerics,
        }
        if self.library_paths:
            data["library_compile_paths"] = [d.to_data() for d in self.library_paths]
        if self.folded:
            data["ops"]["folded"] = len(self.folded)
        if self.graph_break_count != len(self.breaks):
            data["graph_break_count"] = self.graph_break_count
        events = {k: [str(e) for e in v] for k, v in self.hook_events.items()}
        if self.backward:
            data["backward_hooks"] = events.get("compiled_backward", [])
        if events.get("compiled") or events.get("eager"):
            data["hooks"] = events.get("compiled", [])
        if self.second_call:
            data["recompiles"] = self.recompiles
            data[RECOMPILED_GRAPHS] = [g.to_data(sequence) for g in later]
        return data

    def __repr__(self) -> str:
        return f"CompiledReport({self.summary()!r})"
