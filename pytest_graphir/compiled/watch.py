"""Watch Dynamo compile frames: compile ids, graph-break sites, guard counts, recompiles.

:class:`CompileWatch` registers a start and an end callback with
``torch._dynamo.callback_handler`` (both are dropped by ``torch._dynamo.reset()``,
so register after resetting). At the start of each frame compile it notes Dynamo's
compile id (``"0/0"``; ``"0/1"`` is the first recompile of frame 0) and the module
the frame belongs to (:func:`~.watch.frame_root`); at the end it collects the
``GraphCompileReason``s Dynamo appended to ``torch._dynamo.output_graph.
graph_break_reasons`` meanwhile, with their user stacks. A break whose frame
produced no graph (``x.tolist()`` right after a resume) never reaches the backend,
so this is the only place it can be located.

:meth:`CompileWatch.breaks` turns the sites into :class:`~.records.BreakRecord`s,
keeping only reasons that ``torch._dynamo.utils.counters["graph_break"]`` counts (the inner
frame's ``generic_jump`` reason for a break Dynamo already reported at the outer
frame's call site is not a second break). Dynamo's private objects are read through
:mod:`.dynamo_state`.

Frames are put at module paths here too: the *frame root* (:func:`frame_root`: the
first frame outward whose first argument is one of the model's modules) and the *code
owners* of a break's user stack (:meth:`CompileWatch._locate`: the modules whose class
defines that function); :func:`clean_reason` makes a reason one machine-independent line, and
:func:`readable_path` a source file a path a reader can open.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import time
import types
from collections.abc import Iterable
from typing import Any

import torch

from ..capture.hooks import CALL_HOOK_DICTS
from ..names import first_names
from . import dynamo_state
from .records import BreakRecord, GraphRecord, GraphRun

_Stack = list[tuple[str, str, int | None, str]]
"""A break's user stack, outermost first: ``(filename, function, line number, code)``."""


class CompileWatch:
    """Collect compile ids, frame modules and graph-break sites (module docstring).

    Relies on ``torch._dynamo.callback_handler`` (``register_start_callback`` /
    ``register_end_callback``, dropped by ``torch._dynamo.reset()``) and
    ``torch._dynamo.output_graph.graph_break_reasons``.

    The callbacks are registered when the watch is made.

    Args:
        model: the model being compiled (modules are located in it).

    Attributes:
        compiles: ``(compile id, frame root)`` per frame compile, in order.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.paths = module_paths(model)
        self.modules = dict(model.named_modules())
        self.compiles: list[tuple[str, str | None]] = []
        self._sites: list[tuple[str, str | None, str, _Stack]] = []  # id, root, reason, stack
        self._open: list[tuple[str, str | None, int]] = []
        # make it after torch._dynamo.reset(), which drops callbacks: the next reset
        # removes these
        dynamo_state.on_compile(self._start, self._end)
        self._since = time.time()

    # -- callbacks ------------------------------------------------------------------

    def _start(self, args: Any) -> None:
        entry = (str(getattr(args, "compile_id", "")), frame_root(sys._getframe(1), self.paths))
        self.compiles.append(entry)
        self._open.append((*entry, len(dynamo_state.break_reasons())))

    def _end(self, args: Any) -> None:
        cid, root, mark = self._open.pop()
        for reason in dynamo_state.break_reasons()[mark:]:
            stack = [
                (f.filename, f.name, f.lineno, (f.line or "").strip())
                for f in getattr(reason, "user_stack", None) or []
            ]
            self._sites.append((cid, root, str(reason.reason), stack))

    # -- results --------------------------------------------------------------------
    def recompiles(self, start: int = 0) -> list[str]:
        """Compile ids that were recompiles (``"0/1"``: frame 0, second compile), from the
        ``start``-th compile on."""
        attempts = [(cid, cid.strip("[]").partition("/")[2]) for cid, _ in self.compiles[start:]]
        return [cid for cid, n in attempts if n.isdecimal() and int(n) > 0]

    def guard_count(self) -> int | None:
        """Guards installed over this watch's compiles, from
        ``torch._dynamo.utils.get_compilation_metrics()``; None when it has none."""
        # the records outlive torch._dynamo.reset(), and compile ids restart at 0/0
        # after it: only count records of compiles that started after the watch was made
        counts = [
            m.guard_count
            for m in dynamo_state.compilation_metrics()
            if m.guard_count is not None and (m.start_time or 0.0) >= self._since - 1e-3
        ]
        return sum(counts) if counts else None

    def _locate(self, root: str | None, stack: _Stack) -> tuple[list[str], str, str]:
        """Candidate module paths and ``Class.function: line`` of a break site.

        The innermost frame of the break's user stack whose code a module class of the
        model defines decides; candidates outside the compiled frame's module are
        dropped, and the frame's module itself wins when it is one. More than one
        candidate is left when the break bubbled up to an outer frame's call of one of
        several instances of the same class.
        """
        for filename, name, lineno, line in reversed(stack):
            owners = [  # the modules whose class defines that function (code owners)
                path
                for path, module in self.modules.items()
                if any(
                    (f, n) == (filename, name) and (lineno is None or first <= lineno <= last)
                    for f, n, first, last in _class_codes(type(module))  # type: ignore[arg-type]
                )
            ]
            if root is not None:
                inside = [p for p in owners if within(p, root)]
                owners = [root] if root in inside else inside
            if owners:
                cls = type(self.modules[owners[0]]).__name__
                return owners, _location(f"{cls}.{name}", line), _source(filename, lineno)
        filename, name, lineno, line = stack[-1] if stack else ("", "", None, "")
        return [root] if root is not None else [], _location(name, line), _source(filename, lineno)

    def breaks(self, graphs: list[GraphRecord], runs: list[GraphRun]) -> list[BreakRecord]:
        """Graph breaks, located: one record per (source line, module).

        A site is kept when its reason is counted in ``counters["graph_break"]`` or
        ``counters["unimplemented"]`` (torch 2.13 counts a data-dependent ``if`` in the
        compiled frame's own code only there), or when a graph ended at it
        (``compile_subgraph_reason.graph_break``, what ``torch._dynamo.explain``
        counts). Dynamo reports a break inside a submodule twice: at the outer
        frame's call of the submodule, and again when it compiles the submodule's own
        frame; both name one source line and module, and are one record (``count``
        2). A terse reason (``generic_jump TensorVariable()``) takes the explained
        one Dynamo counted for the same source line. A site left with several
        candidate modules (the outer frame's view of one of several instances) only
        counts when no site of that line resolved, and then names all candidates.

        The counters are read here (:func:`~.dynamo_state.break_counts`: reason ->
        count since the last reset).

        Args:
            graphs: the recorded graphs; their break reasons are sites to keep.
            runs: the runs of those graphs: a break is spread to the modules a graph
                ending at it was reused for (:func:`spread_to_reused`).

        Returns:
            Records in the order Dynamo hit them; reasons counted but never seen at a
            site (unusual) come last with ``scope=None``.
        """
        counted, unimplemented = dynamo_state.break_counts()
        raws = [*counted, *unimplemented]
        known = {clean_reason(r) for r in raws}
        known.update(g.break_reason or "" for g in graphs if g.graph_break)  # cleaned already
        groups: dict[str, list[tuple[list[str], str, str, str]]] = {}
        for cid, root, raw, stack in self._sites:
            if (reason := clean_reason(raw)) in known:
                owners, location, source = self._locate(root, stack)
                code = stack[-1][3] if stack else ""
                if _terse(reason) and code:  # the explained reason counted for that line
                    reason = next((clean_reason(r) for r in raws if f"code: {code}" in r), reason)
                groups.setdefault(location, []).append((owners, cid, reason, source))
        out: list[BreakRecord] = []
        for where, sites in groups.items():
            reason = next((r for _, _, r, _ in sites if not _terse(r)), sites[0][2])
            source = sites[-1][3]  # one location, one source line
            # one record per module a site resolved to; else one naming every candidate
            by_scope = {o[0]: [s for s in sites if s[0] == o] for o, *_ in sites if len(o) == 1}
            for same in (by_scope or {"": sites}).values():
                scopes = sorted({p for owners, *_ in same for p in owners})
                scope = scopes[0] if scopes else None
                ids = {cid for _, cid, _, _ in same}
                hook = _hook_cause(reason, scope, self.modules)
                out.append(BreakRecord(reason, scope, where, len(same), scopes, ids, source, hook))
        seen = {r.reason for r in out}
        for raw, n in counted.items():
            reason = clean_reason(raw)
            if not any(reason in r for r in seen):  # not seen, nor part of a reason seen
                out.append(BreakRecord(reason, None, "", n))
                seen.add(reason)
        spread_to_reused(out, graphs, runs)
        return out


def _source(filename: str, lineno: int | None) -> str:
    line = f":{lineno}" if lineno is not None else ""
    return readable_path(filename) + line if filename else ""


def _hook_cause(reason: str, scope: str | None, modules: dict[str, torch.nn.Module]) -> str:
    """``"a backward hook on fc1, fc2"`` when Dynamo's reason says a module hook caused
    the break (``Module-level backwards hooks require compiled autograd``): the
    modules inside ``scope`` that have full backward (pre-)hooks, else ``scope``."""
    low = reason.lower()
    if "hook" not in low:
        return ""
    backward = "backward" in low
    attrs = [a for a in CALL_HOOK_DICTS if not backward or "backward" in a]
    hooked = [
        p
        for p, m in modules.items()
        if within(p, scope or "") and any(getattr(m, a, None) for a in attrs)
    ]
    shown = first_names(p or "<model>" for p in hooked) or (scope or "<model>")
    return f"a {'backward' if backward else 'module'} hook on {shown}"


def _terse(reason: str) -> bool:
    """Dynamo's developer-facing reasons (``generic_jump TensorVariable()``)."""
    return reason.startswith(("generic_jump", "Unsupported:")) or "[gb" not in reason


def _location(function: str, line: str) -> str:
    """``"Gate.forward: if h.sum() > 0:"``, the line's trailing comment dropped."""
    code = line.split("  #", 1)[0].strip()
    return scrub(f"{function}: {code}") if code else function


def spread_to_reused(
    breaks: list[BreakRecord], graphs: list[GraphRecord], runs: list[GraphRun]
) -> None:
    """Add to each break the modules a graph ending at it was reused for.

    Dynamo caches compiled code per code object: a block's frame compiled for
    ``blocks.0`` may run again for ``blocks.1`` without a new compile, so the break is
    hit (and located) once. The runs of the graph that ended at the break say which
    modules it ran for; the break's scope is moved to each (:func:`~.watch.rebase`).
    """
    for graph in graphs:
        if not graph.graph_break or not graph.compile_id:
            continue
        roots = [r.frame_root for r in runs if r.graph == graph.index]
        for record in breaks:
            if record.scope is None or graph.compile_id not in record.compile_ids:
                continue
            for root in roots:  # an unknown root or frame root leaves the scope where it is
                if (scope := rebase(record.scope, graph.frame_root, root)) not in record.scopes:
                    record.scopes.append(scope)


STACK_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n?(?:[ \t]+(.*))?')
"""One frame of a ``traceback``-format stack: file, line, function, then the code line."""
_COMMENT_FRAME = re.compile(r"^(\S+\.py):(\d+) in (\S+)$")


def _loaded_file(tail: str) -> str:
    """The one loaded module file whose path ends with ``tail`` (a guard comment cuts
    a path to its last characters: ``mp/h13/model.py``), made readable
    (:func:`readable_path`); ``tail`` itself when none or several do."""
    found = {
        f
        for f in (getattr(m, "__file__", None) for m in list(sys.modules.values()))
        if isinstance(f, str) and f.endswith(tail)
    }
    return readable_path(found.pop()) if len(found) == 1 else tail


def readable_reason(text: str) -> str:
    """A guard failure as a reader wants it, on one line.

    Dynamo writes ``"0/0: k == 2   # return self.fc(x) * k  # mp/h13/model.py:7 in
    forward\nUser stack trace:\n  File "/tmp/h13/model.py", line 7, in forward ..."``:
    the comment's path is cut to its last characters. The result is ``"0/0: k == 2
    (return self.fc(x) * k; /tmp/h13/model.py:7 in forward)"``: the guard, the code
    line and the full user frame, its path made readable (relative to site-packages
    or the working directory, :func:`~.watch.readable_path`). Without a user stack
    (older torch, 2.9 among them, writes none), the cut path is completed from the one loaded
    module whose file ends with it, or kept as written.
    """
    head, _, stack = text.partition("User stack trace:")
    guard, _, comment = head.partition("#")
    code = comment.partition("#")[0].strip()
    user = [frame[:3] for frame in STACK_FRAME.findall(stack)]
    cut = _COMMENT_FRAME.findall(comment.partition("#")[2].strip())
    where = ""
    for file, line, function in (user or cut)[-1:]:  # no user stack: the cut path, made whole
        where = f"{readable_path(file) if user else _loaded_file(file)}:{line} in {function}"
    detail = "; ".join(p for p in (code, where) if p)
    guard = " ".join(guard.split())
    return f"{guard} ({detail})" if detail else guard


def recompile_reasons() -> list[str]:
    """Guard failures that caused recompiles, from ``torch._dynamo.utils.guard_failures``
    (``"0/0: tensor 'x' size mismatch at index 0. expected 2, actual 3"``, ``"0/0: k ==
    2 # return self.fc(x) * k # tests/test_x.py:7 in forward"``), for messages: paths
    are readable, not removed (:func:`readable_reason`)."""
    texts = (readable_reason(str(getattr(r, "reason", r))) for r in dynamo_state.guard_failures())
    return list(dict.fromkeys(text for text in texts if text))


MAX_REASON = 240
"""Longest cleaned reason kept (characters)."""

_GB_CODE = re.compile(r"/gb/(gb\d+)\.html")
AT_LINE = re.compile(r"_at_\d+")
"""The line number in a Dynamo frame name (``torch_dynamo_resume_in_forward_at_17``)."""
_SCRUB = [  # (what differs between machines, what stands for it), in order
    (re.compile(r"File \"[^\"]*\""), 'File "<file>"'),
    (re.compile(r"(?:[A-Za-z]:)?(?:[\\/][\w.\-<>]+)+\.pyc?"), "<file>"),
    (re.compile(r"\bline \d+"), "line <n>"),
    (AT_LINE, ""),
    (re.compile(r"0x[0-9a-fA-F]+"), "0x?"),
]


def scrub(text: str) -> str:
    """Remove what differs between machines: file paths, line numbers, addresses."""
    for pattern, stand_in in _SCRUB:
        text = pattern.sub(stand_in, text)
    return " ".join(text.split())


def clean_reason(reason: str) -> str:
    """Return a one-line, machine-independent form of a Dynamo graph-break reason.

    Args:
        reason: a key of ``counters["graph_break"]`` or a
            ``GraphCompileReason.reason``, e.g. ``"Data-dependent branching\\n
            Explanation: Detected data-dependent branching (e.g. ...). Dynamo does not
            ...\\n  Hint: ...\\n For more details ... /gb/gb0170.html"``.

    Returns:
        ``"Data-dependent branching: Detected data-dependent branching (e.g. `if
        my_tensor.sum() > 0:`). Dynamo does not support tracing dynamic control
        flow. [gb0170]"``: the headline, the first line of the explanation, and the
        graph-break site code when the reason has one. No paths, line numbers or
        addresses.
    """
    head, *rest = [line.strip() for line in reason.strip().splitlines()] or [""]
    explanation = next((x[12:].strip() for x in rest if x.startswith("Explanation:")), "")
    text = scrub(head)
    if explanation and explanation not in head:
        text = f"{text}: {scrub(explanation)}"
    if len(text) > MAX_REASON:
        text = text[: MAX_REASON - 3].rstrip() + "..."
    if code := _GB_CODE.search(reason):
        text = f"{text} [{code.group(1)}]"
    return text


def module_paths(model: torch.nn.Module) -> dict[int, str]:
    """``id(module) -> module path`` for every module of ``model`` (``""`` for the model);
    a module reachable under two names keeps the first, as in the eager trace."""
    return {id(m): path for path, m in model.named_modules()}


def frame_root(frame: types.FrameType | None, paths: dict[int, str]) -> str | None:
    """Walk outward from ``frame`` to the first frame whose first argument is a module
    in ``paths``; return that module's path, or None when no frame has one."""
    while frame is not None:
        code = frame.f_code  # co_argcount counts positional-only arguments too
        first = frame.f_locals.get(code.co_varnames[0]) if code.co_argcount else None
        if isinstance(first, torch.nn.Module) and id(first) in paths:
            return paths[id(first)]
        frame = frame.f_back
    return None


def function_codes(func: Any) -> Iterable[types.CodeType]:
    """Code objects of a function and of what it wraps (``functools.wraps`` chains)."""
    for _ in range(8):  # a bounded walk, in case a __wrapped__ chain loops
        if isinstance(func, (staticmethod, classmethod)):
            func = func.__func__
        code = getattr(func, "__code__", None)
        if isinstance(code, types.CodeType):
            yield code
        func = getattr(func, "__wrapped__", None)


@functools.lru_cache(maxsize=256)
def _class_codes(cls: type) -> tuple[tuple[str, str, int, int], ...]:
    """``(filename, name, first line, last line)`` of every function a module class
    defines (its own and inherited, ``nn.Module`` itself excluded); cached per class."""
    out: list[tuple[str, str, int, int]] = []
    for klass in [k for k in cls.__mro__ if k is not torch.nn.Module and k is not object]:
        for code in (c for value in vars(klass).values() for c in function_codes(value)):
            last = max((n for _, _, n in code.co_lines() if n), default=code.co_firstlineno)
            out.append((code.co_filename, code.co_name, code.co_firstlineno, last))
    return tuple(out)


def within(path: str, root: str) -> bool:
    """True when module ``path`` is ``root`` or inside it."""
    return not root or path == root or path.startswith(root + ".")


def rebase(scope: str, base: str | None, root: str | None) -> str:
    """Move ``scope`` from under module ``base`` to under module ``root`` (left where it
    is when either is unknown, None).

    A graph compiled for ``blocks.0`` and reused for ``blocks.1`` (Dynamo caches per
    code object) records ``blocks.0.fc``; run for ``blocks.1`` it is ``blocks.1.fc``.
    """
    if base is None or root is None or (scope != base and not (base and within(scope, base))):
        return scope
    return root + scope[len(base) :]


def readable_path(filename: str) -> str:
    """A path a reader can open: relative to its site-packages directory
    (``transformers/masking_utils.py``) or to the working directory, else absolute."""
    path = os.path.abspath(filename)
    if m := re.search(r".*/(?:site|dist)-packages/(.*)", path.replace("\\", "/")):
        return m.group(1)
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return path
    return path if rel.startswith("..") else rel
