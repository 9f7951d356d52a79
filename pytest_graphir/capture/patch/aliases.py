"""Import-time aliases of patched torch functions, found in a model and patched too.

The patch interceptor (:mod:`pytest_graphir.capture.patch`) replaces op callables in
torch's namespaces, but a reference taken before that (``self.act =
nn.functional.gelu`` in transformers' ``GELUActivation.__init__``, ``from torch import
tanh`` in a model's module, ``functools.partial(F.gelu, approximate="tanh")``) still
calls the original, which the TorchFunctionMode interceptor would see and the patch
would not. :func:`find_aliases` walks what the model's code can reach and returns one
:class:`AliasSite` per such reference that can be patched in place, plus a description
of every reference it found that can not (an element of a tuple).

What is walked (``originals`` are the functions being patched):

* every module's instance attributes, the elements of list and dict attributes
  (not the ``_parameters``/``_modules``/hook dicts: names starting with ``_``), and
  tuple attributes (reported, not patched: a tuple is immutable);
* the class attributes of every class in each module's MRO (a builtin stored on a
  class is not bound on access, so it is patched as a ``staticmethod``);
* the Python functions the model's own classes define (``forward`` and helpers,
  through decorator chains: ``__wrapped__`` and closure cells), and transitively
  the Python functions their code loads as globals, or finds in a mapping it loads
  as a global (transformers' ``ALL_ATTENTION_FUNCTIONS``); for each: its closure
  cells, its default arguments, and every binding in its module's globals;
* the module globals of the modules that define the model's classes.

Functions and classes defined inside ``torch`` are not walked into (their globals
are, for the classes the model uses): torch's own code calls ops by attribute
(``F.linear``, ``torch.relu``), which the interceptor patches.

Each site is patched with :meth:`AliasSite.apply` and put back with
:meth:`AliasSite.restore`, which restores the very object that was there (identity),
and only where the site still holds what ``apply`` put there.
"""

from __future__ import annotations

import collections.abc
import contextlib
import dataclasses
import functools
import itertools
import sys
import types
from collections.abc import Callable
from typing import Any

_MISSING: Any = object()


@dataclasses.dataclass(eq=False, slots=True)
class AliasSite:
    """One patchable reference to an original torch function.

    Args:
        kind: ``"item"`` (``container[key]`` of a dict or list: module globals, a
            module's ``__dict__``, a list or dict attribute), ``"cell"`` (a closure
            cell), ``"partial"`` (the ``func`` of a ``functools.partial``, changed in
            place through its ``__setstate__``), ``"class"`` (``setattr(cls, key,
            staticmethod(...))``) or ``"defaults"`` (a function's ``__defaults__``).
        where: the reference, for messages: ``"encoder.layer.0.act.act"`` (a module
            attribute by module path), ``"transformers.activations.gelu"`` (a module
            global), ``"<fn qualname> closure"``.
        container, key: where the reference lives: ``container[key]`` (an item) or
            the attribute ``key`` of ``container`` (``"cell_contents"``, ``"func"``,
            ``"__defaults__"``, or a class attribute's name).
        target: the original torch function referenced.
    """

    kind: str
    where: str
    container: Any
    key: Any
    target: Any
    saved: Any = _MISSING  # the object in the slot before apply()
    placed: Any = _MISSING  # the object apply() put there

    def _read(self) -> Any:
        if self.kind == "item":
            return self.container[self.key]
        if self.kind == "class":
            return vars(self.container).get(self.key, _MISSING)
        return getattr(self.container, self.key)

    def _write(self, value: Any) -> None:
        if self.kind == "item":
            self.container[self.key] = value
        elif self.kind == "partial":
            _func, args, keywords, extra = self.container.__reduce__()[2]
            self.container.__setstate__((value, args, keywords, extra))
        else:
            setattr(self.container, self.key, value)

    def apply(self, replacement: Callable[..., Any]) -> None:
        """Put ``replacement`` (the wrapper of :attr:`target`) in the slot."""
        current = self._read()
        if self.kind == "class":
            new: Any = staticmethod(replacement)
        elif self.kind == "defaults":
            new = tuple(replacement if d is self.target else d for d in current)
        else:
            new = replacement
        self.saved, self.placed = current, new
        self._write(new)

    def restore(self) -> None:
        """Put the saved object back, if the slot still holds what :meth:`apply` put
        there (code that reassigned it meanwhile keeps its value); idempotent."""
        if self.placed is _MISSING:
            return
        with contextlib.suppress(KeyError, IndexError, ValueError):  # deleted meanwhile
            if self._read() is self.placed:
                self._write(self.saved)
        self.placed = _MISSING


@functools.lru_cache(maxsize=4096)
def globals_read(code: types.CodeType) -> tuple[str, ...]:
    """The distinct names ``code`` (and the code objects nested in it) may load as
    globals: their ``co_names``, a superset (attribute names too) that costs nothing
    to get, unlike disassembling (cached per code object)."""
    nested = (globals_read(c) for c in code.co_consts if isinstance(c, types.CodeType))
    return tuple(dict.fromkeys(itertools.chain(code.co_names, *nested)))


@functools.lru_cache(maxsize=8192)
def _functions_read(fn: types.FunctionType) -> tuple[Any, ...]:
    """The Python functions ``fn``'s code may load from its globals, directly or as
    values of a mapping it loads (cached per function: module-level functions and
    registries are bound at import time)."""
    out: list[Any] = []
    for gname in globals_read(fn.__code__):
        value = fn.__globals__.get(gname, _MISSING)
        if isinstance(value, types.FunctionType):
            out.append(value)
        elif isinstance(value, collections.abc.Mapping) and not isinstance(
            value, types.MappingProxyType
        ):
            with contextlib.suppress(Exception):  # a mapping that can not list its values
                out.extend(v for v in list(value.values()) if isinstance(v, types.FunctionType))
    return tuple(out)


def _in_torch(obj: Any) -> bool:
    """Whether ``obj`` is defined in ``torch`` or one of its submodules."""
    return (getattr(obj, "__module__", None) or "").partition(".")[0] == "torch"


def find_aliases(
    model: Any, targets: list[tuple[Any, str, Any]]
) -> tuple[list[AliasSite], list[str]]:
    """Find the references to the targets' originals reachable from ``model``'s code.

    Args:
        model: the ``nn.Module`` about to run.
        targets: ``(namespace, name, original)`` of every function being patched
            (:func:`.targets.op_targets`); the namespaces' own globals are not
            scanned (the interceptor patches them by name).

    Returns:
        ``(sites, unpatchable)``: the patchable references, each once, and
        ``"<where> -> <qualified name>"`` for each reference that can not be patched
        in place (an element of a tuple).
    """
    from ...opnames import canonical_op

    originals = {id(value): value for _, _, value in targets}
    skip_dicts = {id(vars(ns)) for ns in {ns for ns, _, _ in targets}}
    sites: list[AliasSite] = []
    unpatchable: list[str] = []
    seen_slots: set[tuple[int, Any]] = set()

    def target_of(value: Any) -> Any:  # originals keeps each alive: its id is its own
        return originals.get(id(value))

    def add(kind: str, where: str, container: Any, key: Any, value: Any) -> bool:
        """Add the site of ``value``, held by ``container`` at ``key``, if it is an
        original, or the ``partial`` site of a partial of one; whether either."""
        target = target_of(value)
        if target is None and isinstance(value, functools.partial):
            kind, container, key, target = "partial", value, "func", target_of(value.func)
        if target is None:
            return False
        slot = (id(container), key)
        if slot not in seen_slots:
            seen_slots.add(slot)
            sites.append(AliasSite(kind, where, container, key, target))
        return True

    functions: list[types.FunctionType] = []
    seen_functions: set[int] = set()

    def function(fn: Any) -> None:
        while True:
            while isinstance(fn, (staticmethod, classmethod, types.MethodType)):
                fn = fn.__func__
            if not isinstance(fn, types.FunctionType) or id(fn) in seen_functions:
                return
            seen_functions.add(id(fn))
            if _in_torch(fn):
                return
            functions.append(fn)
            fn = getattr(fn, "__wrapped__", None)

    module_dicts: dict[int, Any] = {}  # the globals of the code reached, and None

    seen_classes: set[type] = set()
    for path, module in model.named_modules(remove_duplicate=True):
        for attr, value in list(vars(module).items()):
            where = f"{path}.{attr}" if path else attr
            if isinstance(value, (list, tuple)):
                for i, v in enumerate(value):
                    if isinstance(value, tuple) and target_of(v) is not None:
                        unpatchable.append(f"{where}[{i}] -> {canonical_op(v)[1]}")
                    else:  # in a tuple, only a partial of an original (patched in place)
                        add("item", f"{where}[{i}]", value, i, v)
            elif isinstance(value, dict) and not attr.startswith("_"):
                for k, v in list(value.items()):
                    add("item", f"{where}[{k!r}]", value, k, v)
            else:
                add("item", where, vars(module), attr, value)
                function(value)
        for cls in type(module).__mro__:
            if cls in seen_classes or cls is object:
                continue
            seen_classes.add(cls)
            module_dict = getattr(sys.modules.get(cls.__module__), "__dict__", None)
            module_dicts.setdefault(id(module_dict), module_dict)
            for name, value in list(vars(cls).items()):
                where = f"{cls.__module__}.{cls.__qualname__}.{name}"
                if isinstance(value, staticmethod) and target_of(value.__func__) is not None:
                    add("class", where, cls, name, value.__func__)
                elif not add("class", where, cls, name, value) and not _in_torch(cls):
                    is_property = isinstance(value, property)
                    for f in (value.fget, value.fset, value.fdel) if is_property else (value,):
                        function(f)

    # the functions the model's code runs, transitively through their globals (the
    # list grows while it is walked)
    for fn in functions:
        module_dicts.setdefault(id(fn.__globals__), fn.__globals__)
        name = f"{fn.__module__}.{fn.__qualname__}"
        for n, cell in enumerate(fn.__closure__ or ()):
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            where = f"{name} closure {fn.__code__.co_freevars[n]}"
            if not add("cell", where, cell, "cell_contents", value):
                function(value)
        for d in fn.__defaults__ or ():
            if target_of(d) is not None:  # the first one names the site
                add("defaults", f"{name} defaults", fn, "__defaults__", d)
        for k, v in list((fn.__kwdefaults__ or {}).items()):
            add("item", f"{name} default {k}", fn.__kwdefaults__, k, v)
        for f in _functions_read(fn):
            function(f)

    for d in module_dicts.values():
        if not isinstance(d, dict) or id(d) in skip_dicts:
            continue
        prefix = d.get("__name__", "?")
        for k, v in list(d.items()):
            add("item", f"{prefix}.{k}", d, k, v)
    return sites, unpatchable
