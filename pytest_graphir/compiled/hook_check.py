"""The model's own hooks under ``torch.compile``: which fired, and where their ops belong.

``compare_compiled`` logs the model's forward (pre-)hooks and full backward
(pre-)hooks with :class:`~pytest_graphir.capture.hooks.UserHooks`, the trace's own
wrapper. :func:`compare_hooks` names each hook that vanished, appeared or moved under
compile; a hook registered after the first compiled call is *late*: while
``torch._dynamo.config.skip_nnmodule_hook_guards`` is True, Dynamo installs no guard
on a module's hook dicts, reuses the graph compiled without the hook, and the hook
silently never fires (``docs/torch-notes.md``, *Module hooks under torch.compile*).
:func:`hook_scopes` puts the ops a forward hook ran where the eager trace puts them,
before the op alignment.
"""

from __future__ import annotations

from collections import Counter

import torch

from ..capture.hooks import HookEvent, UserHooks
from ..compare.hooks import unmatched
from ..names import parent_path
from .compiled_report import HookProblem
from .frames import within
from .records import CompiledOp


def compare_hooks(
    eager: list[HookEvent],
    compiled: list[HookEvent],
    late: list[HookEvent],
    skip_guards: bool,
    call: int,
    phase: str = "forward",
) -> list[HookProblem]:
    """Compare the hook events of an eager and a compiled call.

    An event left unmatched on both sides (:func:`~pytest_graphir.compare.hooks.
    unmatched`) is ``order``; one only eager is ``skipped``, or ``late_skipped`` when
    its hook is in ``late`` while ``skip_nnmodule_hook_guards`` (``skip_guards``) was
    True; one only compiled is ``extra``.
    """
    missing, extra = unmatched(eager, compiled)
    moved = Counter(missing) & Counter(extra)
    spare = Counter(extra) - moved
    out: list[HookProblem] = []
    for e in missing:
        moved[e] -= 1
        late_skip = skip_guards and e in late
        kind = "order" if moved[e] >= 0 else "late_skipped" if late_skip else "skipped"
        out.append(HookProblem(kind, e, call, phase))
    for c in extra:
        spare[c] -= 1
        if spare[c] >= 0:
            out.append(HookProblem("extra", c, call, phase))
    return out


def hook_scopes(executed: list[CompiledOp], model: torch.nn.Module, hooks: UserHooks) -> None:
    """Put ops run inside a module's forward hook where the eager trace puts them.

    Eager, a forward hook runs after the module's scope has closed, so its ops belong
    to the parent module; Dynamo's ``nn_module_stack`` still holds the hooked
    module. An op whose ``stack_trace`` passes through the code of a forward hook of
    module ``p`` of ``model`` (the original of the one ``hooks`` wrapped, a
    ``functools.partial``'s function or a callable object's ``__call__``) is moved
    from ``p`` to ``p``'s parent, and remembers ``p`` (``hook_of``): the alignment
    accepts either scope for it, whichever the eager trace chose.
    """
    codes: dict[tuple[str, str], str] = {}  # (co_filename, co_name) -> module path
    for path, module in model.named_modules():
        for fn in module._forward_hooks.values():
            original = hooks.original(fn)
            inner = getattr(original, "func", original)
            code = getattr(inner, "__code__", None) or getattr(
                vars(type(inner)).get("__call__"), "__code__", None
            )
            if code is not None:
                codes.setdefault((code.co_filename, code.co_name), path)
    for op in executed:
        for file, _line, function, _code in op.frames:
            path = codes.get((file, function))
            if path and within(op.scope, path):
                op.scope = parent_path(path)
                op.hook_of = path
                break
