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
import functools
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

_MISSING: Any = object()


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
        container, key: where the reference lives.
        target: the original torch function referenced.
    """

    __slots__ = ("container", "key", "kind", "placed", "saved", "target", "where")

    def __init__(self, kind: str, where: str, container: Any, key: Any, target: Any) -> None:
        self.kind = kind
        self.where = where
        self.container = container
        self.key = key
        self.target = target
        self.saved: Any = _MISSING  # the object in the slot before apply()
        self.placed: Any = _MISSING  # the object apply() put there

    def _read(self) -> Any:
        if self.kind == "item":
            return self.container[self.key]
        if self.kind == "cell":
            return self.container.cell_contents
        if self.kind == "partial":
            return self.container.func
        if self.kind == "class":
            return vars(self.container).get(self.key, _MISSING)
        return self.container.__defaults__  # defaults

    def _write(self, value: Any) -> None:
        if self.kind == "item":
            self.container[self.key] = value
        elif self.kind == "cell":
            self.container.cell_contents = value
        elif self.kind == "partial":
            _func, args, keywords, extra = self.container.__reduce__()[2]
            self.container.__setstate__((value, args, keywords, extra))
        elif self.kind == "class":
            setattr(self.container, self.key, value)
        else:
            self.container.__defaults__ = value

    def apply(self, replacement: Callable[..., Any]) -> None:
        """Put ``replacement`` (the wrapper of :attr:`target`) in the slot."""
        current = self._read()
        if self.kind == "class":
            new: Any = staticmethod(replacement)
        elif self.kind == "defaults":
            new = tuple(replacement if _same(d, self.target) else d for d in current)
        else:
            new = replacement
        self.saved, self.placed = current, new
        self._write(new)

    def restore(self) -> None:
        """Put the saved object back, if the slot still holds what :meth:`apply` put
        there (code that reassigned it meanwhile keeps its value); idempotent."""
        if self.placed is _MISSING:
            return
        try:
            current = self._read()
        except (KeyError, IndexError, ValueError):  # deleted meanwhile: leave it so
            current = _MISSING
        if current is self.placed:
            self._write(self.saved)
        self.placed = _MISSING


def _same(value: Any, target: Any) -> bool:
    return value is target


def _names_read(code: types.CodeType) -> Iterator[str]:
    """The names ``code`` (and the code objects nested in it) loads by name: its
    ``co_names``, a superset of the globals it reads (attribute names too), which
    costs nothing to get, unlike disassembling."""
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _names_read(const)


@functools.lru_cache(maxsize=4096)
def globals_read(code: types.CodeType) -> tuple[str, ...]:
    """The distinct names ``code`` may load as globals (cached per code object)."""
    return tuple(dict.fromkeys(_names_read(code)))


@functools.lru_cache(maxsize=8192)
def _functions_read(fn: types.FunctionType) -> tuple[Any, ...]:
    """The Python functions ``fn``'s code may load from its globals, directly or as
    values of a mapping it loads (cached per function: module-level functions and
    registries are bound at import time)."""
    g = fn.__globals__
    out: list[Any] = []
    for gname in globals_read(fn.__code__):
        value = g.get(gname, _MISSING)
        if isinstance(value, types.FunctionType):
            out.append(value)
        elif isinstance(value, collections.abc.Mapping) and not isinstance(
            value, types.MappingProxyType
        ):
            try:
                out.extend(v for v in list(value.values()) if isinstance(v, types.FunctionType))
            except Exception:  # a mapping that can not list its values: skip it
                continue
    return tuple(out)


def _in_torch(obj: Any) -> bool:
    mod = getattr(obj, "__module__", None) or ""
    return mod == "torch" or mod.startswith("torch.")


def find_aliases(
    model: Any, originals: dict[int, Any], skip_dicts: collections.abc.Collection[int] = ()
) -> tuple[list[AliasSite], list[str]]:
    """Find the references to ``originals`` reachable from ``model``'s code.

    Args:
        model: the ``nn.Module`` about to run.
        originals: ``id(function) -> function`` for every function being patched.
        skip_dicts: ``id()`` of globals dicts not to scan (the patched namespaces
            themselves, which the interceptor patches by name).

    Returns:
        ``(sites, unpatchable)``: the patchable references, each once, and
        ``"<where> -> <qualified name>"`` for each reference that can not be patched
        in place (an element of a tuple).
    """
    from ...opnames import canonical_op

    sites: list[AliasSite] = []
    unpatchable: list[str] = []
    seen_slots: set[tuple[int, Any]] = set()

    def target_of(value: Any) -> Any:
        try:
            hit = originals.get(id(value))
        except TypeError:  # pragma: no cover - ids are ints
            return None
        return hit if hit is value else None

    def add(kind: str, where: str, container: Any, key: Any, target: Any) -> None:
        slot = (id(container), key if kind in ("item", "class") else kind)
        if slot in seen_slots:
            return
        seen_slots.add(slot)
        sites.append(AliasSite(kind, where, container, key, target))

    def slot(where: str, container: Any, key: Any, value: Any) -> None:
        """A mutable slot ``container[key]`` holding ``value``."""
        target = target_of(value)
        if target is not None:
            add("item", where, container, key, target)
        elif isinstance(value, functools.partial):
            target = target_of(value.func)
            if target is not None:
                add("partial", where, value, None, target)

    functions: list[types.FunctionType] = []
    seen_functions: set[int] = set()

    def function(fn: Any) -> None:
        while True:
            if isinstance(fn, (staticmethod, classmethod)):
                fn = fn.__func__
            if isinstance(fn, types.MethodType):
                fn = fn.__func__
            if not isinstance(fn, types.FunctionType) or id(fn) in seen_functions:
                return
            seen_functions.add(id(fn))
            if _in_torch(fn):
                return
            functions.append(fn)
            fn = getattr(fn, "__wrapped__", None)

    module_dicts: dict[int, dict[str, Any]] = {}

    def module_dict(d: Any) -> None:
        if isinstance(d, dict) and id(d) not in skip_dicts:
            module_dicts.setdefault(id(d), d)

    seen_classes: set[type] = set()
    for path, module in model.named_modules(remove_duplicate=True):
        for attr, value in list(vars(module).items()):
            where = f"{path}.{attr}" if path else attr
            if isinstance(value, list):
                for i, v in enumerate(value):
                    slot(f"{where}[{i}]", value, i, v)
            elif isinstance(value, tuple):
                for i, v in enumerate(value):
                    if target_of(v) is not None:
                        unpatchable.append(f"{where}[{i}] -> {canonical_op(v)[1]}")
                    elif isinstance(v, functools.partial) and target_of(v.func) is not None:
                        add("partial", f"{where}[{i}]", v, None, v.func)
            elif isinstance(value, dict) and not attr.startswith("_"):
                for k, v in list(value.items()):
                    slot(f"{where}[{k!r}]", value, k, v)
            else:
                slot(where, vars(module), attr, value)
                function(value)
        for cls in type(module).__mro__:
            if cls in seen_classes or cls is object:
                continue
            seen_classes.add(cls)
            mod = sys.modules.get(cls.__module__)
            if mod is not None:
                module_dict(mod.__dict__)
            for name, value in list(vars(cls).items()):
                where = f"{cls.__module__}.{cls.__qualname__}.{name}"
                raw = value.__func__ if isinstance(value, staticmethod) else value
                target = target_of(raw)
                if target is not None:
                    add("class", where, cls, name, target)
                elif isinstance(value, functools.partial) and target_of(value.func) is not None:
                    add("partial", where, value, None, value.func)
                elif not _in_torch(cls):
                    if isinstance(value, property):
                        for f in (value.fget, value.fset, value.fdel):
                            function(f)
                    else:
                        function(value)

    # the functions the model's code runs, transitively through their globals
    i = 0
    while i < len(functions):
        fn = functions[i]
        i += 1
        g = fn.__globals__
        module_dict(g)
        name = f"{fn.__module__}.{fn.__qualname__}"
        for n, cell in enumerate(fn.__closure__ or ()):
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            where = f"{name} closure {fn.__code__.co_freevars[n]}"
            target = target_of(value)
            if target is not None:
                add("cell", where, cell, None, target)
            elif isinstance(value, functools.partial) and target_of(value.func) is not None:
                add("partial", where, value, None, value.func)
            else:
                function(value)
        if any(target_of(d) is not None for d in fn.__defaults__ or ()):
            target = next(target_of(d) for d in fn.__defaults__ or () if target_of(d))
            add("defaults", f"{name} defaults", fn, None, target)
        for k, v in list((fn.__kwdefaults__ or {}).items()):
            slot(f"{name} default {k}", fn.__kwdefaults__, k, v)
        for f in _functions_read(fn):
            function(f)

    for d in module_dicts.values():
        prefix = d.get("__name__", "?")
        for k, v in list(d.items()):
            slot(f"{prefix}.{k}", d, k, v)
    return sites, unpatchable
