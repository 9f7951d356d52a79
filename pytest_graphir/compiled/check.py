"""``compare_compiled``: run a model eagerly and under ``torch.compile``, report the differences.

The check, in order:

1. ``torch._dynamo.reset()`` and ``counters.clear()``; the model's own forward
   pre-hooks and forward hooks are wrapped to log their calls (:mod:`.hooks`).
2. Eager: :func:`pytest_graphir.capture.trace` (structure only, under
   ``torch.compiler.set_stance("force_eager")``) gives the op sequence with module
   scopes; a temporary forward hook on the model keeps its output.
3. Compiled: the parameters and buffers are put back as they were before the eager
   run (:class:`~.state.ModelState`), then ``torch.compile(model,
   backend=GraphRecorder(backend, model=model))`` is called with the same inputs (and
   the same RNG state), while a :class:`~.watch.CompileWatch` notes compile ids and
   graph-break sites. With ``backward=True`` both sides also run a backward
   (:mod:`.backward`): backward hooks and gradients are compared.
4. Optionally a second call: ``after_first_call()`` runs (register a hook there to
   test late registration), newly registered hooks are wrapped, then the model runs
   eagerly and compiled with ``second_args`` (or the same inputs).
5. The report: graphs and breaks as ``torch._dynamo.explain`` counts them (graphs
   ending at a break; reasons from ``counters["graph_break"]`` and
   ``["unimplemented"]``, located in the model), the eager op sequence aligned with
   the ops the compiled graphs ran (:mod:`.align`: folded ops, rewrites, library
   compile paths), hook events, outputs within the tolerance, recompiles (compile ids
   ``N/k``, ``counters["stats"]["unique_graphs"]``, ``guard_failures``), guard counts.
6. Hooks restored, callbacks removed, ``torch._dynamo.reset()`` and
   ``counters.clear()`` again, whether the check passed, failed or raised.

Nothing here runs Inductor unless ``backend="inductor"`` is asked for.
"""

from __future__ import annotations

import contextlib
import difflib
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch._dynamo

from ..capture import trace
from ..compare import DEFAULT_ATOL, DEFAULT_RTOL, Tolerance
from ..ir import GraphIR
from ..leaves import flatten
from ..names import parent_path
from .align import align as align_ops
from .align import eager_ops
from .backend import Delegate, GraphRecorder
from .backward import BackwardResult, run_backward
from .hooks import HookEvent, HookLog
from .report import CompiledOp, CompiledReport, EagerOp, HookProblem, NumericDiff, OpDivergence
from .state import ModelState
from .watch import CompileWatch, recompile_reasons, spread_to_reused


def reset_dynamo() -> None:
    """Forget every compiled frame, guard, callback and counter.

    ``torch._dynamo.reset()`` then ``torch._dynamo.utils.counters.clear()``.
    """
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()


@contextlib.contextmanager
def _force_eager() -> Iterator[None]:
    """``torch.compiler.set_stance("force_eager")`` where it exists (compiled submodules
    of the model run eagerly while it is traced)."""
    set_stance = getattr(torch.compiler, "set_stance", None)
    if set_stance is None:
        yield
        return
    with set_stance("force_eager"):
        yield


def _rng_state() -> tuple[torch.Tensor, list[torch.Tensor] | None]:
    cuda = (
        torch.cuda.get_rng_state_all()
        if torch.cuda.is_available() and torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
        else None
    )
    return torch.get_rng_state(), cuda


def _set_rng_state(state: tuple[torch.Tensor, list[torch.Tensor] | None]) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state_all(state[1])


def align(eager: list[EagerOp], compiled: list[CompiledOp]) -> list[OpDivergence]:
    """The divergences of :func:`.align.align` (kept for callers of the old name)."""
    return align_ops(eager, compiled)[0]


def _scale_stats(t: torch.Tensor) -> dict[str, float]:
    finite = t[torch.isfinite(t)]
    if finite.numel() == 0:
        return {}
    f = finite.double()
    return {
        "min": float(f.min()),
        "max": float(f.max()),
        "std": float(f.std(unbiased=False)) if f.numel() > 1 else 0.0,
    }


_PLAIN = (type(None), bool, int, float, complex, str, bytes)

MAX_OBJECT_DEPTH = 4
"""How deep :func:`output_leaves` looks into the attributes of output objects."""


def output_leaves(value: Any, prefix: str = "", depth: int = 0) -> list[tuple[str, Any]]:
    """Flatten a model output to ``(path, leaf)``: tensors and plain values.

    Tuples, lists and mappings (``ModelOutput``) are walked as in the trace; other
    objects that hold tensors (a transformers ``DynamicCache``) are walked through
    their attributes, up to :data:`MAX_OBJECT_DEPTH` levels; an object with no
    tensor inside is one leaf, compared by type.
    """
    out: list[tuple[str, Any]] = []
    for path, leaf in flatten(value, prefix):
        if isinstance(leaf, (torch.Tensor, *_PLAIN)) or depth >= MAX_OBJECT_DEPTH:
            out.append((path, leaf))
            continue
        attrs = getattr(leaf, "__dict__", None)
        inner = (
            []
            if not isinstance(attrs, dict)
            else output_leaves({k: v for k, v in attrs.items() if v is not None}, path, depth + 1)
        )
        if any(isinstance(v, torch.Tensor) for _, v in inner):
            out.extend(inner)
        else:
            out.append((path, f"<{type(leaf).__name__}>"))
    return out


def compare_outputs(
    eager: Any, compiled: Any, tolerance: Tolerance, call: int = 1
) -> list[NumericDiff]:
    """Compare compiled outputs with eager ones, leaf by leaf.

    Floating tensors match when ``max |compiled - eager| <= atol + rtol * scale``,
    ``scale = max(|min|, |max|, std)`` of the eager tensor's finite values (the
    :class:`~pytest_graphir.compare.Tolerance` rule, applied element-wise); NaN and
    infinities must sit at the same places. Other tensors, and non-tensor leaves,
    must be equal.

    Returns:
        One :class:`~.report.NumericDiff` per differing leaf.
    """
    out: list[NumericDiff] = []
    e_leaves = dict(output_leaves(eager))
    c_leaves = dict(output_leaves(compiled))
    for path in list(e_leaves) + [p for p in c_leaves if p not in e_leaves]:
        name = path or "output"
        if path not in c_leaves or path not in e_leaves:
            where = "compiled" if path not in e_leaves else "eager"
            out.append(NumericDiff(name, f"only in the {where} outputs", call))
            continue
        e, c = e_leaves[path], c_leaves[path]
        if not isinstance(e, torch.Tensor) or not isinstance(c, torch.Tensor):
            if type(e) is not type(c) or e != c:
                out.append(NumericDiff(name, f"{e!r} -> {c!r}", call))
            continue
        if e.shape != c.shape or e.dtype != c.dtype:
            out.append(
                NumericDiff(name, f"{e.dtype} {list(e.shape)} -> {c.dtype} {list(c.shape)}", call)
            )
            continue
        with torch.no_grad():
            e, c = e.detach(), c.detach().to(e.device)
            if torch.equal(e, c):  # the common case, and cheap: no statistics needed
                continue
            if not (e.is_floating_point() or e.is_complex()):
                if not torch.equal(e, c):
                    n = int((e != c).sum())
                    out.append(
                        NumericDiff(
                            name, f"{n} of {e.numel()} elements differ (exact compare)", call
                        )
                    )
                continue
            same_nonfinite = (
                torch.equal(torch.isnan(e), torch.isnan(c))
                and torch.equal(torch.isinf(e) & (e > 0), torch.isinf(c) & (c > 0))
                and torch.equal(torch.isinf(e) & (e < 0), torch.isinf(c) & (c < 0))
            )
            if not same_nonfinite:
                out.append(NumericDiff(name, "NaN/Inf at different places", call))
                continue
            finite = torch.isfinite(e)
            if not bool(finite.any()):
                continue
            diff = float((c[finite].double() - e[finite].double()).abs().max())
            allowed = tolerance.allowed(_scale_stats(e))
            if not diff <= allowed or math.isnan(diff):
                out.append(
                    NumericDiff(
                        name, f"max |compiled - eager| {diff:.6g} > allowed {allowed:.3g}", call
                    )
                )
    return out


def compare_hooks(
    eager: list[HookEvent],
    compiled: list[HookEvent],
    late: list[HookEvent],
    skip_guards: bool,
    call: int,
    phase: str = "forward",
) -> list[HookProblem]:
    """Compare the hook events of an eager and a compiled call.

    A hook that fired eagerly but not under compile, registered after the first
    compiled call while ``skip_nnmodule_hook_guards`` was True, is ``late_skipped``.
    """
    out: list[HookProblem] = []
    matcher = difflib.SequenceMatcher(
        None, [str(e) for e in eager], [str(c) for c in compiled], autojunk=False
    )
    missing: list[HookEvent] = []
    extra: list[HookEvent] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            missing.extend(eager[i1:i2])
            extra.extend(compiled[j1:j2])
    left = [str(c) for c in extra]
    for e in missing:
        if str(e) in left:  # fired on both sides, at another place: moved
            left.remove(str(e))
            out.append(HookProblem("order", e, call, phase))
        elif e in late and skip_guards:
            out.append(HookProblem("late_skipped", e, call, phase))
        else:
            out.append(HookProblem("skipped", e, call, phase))
    for c in extra:
        if str(c) in left:
            left.remove(str(c))
            out.append(HookProblem("extra", c, call, phase))
    return out


def _backend_name(backend: Delegate) -> str:
    if isinstance(backend, str):
        return backend
    return str(getattr(backend, "__name__", type(backend).__name__))


def _stats_counter(key: str) -> int | None:
    from torch._dynamo.utils import counters

    value = counters["stats"].get(key)
    return int(value) if value is not None else None


def _hook_scopes(executed: list[CompiledOp], codes: dict[tuple[str, str], str]) -> None:
    """Put ops run inside a module's forward hook where the eager trace puts them.

    Eager, a forward hook runs after the module's scope has closed, so its ops belong
    to the parent module; Dynamo's ``nn_module_stack`` still holds the hooked
    module. An op whose ``stack_trace`` passes through a forward hook of module ``p``
    is moved from ``p`` to ``p``'s parent, and remembers ``p`` (``hook_of``): the
    alignment accepts either scope for it, whichever the eager trace chose.
    """
    if not codes:
        return
    for op in executed:
        for file, _line, function, _code in op.frames:
            path = codes.get((file, function))
            if path is not None and path and (op.scope == path or op.scope.startswith(path + ".")):
                op.scope = parent_path(path)
                op.hook_of = path
                break


def _materialise_lazy(
    model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    """Run one eager forward when a lazy module (``LazyLinear``) has uninitialised
    parameters, so both sides compare the model and not its one-time initialisation
    (``LazyModuleMixin._infer_parameters``, a forward pre-hook that removes itself)."""
    from torch.nn.modules.lazy import LazyModuleMixin

    if any(
        isinstance(m, LazyModuleMixin) and m.has_uninitialized_params() for m in model.modules()
    ):
        with torch.no_grad(), _force_eager():
            model(*args, **kwargs)


def _break_count(graphs: list[Any]) -> int:
    """Graph breaks as ``torch._dynamo.explain`` counts them: graphs - 1."""
    return max(len(graphs) - 1, 0)


def compare_grads(
    eager: BackwardResult, compiled: BackwardResult, tolerance: Tolerance
) -> list[NumericDiff]:
    """Compare each parameter's gradient (``compare_outputs`` rules), call 1."""
    out: list[NumericDiff] = []
    for name in eager.grads:
        e, c = eager.grads[name], compiled.grads.get(name)
        if e is None and c is None:
            continue
        if e is None or c is None:
            where = "eagerly" if c is None else "under compile"
            out.append(NumericDiff(f"{name}.grad", f"no gradient {where}", 1))
            continue
        out.extend(
            NumericDiff(f"{name}.grad", d.detail, 1) for d in compare_outputs(e, c, tolerance, 1)
        )
    return out


def compare_compiled(
    model: torch.nn.Module,
    *args: Any,
    backend: Delegate = "eager",
    second_args: tuple[Any, ...] | None = None,
    after_first_call: Callable[[], object] | None = None,
    rtol: float = DEFAULT_RTOL,
    atol: float = DEFAULT_ATOL,
    allow_graph_breaks: bool = False,
    strict: bool = False,
    third_party: tuple[str, ...] = (),
    backward: bool = False,
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
    model_kwargs: dict[str, Any] | None = None,
    **kwargs: Any,
) -> CompiledReport:
    """Compile ``model`` with a recording backend and compare it with the model run eagerly.

    Relies on ``torch.compile``, ``torch._dynamo.reset``, ``torch._dynamo.utils.counters``
    (``graph_break``, ``unimplemented``, ``stats``), ``torch._dynamo.callback_handler``,
    ``torch._dynamo.output_graph.graph_break_reasons``, ``guard_failures``,
    ``get_compilation_metrics``, ``torch.compiler.set_stance`` and
    ``torch._dynamo.config.skip_nnmodule_hook_guards``; see the module docstring for
    the steps. Dynamo state is reset before and after, so the check may be called
    several times in one test, and compiled frames of earlier ``torch.compile`` calls
    are forgotten. The eager and the compiled run start from the same parameters and
    buffers (:class:`~.state.ModelState`), so a forward that updates a buffer does not
    show as a numerics difference; the model is left with the buffer values (and
    gradients) it had before the check. A parameter the forward writes in place is
    reported (its old value is not kept: copying every parameter would double the
    model's memory).

    Args:
        model: the ``nn.Module`` (a ``torch.compile``'d ``OptimizedModule`` is
            unwrapped to its original module).
        *args: positional inputs of the model call.
        backend: how the compiled graphs run: ``"eager"`` (``gm.forward``: Dynamo
            only, the default; never Inductor), a registered backend's name
            (``"aot_eager"``, ``"inductor"``) or a backend callable
            ``(gm, example_inputs) -> callable``.
        second_args: inputs of a second call (a tuple), made after the first on the
            compiled and the eager model: recompiles are counted, outputs compared.
        after_first_call: called after the first compiled call and before the second
            call (which then happens even without ``second_args``, with ``args``).
            Register a hook here to test that hooks added after compilation fire.
        rtol: relative tolerance for outputs and gradients (``compare.Tolerance``).
        atol: absolute tolerance for outputs and gradients.
        allow_graph_breaks: report graph breaks without failing the check on them.
        strict: fail on library compile paths too (op divergences whose compile-only
            ops come from code outside the user's package, with matching outputs).
        third_party: module names (imported) or directories whose code counts as
            library code besides site-packages, for library compile paths.
        backward: also run a backward (``loss_fn(output).backward()``) eagerly and
            compiled from the same state, and compare backward pre-hooks and full
            backward hooks (per module, in order) and each parameter's gradient.
        loss_fn: the scalar to run backward on (default: the sum of every floating
            output that requires grad).
        model_kwargs: keyword arguments of the model whose names clash with this
            function's own.
        **kwargs: keyword arguments of the model call (both calls).

    Returns:
        A :class:`~.report.CompiledReport`; ``bool(report)`` is ``report.ok``, and
        ``report.lines()`` explains what diverged.

    Raises:
        TypeError: ``model`` is not an ``nn.Module``.
        ValueError: ``backward=True`` and no output requires grad (no ``loss_fn``).
        torch._dynamo.exc.InvalidBackend: ``backend`` names no registered backend.
        Exception: whatever the model raises, eagerly or compiled; hooks are
            restored and Dynamo is reset first.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(
            "compare_compiled() needs an nn.Module as its first argument, got "
            f"{type(model).__name__}; call compare_compiled(model, *inputs)"
        )
    orig = getattr(model, "_orig_mod", None)
    if type(model).__name__ == "OptimizedModule" and isinstance(orig, torch.nn.Module):
        model = orig
    if model_kwargs:
        kwargs = {**kwargs, **model_kwargs}
    reset_dynamo()
    _materialise_lazy(model, args, kwargs)
    run = _CheckRun(model, args, kwargs, Tolerance(rtol, atol), backend)
    try:
        run.hooks.wrap()
        rng = _rng_state()
        graph, eager_out = run.eager_forward()
        eager_bwd = run.eager_backward(rng, loss_fn) if backward else None
        written = run.parameters_written()
        compiled, compiled_out = run.compiled_forward(rng, eager_out)
        if eager_bwd is not None:
            run.compiled_backward(compiled_out, eager_bwd, loss_fn)
        second = second_args is not None or after_first_call is not None
        if second:
            run.second_call(compiled, second_args, after_first_call)
        report = run.report(
            graph,
            written,
            third_party,
            second,
            allow_graph_breaks=allow_graph_breaks,
            strict=strict,
            backward=backward,
        )
    finally:
        run.close()
    return report


class _CheckRun:
    """The state of one :func:`compare_compiled` call, and its steps in order: the eager
    forward (traced), the eager backward, the compiled forward, the compiled backward,
    the optional second call, the report. ``close`` undoes everything it installed."""

    def __init__(
        self,
        model: torch.nn.Module,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        tolerance: Tolerance,
        backend: Delegate,
    ) -> None:
        self.model, self.args, self.kwargs = model, args, kwargs
        self.tolerance = tolerance
        self.backend = backend
        self.skip_guards = bool(torch._dynamo.config.skip_nnmodule_hook_guards)
        self.hooks = HookLog(model)
        self.watch = CompileWatch(model)
        self.recorder = GraphRecorder(backend, model=model)
        self.start = ModelState(model)
        self.hook_events: dict[str, list[HookEvent]] = {}
        self.hook_problems: list[Any] = []
        self.numerics: list[NumericDiff] = []
        self.grad_diffs: list[NumericDiff] = []
        self._eager_backward_events: list[HookEvent] = []
        self.first_graphs = self.first_runs = self.n_compiles = 0

    def eager_forward(self) -> tuple[GraphIR, Any]:
        """Trace the eager forward (structure only); return the graph and the output."""
        box: list[Any] = []
        handle = self.model.register_forward_hook(lambda _m, _a, out: box.append(out))
        try:
            with _force_eager():
                graph = trace(self.model, *self.args, stats=False, model_kwargs=self.kwargs)
        finally:
            handle.remove()
        self.hook_events["eager"] = self.hooks.take()
        return graph, box[-1] if box else None

    def eager_backward(self, rng: Any, loss_fn: Callable[[Any], torch.Tensor] | None) -> Any:
        """Run forward and backward eagerly from the starting state; return the gradients."""
        self.start.restore()
        _set_rng_state(rng)
        with _force_eager():
            out = self.model(*self.args, **self.kwargs)
        self.hooks.take()
        grads = run_backward(self.model, out, loss_fn)
        self._eager_backward_events = self.hooks.take()
        return grads

    def parameters_written(self) -> list[NumericDiff]:
        """Parameters the eager forward wrote in place (their old value is not kept)."""
        return [
            NumericDiff(
                f"{name} (parameter)",
                "written in place by the eager forward, "
                "so the compiled run started from another value",
                1,
            )
            for name in self.start.changed
        ]

    def compiled_forward(self, rng: Any, eager_out: Any) -> tuple[Any, Any]:
        """Compile with the recording backend, run it from the starting state, compare
        hooks and outputs with the eager run; return the compiled model and its output."""
        self.start.restore()
        _set_rng_state(rng)
        compiled = torch.compile(self.model, backend=self.recorder)
        self.watch.install()
        out = compiled(*self.args, **self.kwargs)
        self.hook_events["compiled"] = self.hooks.take()
        self.first_graphs, self.first_runs = len(self.recorder.graphs), len(self.recorder.runs)
        self.n_compiles = len(self.watch.compiles)
        self.hook_problems += compare_hooks(
            self.hook_events["eager"], self.hook_events["compiled"], [], self.skip_guards, 1
        )
        self.numerics += compare_outputs(eager_out, out, self.tolerance, 1)
        return compiled, out

    def compiled_backward(
        self, compiled_out: Any, eager_grads: Any, loss_fn: Callable[[Any], torch.Tensor] | None
    ) -> None:
        """Backward through the compiled output; compare backward hooks and gradients."""
        grads = run_backward(self.model, compiled_out, loss_fn)
        self.hook_events["eager_backward"] = self._eager_backward_events
        self.hook_events["compiled_backward"] = self.hooks.take()
        self.hook_problems += compare_hooks(
            self.hook_events["eager_backward"],
            self.hook_events["compiled_backward"],
            [],
            self.skip_guards,
            1,
            "backward",
        )
        self.grad_diffs = compare_grads(eager_grads, grads, self.tolerance)

    def second_call(
        self,
        compiled: Any,
        second_args: tuple[Any, ...] | None,
        after_first_call: Callable[[], object] | None,
    ) -> None:
        """Call both models again (after ``after_first_call``), from the same state;
        compare hooks (late ones included) and outputs."""
        if after_first_call is not None:
            after_first_call()
        self.hooks.wrap()
        args2 = tuple(second_args) if second_args is not None else self.args
        rng = _rng_state()
        state2 = ModelState(self.model)
        with _force_eager():
            eager_out = self.model(*args2, **self.kwargs)
        self.hook_events["eager_2"] = self.hooks.take()
        state2.restore()
        _set_rng_state(rng)
        compiled_out = compiled(*args2, **self.kwargs)
        self.hook_events["compiled_2"] = self.hooks.take()
        self.hook_problems += compare_hooks(
            self.hook_events["eager_2"],
            self.hook_events["compiled_2"],
            self.hooks.late,
            self.skip_guards,
            2,
        )
        self.numerics += compare_outputs(eager_out, compiled_out, self.tolerance, 2)

    def report(
        self,
        graph: GraphIR,
        written: list[NumericDiff],
        third_party: tuple[str, ...],
        second: bool,
        *,
        allow_graph_breaks: bool,
        strict: bool,
        backward: bool,
    ) -> CompiledReport:
        """Align the eager ops with the compiled ones, collect graph breaks and
        recompiles, and build the :class:`~.report.CompiledReport`."""
        from torch._dynamo.utils import counters

        recorder, watch = self.recorder, self.watch
        executed = [
            CompiledOp(op.target, scope, g, op.frames, run=r)
            for r in range(self.first_runs)
            for op, scope, g in recorder.executed_ops(r, r + 1)
        ]
        _hook_scopes(executed, self.hooks.forward_hook_codes())
        eager_list = eager_ops(graph)
        divergences, folded = align_ops(eager_list, executed, third_party)
        second_ids = {cid for cid, _ in watch.compiles[self.n_compiles :]}
        breaks = watch.breaks(
            dict(counters["graph_break"]), recorder.graphs, dict(counters["unimplemented"])
        )
        spread_to_reused(breaks, recorder.graphs, recorder.runs)
        first = recorder.graphs[: self.first_graphs]
        return CompiledReport(
            model=type(self.model).__name__,
            backend=_backend_name(self.backend),
            graphs=list(recorder.graphs),
            first_call_graphs=self.first_graphs,
            breaks=breaks,
            allow_graph_breaks=allow_graph_breaks,
            eager_ops=len(eager_list),
            compiled_ops=len(executed),
            divergences=divergences,
            hook_events=self.hook_events,
            hook_problems=self.hook_problems,
            numerics=written + self.numerics + self.grad_diffs,
            tolerance=self.tolerance,
            second_call=second,
            recompiles=len(set(watch.recompiles()) & second_ids),
            recompile_reasons=recompile_reasons() if second else [],
            unique_graphs=_stats_counter("unique_graphs"),
            guards=watch.guard_count(),
            skip_hook_guards=self.skip_guards,
            eager=graph,
            graph_break_count=_break_count(first),
            break_reasons=[g.break_reason or "" for g in first if g.graph_break],
            folded=folded,
            strict=strict,
            backward=backward,
        )

    def close(self) -> None:
        """Put the model's state and hooks back, remove the watchers, reset Dynamo."""
        self.start.restore()
        self.hooks.restore()
        self.watch.remove()
        reset_dynamo()
