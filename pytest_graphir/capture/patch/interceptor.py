"""The patch interceptor itself: :class:`PatchInterceptor` patches the targets
(:mod:`.targets`) with their replacements (:mod:`.wrappers`) and the model's aliases
(:mod:`.aliases`), records on the thread that entered it, and restores everything on
the way out (see :mod:`pytest_graphir.capture.patch`)."""

from __future__ import annotations

import contextlib
import sys
import time
import types
from collections.abc import Callable, Collection
from typing import Any

import torch

from ...opnames import canonical_op
from .. import interrupts
from ..interrupts import deferred_sigint
from ..protocol import Record
from . import wrappers
from .aliases import AliasSite, find_aliases
from .targets import (
    DEFAULT_SKIP,
    FLUSH_ONLY,
    MISSING,
    helper_sites,
    jit_builtin_table,
    op_targets,
    warm_caches,
)
from .wrappers import ORIGINALS, STATE, in_recorded_op, replacement

ACTIVE: list[PatchInterceptor] = []
"""The one interceptor whose patches are installed (empty: none). Taken and given back
without a lock (``list.append``, ``list.remove`` and indexing are atomic under the
GIL), so no exception at any line can leave a lock held for the clean-up to wait on."""


class AlreadyActiveError(RuntimeError):
    """A ``PatchInterceptor`` was entered while one is active in this process."""


class _ReleaseOnError(contextlib.AbstractContextManager["_ReleaseOnError"]):
    """``with`` block that releases ``interceptor`` (:meth:`PatchInterceptor.release`)
    when the block raises, unless it was refused (:class:`AlreadyActiveError`: then
    nothing was taken, and the active interceptor, maybe this one, goes on)."""

    __slots__ = ("interceptor",)

    def __init__(self, interceptor: PatchInterceptor) -> None:
        self.interceptor = interceptor

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        if kind is not None and not issubclass(kind, AlreadyActiveError):
            self.interceptor.release()


class PatchInterceptor:
    """Records ops by patching torch's op symbols for the duration of a ``with`` block.

    ``trace(model, *args, interceptor="patch")`` builds one and runs the forward
    inside it; the IR is the same as with the default TorchFunctionMode interceptor
    (see the module docstring for how, and for the known limits).

    Args:
        record: ``record(name, raw, args, kwargs, out)``, called after every recorded
            op with the canonical op name (:func:`~pytest_graphir.opnames.canonical_op`
            of the original callable), its resolved qualified name, the call's
            arguments as ``__torch_function__`` would receive them, and the result.
            It runs at depth 1, so torch calls it makes are not recorded.
        model: optional ``nn.Module`` whose import-time aliases of patched
            functions are patched too (see :mod:`.aliases`); listed in
            :attr:`aliased`, the ones that can not be patched in :attr:`uncaptured`.
        skip: qualified names (``"torch.Tensor.add"``) or canonical op names
            (``"dropout"``) not to patch or record; defaults to :data:`DEFAULT_SKIP`.
            A skipped Python function still runs with what it calls hidden.
        before_write: called (with no arguments) before a recorded call that may
            write into an existing tensor, as :class:`~.mode.RecordingMode` does.

    Attributes:
        active: set to ``False`` (by the tracer, before leaving) to stop recording.
        aliased: ``"<where> -> <original>"`` for every alias patched, e.g.
            ``"encoder.layer.0.intermediate.intermediate_act_fn.act -> torch.nn.functional.gelu"``
            (an attribute, by module path) or ``"my_model.gelu -> torch.nn.functional.gelu"``
            (a module global).
        uncaptured: the same for references found that can not be patched in place
            (tuple elements): calls through them are not recorded.
        repaired: ``"<module>.<name>"`` of wrappers found, on exit, bound in modules
            first imported inside the patched region, and put back to the original.
        patched: number of symbols patched (wrappers plus dispatch helpers).
        patch_seconds, restore_seconds: wall time of the last patch and restore.

    Raises:
        RuntimeError: from ``__enter__`` when another ``PatchInterceptor`` is
            active in this process; from ``__exit__`` when a symbol could not be
            restored (all others are restored first).
    """

    def __init__(
        self,
        record: Record,
        *,
        model: torch.nn.Module | None = None,
        skip: Collection[str] = DEFAULT_SKIP,
        before_write: Callable[[], None] | None = None,
    ) -> None:
        self.record = record
        self.before_write = before_write
        self.model = model
        self.skip = frozenset(skip)
        self.active = True
        self.uncaptured: list[str] = []
        self.repaired: list[str] = []
        self.patched = 0
        self.patch_seconds = self.restore_seconds = 0.0
        # (owner, attribute, saved value or MISSING when inherited) in patch order
        self._saved: list[tuple[Any, str, Any]] = []
        self._alias_sites: list[AliasSite] = []  # model aliases patched, in patch order
        self.aliased: list[str] = []
        self._modules_before: set[str] | None = None  # set when patching starts
        self._entered = False

    # -- patching -----------------------------------------------------------------------
    def _set(self, owner: Any, attr: str, original: Any, replacement: Any) -> None:
        """Patch ``owner.attr``, and enter ``replacement`` in TorchScript's builtin
        table under its original's op. The restore entry is written before the patch,
        so a restore after any failure covers it."""
        table = jit_builtin_table()  # built once (warm_caches)
        if id(original) in table:
            table[id(replacement)] = table[id(original)]
        self._saved.append((owner, attr, vars(owner).get(attr, MISSING)))
        setattr(owner, attr, replacement)

    def _patch(self) -> None:
        warm_caches()
        targets = op_targets(self.skip)
        sites = helper_sites()
        alias_sites: list[AliasSite] = []
        if self.model is not None:
            alias_sites, self.uncaptured = find_aliases(self.model, targets)
        for ns, attr, value in targets:
            self._set(ns, attr, value, replacement(value))
        for attr in FLUSH_ONLY:  # metadata: never among the targets
            value = getattr(torch.Tensor, attr)
            self._set(torch.Tensor, attr, value, replacement(value, wrappers.make_flusher))
        for mod, helper, real in sites:
            handle = helper == "handle_torch_function"
            probe = wrappers.make_handle_probe if handle else wrappers.make_has_probe
            self._set(mod, helper, real, replacement(real, probe))
        for site in alias_sites:
            self._alias_sites.append(site)
            site.apply(replacement(site.target))
        self.aliased = [f"{s.where} -> {canonical_op(s.target)[1]}" for s in alias_sites]
        self.patched = len(self._saved) + len(self._alias_sites)

    def _restore(self) -> list[str]:
        """Put back everything patched so far, newest first. Each entry is dropped
        once restored, so a restore that was cut short can be run again."""
        errors: list[str] = []
        while self._alias_sites:
            site = self._alias_sites[-1]
            try:
                site.restore()
            except Exception as e:  # keep restoring the rest
                errors.append(f"{site.where}: {e!r}")
            self._alias_sites.pop()
        while self._saved:
            owner, attr, saved = self._saved[-1]
            try:
                if saved is not MISSING:
                    setattr(owner, attr, saved)
                elif attr in vars(owner):
                    delattr(owner, attr)  # inherited from torch._C.TensorBase
            except Exception as e:  # keep restoring the rest
                errors.append(f"{getattr(owner, '__name__', owner)}.{attr}: {e!r}")
            self._saved.pop()
        table = jit_builtin_table()
        for key in ORIGINALS:  # the replacements' TorchScript entries, where made
            table.pop(key, None)
        self._repair_new_modules()
        return errors

    def _repair_new_modules(self) -> None:
        """Put originals back where a module imported inside the patched region bound
        a wrapper or helper by name."""
        if self._modules_before is None:
            return  # nothing was patched, or repaired already
        for mod_name in set(sys.modules) - self._modules_before:
            mod = sys.modules.get(mod_name)
            if not isinstance(mod, types.ModuleType):
                continue
            for key, value in list(mod.__dict__.items()):
                if id(value) in ORIGINALS:
                    mod.__dict__[key] = ORIGINALS[id(value)]
                    self.repaired.append(f"{mod_name}.{key}")
        self._modules_before = None

    # -- interrupts ---------------------------------------------------------------------
    def release(self) -> list[str]:
        """Stop recording, restore everything still patched and release the
        process-wide slot, with SIGINT deferred throughout; idempotent. What
        ``__exit__`` runs, what a Ctrl-C runs (:func:`.interrupts.register`) before
        ``KeyboardInterrupt`` goes on, and what the tracer runs again after the
        ``with`` block, so that an exception raised at any line of the clean-up (a
        signal handler's) leaves nothing behind: always the whole of it, since one cut
        after its restore loops still holds TorchScript table entries or the SIGINT
        guard.

        Returns:
            ``"<where>: <error>"`` for each symbol that could not be restored.
        """
        with deferred_sigint():
            self._entered = False
            if STATE.owner is self:
                STATE.owner = None
                STATE.depth = 0
            try:
                return self._restore()
            finally:
                if self in ACTIVE:  # only this interceptor's own calls take it out
                    ACTIVE.remove(self)
                interrupts.unregister(self.release)

    # -- context manager -------------------------------------------------------------------
    def __enter__(self) -> PatchInterceptor:
        """Patch the namespaces (and the model's aliases) and start recording on
        this thread.

        Ctrl-C: SIGINT waits while symbols are patched or restored, while a recorded
        op or the recorder runs, and under ``DisableTorchFunction``; anywhere else in
        the ``with`` block, every symbol is restored before ``KeyboardInterrupt``
        leaves the signal handler (:mod:`pytest_graphir.capture.interrupts`).

        Raises:
            RuntimeError: another ``PatchInterceptor`` is active in this process
                (nested or on another thread), or this one already is.
            KeyboardInterrupt: SIGINT arrived while patching; nothing is left patched.
        """
        # everything runs with SIGINT deferred; any other exception (a SIGALRM
        # handler's) at any line of the block releases whatever was taken so far: a
        # `with` rather than a `try`, whose own line is a no-op outside its handler.
        # The slot: append, then the first in the list owns it (no lock to leave held).
        with deferred_sigint(), _ReleaseOnError(self):
            if self not in ACTIVE:
                ACTIVE.append(self)
                if ACTIVE[0] is not self:
                    ACTIVE.remove(self)
            if not ACTIVE or ACTIVE[0] is not self or self._entered:
                raise AlreadyActiveError(
                    "a PatchInterceptor is already active: symbol patches are "
                    "process-wide, so patch traces can not be nested or run on two "
                    "threads at once; use trace(..., interceptor='mode') for the "
                    "inner one"
                )
            interrupts.register(self.release, defer=in_recorded_op)
            t0 = time.perf_counter()
            self._modules_before = set(sys.modules)
            self.repaired = []
            self._patch()
            self.patch_seconds = time.perf_counter() - t0
            self._entered = True
            STATE.depth = 0
            STATE.owner = self
            return self

    def __exit__(self, *exc: object) -> None:
        """Stop recording and restore every patched symbol, whether or not the block
        raised; calling it again, or without ``__enter__``, does nothing. A SIGINT
        that arrives while restoring is delivered once everything is restored.

        Raises:
            RuntimeError: some symbols could not be restored (named in the message).
        """
        if not self._entered:
            return
        t0 = time.perf_counter()
        errors = self.release()
        self.restore_seconds = time.perf_counter() - t0
        if errors:
            raise RuntimeError("PatchInterceptor could not restore: " + "; ".join(errors))
