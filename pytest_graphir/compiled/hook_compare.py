"""Hook events of the eager call against the compiled one, and the scope of hook ops.

:func:`compare_hooks` aligns two event lists (:class:`~.hooks.HookEvent`) and names
each hook that vanished, appeared or moved under compile; :func:`hook_scopes` puts
the ops a forward hook ran where the eager trace puts them, before the op alignment.
"""

from __future__ import annotations

import difflib

from ..names import parent_path
from .hooks import HookEvent
from .records import CompiledOp
from .report import HookProblem


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


def hook_scopes(executed: list[CompiledOp], codes: dict[tuple[str, str], str]) -> None:
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
