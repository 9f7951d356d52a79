"""A snapshot of the torch state a trace may touch, to check it is left as it was.

Used by the breadth suite and the interrupt tests: the attributes of ``torch``,
``torch.nn.functional``, ``torch._C._nn``, ``torch.Tensor`` and ``torch.overrides``
(by identity), the global module hook dicts of ``torch.nn.modules.module`` (their keys
and hook objects) and its ``_global_is_full_backward_hook`` flag, the
TorchFunctionMode stack depth, grad mode, the garbage collector's on/off state, the
patch interceptor's process-wide state, TorchScript's builtin-op table (the patch
interceptor enters its wrappers there), the SIGINT handler and the state of
:mod:`pytest_graphir.capture.interrupts`, and the other-thread watch's counters (the
watches entered, the threads that run a program of their own) and threading's
profile function.
"""

from __future__ import annotations

import gc
import signal
import sys
import threading
from typing import Any

import torch
import torch.nn.functional as F
import torch.nn.modules.module as mm
import torch.overrides

from pytest_graphir.capture import interrupts, patch
from pytest_graphir.capture.threads import OtherThreads

NAMESPACES: dict[str, Any] = {
    "torch": torch,
    "torch.nn.functional": F,
    "torch._C._nn": torch._C._nn,
    "torch.Tensor": torch.Tensor,
    "torch.fft": torch.fft,
    "torch.linalg": torch.linalg,
    "torch.special": torch.special,
    "torch.overrides": torch.overrides,
    "torch._tensor": sys.modules["torch._tensor"],
    "torch.functional": sys.modules["torch.functional"],
}


BOOKKEEPING = frozenset({"__warningregistry__"})
"""Module globals Python itself adds, not torch state: the warnings machinery creates
``__warningregistry__`` in a module the first time any warning (filtered ones too) is
raised from its code, so whether it appears during a test depends on which test of the
process ran such code first (``torch.overrides`` builds its lookup tables under
``warnings.catch_warnings`` on first use)."""


def snapshot() -> dict[str, Any]:
    """The state, as plain data: namespace dicts copied (values compared by identity)."""
    hooks = {
        name: list(getattr(mm, name).items())
        for name in vars(mm)
        if name.startswith("_global_") and isinstance(getattr(mm, name), dict)
    }
    return {
        "namespaces": {
            name: {k: v for k, v in vars(ns).items() if k not in BOOKKEEPING}
            for name, ns in NAMESPACES.items()
        },
        "hooks": hooks,
        "full_backward_flag": mm._global_is_full_backward_hook,
        "mode_stack": torch._C._len_torch_function_stack(),
        "grad_enabled": torch.is_grad_enabled(),
        "gc_enabled": gc.isenabled(),
        "jit_builtins": dict(torch.jit._builtins._get_builtin_table()),  # type: ignore[no-untyped-call]
        "patch_active": list(patch.ACTIVE),
        "patch_owner": patch.STATE.owner,
        "patch_depth": patch.STATE.depth,
        "sigint": signal.getsignal(signal.SIGINT),
        "thread_watch": (OtherThreads.entered, list(OtherThreads.owners), threading.getprofile()),
        "interrupt_guard": (
            interrupts._G.installed,
            interrupts._G.users,
            interrupts._G.depth,
            len(interrupts._G.cleanups),
            interrupts._G.pending,
        ),
    }


def differences(
    before: dict[str, Any], after: dict[str, Any] | None = None, ignore: tuple[str, ...] = ()
) -> list[str]:
    """What changed since ``before`` (``after`` defaults to now): ``[]`` when nothing.
    ``ignore`` names top-level keys of :func:`snapshot` not to compare."""
    after = after if after is not None else snapshot()
    before = {k: v for k, v in before.items() if k not in ignore}
    after = {k: v for k, v in after.items() if k not in ignore}
    out: list[str] = []
    for name, old in before.get("namespaces", {}).items():
        new = after["namespaces"][name]
        for key in old.keys() - new.keys():
            out.append(f"{name}.{key} deleted")
        for key in new.keys() - old.keys():
            out.append(f"{name}.{key} added")
        out.extend(
            f"{name}.{key} replaced" for key in old.keys() & new.keys() if old[key] is not new[key]
        )
    for name, old in before.get("hooks", {}).items():
        new = after["hooks"][name]
        if [(k, id(v)) for k, v in old] != [(k, id(v)) for k, v in new]:
            out.append(f"torch.nn.modules.module.{name}: {len(old)} -> {len(new)} entries")
    if "jit_builtins" in before and before["jit_builtins"] != after["jit_builtins"]:
        added = after["jit_builtins"].keys() - before["jit_builtins"].keys()
        out.append(f"TorchScript's builtin table: {len(added)} entries added, or others changed")
    for key in ("full_backward_flag", "mode_stack", "grad_enabled", "patch_depth"):
        if key in before and before[key] != after[key]:
            out.append(f"{key}: {before[key]!r} -> {after[key]!r}")
    for key in ("patch_active", "patch_owner", "sigint", "interrupt_guard"):
        if key in before and before[key] != after[key]:
            out.append(f"{key}: {before[key]!r} -> {after[key]!r}")
    return out
