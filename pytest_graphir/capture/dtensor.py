"""Distributed tensors in a trace: a ``DTensor``'s placements, its local shard for the
statistics, and the plain tensors it wraps.

A ``torch.distributed.tensor.DTensor`` is written with its logical (global) shape,
the shape the serial model has, and a ``dist`` entry: its placements (``S(d)`` for
``Shard(d)``, ``R`` for ``Replicate``, ``P(sum)`` for ``Partial("sum")``), the
names of the DeviceMesh dimensions they refer to, and the local shard's shape.
Statistics are the local shard's (``_local_tensor``), taken on this rank without any
collective. Nothing here imports ``torch.distributed``: a process that never
imported ``torch.distributed.tensor`` holds no DTensor.
"""

from __future__ import annotations

import functools
import inspect
import math
import sys
import weakref
from typing import Any

import torch

from ..ir import TensorMeta
from ..names import (
    ROOT_LABEL,
    WRAPPER_ATTRIBUTES,
    canonical_module_path,
    dtype_name,
    hook_name,
    map_plain,
    parse_ref,
    rank_ref,
    ref,
    strings_in,
)

LOCAL = "local"
"""The ``dist`` entry of a plain tensor computed from a DTensor's local shard (after
``to_local()``): its shape is this rank's part, not the logical shape."""

PLAIN_TYPES = frozenset({torch.Tensor, torch.nn.Parameter})
"""Tensor types that are never a wrapper: one set lookup per recorded tensor."""


def distributed() -> bool:
    """Whether a default process group is initialised (on this thread, for the
    ``threaded`` process group); looked up in ``sys.modules``, never imported, so a
    process that never imported ``torch.distributed`` pays nothing."""
    dist = sys.modules.get("torch.distributed")
    return dist is not None and dist.is_available() and dist.is_initialized()


def fake_process_group() -> bool:
    """Whether the default process group is torch's fake one
    (``init_process_group("fake", ...)``: collectives do nothing and
    ``distribute_tensor`` leaves a rank above 0 with uninitialised shards), read
    through ``torch.distributed.get_backend()``; False without a default group."""
    return distributed() and sys.modules["torch.distributed"].get_backend() == "fake"


def placement_name(placement: Any) -> str:
    """``Shard(1)`` -> ``"S(1)"``, ``Replicate()`` -> ``"R"``, ``Partial("sum")`` ->
    ``"P(sum)"`` (``torch.distributed.tensor.placement_types``); another placement
    by its ``repr``."""
    if placement.is_shard():
        return f"S({placement.dim})"
    if placement.is_replicate():
        return "R"
    if placement.is_partial():
        return f"P({placement.reduce_op})"
    return repr(placement)


class DistEntry(dict[str, Any]):
    """A DTensor's ``dist`` entry (a plain dict to the snapshot), and beside it, never
    written, ``where``: the ranks of its DeviceMesh in mesh order and this rank's
    coordinate in it, which :func:`global_stats` combines along."""

    where: tuple[tuple[int, ...], tuple[int, ...]] | None = None


def dist_entry(t: torch.Tensor) -> dict[str, Any] | None:
    """The ``dist`` entry of a DTensor: ``{"placements": ["S(1)"], "mesh_dims": ["tp"],
    "local": [2, 8]}`` (one placement per mesh dimension; ``local`` the shard's shape
    on this rank; ``mesh_dims`` ``dim0``, ``dim1``, ... for a mesh without names); None
    for any other tensor."""
    dtensor = getattr(sys.modules.get("torch.distributed.tensor"), "DTensor", None)
    if dtensor is None or not isinstance(t, dtensor):
        return None
    spec = t._spec
    names = spec.mesh.mesh_dim_names
    entry = DistEntry(
        placements=[placement_name(p) for p in spec.placements],
        mesh_dims=list(names) if names else [f"dim{i}" for i in range(spec.mesh.ndim)],
        local=list(t._local_tensor.shape),
    )
    entry.where = _where(spec.mesh)
    return entry


_WHERE: dict[int, tuple[Any, Any]] = {}
"""Per device mesh object (by identity: the meshes of threaded ranks are equal, their
coordinates are not), a weak reference to it and its :func:`_where`:
``DeviceMesh.mesh`` builds its rank tensor anew on each read, once per DTensor an
op returns."""


def _where(mesh: Any) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """``(the mesh's ranks, this rank's coordinate)`` for :attr:`DistEntry.where`;
    None where this rank is not in the mesh."""
    ref, where = _WHERE.get(id(mesh), (None, None))
    if ref is None or ref() is not mesh:
        coordinate = mesh.get_coordinate()
        ranks = tuple(mesh.mesh.flatten().tolist())
        where = None if coordinate is None else (ranks, tuple(coordinate))
        _WHERE[id(mesh)] = (weakref.ref(mesh), where)  # a dead one is replaced
    return where  # type: ignore[no-any-return]


def inner(t: torch.Tensor) -> torch.Tensor | None:
    """The plain tensor a wrapper subclass stands for on this rank: a DTensor's local
    shard (``_local_tensor``), a functional collective's ``AsyncCollectiveTensor``'s
    result, waited for (``trigger_wait``: its statistics are the reduced values, never
    the buffer before the collective wrote it); None for any other tensor."""
    local = getattr(t, "_local_tensor", None)
    if isinstance(local, torch.Tensor):
        t = local
    if hasattr(t, "trigger_wait") and hasattr(t, "elem"):  # AsyncCollectiveTensor
        return t.trigger_wait()  # type: ignore[no-any-return]
    return local


def local_values(t: torch.Tensor) -> torch.Tensor:
    """The tensor whose values a wrapper's statistics describe (:func:`inner`), or
    ``t`` itself."""
    local = inner(t)
    return t if local is None else local


SPLITS = frozenset({"chunk", "split", "split_with_sizes", "tensor_split", "unbind"})
"""Ops that cut a tensor into parts, of which a rank may pick its own
(:meth:`Distributed.rank_indexed`)."""

UNSHARDING = 1
"""A bit of :attr:`~.state.TraceState.hidden`: an FSDP2 unit's all-gather bookkeeping
runs (:meth:`Distributed.watch`)."""


class Distributed:
    """What a trace of a distributed model does besides what a serial one does, owned
    by its :class:`~.state.TraceState` (``state.dist``, built only when a process
    group is initialised, else None: a serial trace pays one ``is not None`` test per
    recorded op for it): it describes DTensors (:meth:`describe`), labels their local
    shards (:meth:`label_shard`, :meth:`shard_entry`), marks the plain tensors made
    of shards ``local`` (:meth:`mark_local`) and hides FSDP2 units' unsharding
    (:meth:`watch`).

    Args:
        model: the module traced.
        units: its FSDP2 units, ``(module path, module)`` (:func:`fsdp_modules`).
        labels: the trace's :class:`~.identity.TensorLabels`.
    """

    def __init__(self, model: torch.nn.Module, units: list[Any], labels: Any) -> None:
        self.units, self.labels = units, labels
        self.before: Any = None
        """the arguments of the FSDP2 unit being unsharded, as its call got them"""
        self.sharded = list(model.named_parameters()) if units else None
        """an FSDP2 model's parameters, sharded, as the trace found them"""
        self.meshes = [p.device_mesh for p in model.parameters() if hasattr(p, "device_mesh")]
        """the DeviceMeshes of the model's DTensor parameters (one per parameter)"""

    def describe(self, t: torch.Tensor, meta: TensorMeta, label: str | None) -> None:
        """Set ``meta.dist`` of a DTensor ``t`` (:func:`dist_entry`); with ``label``,
        also :meth:`label_shard`."""
        if type(t) not in PLAIN_TYPES:
            meta.dist = dist_entry(t)
            if meta.dist is not None and label is not None:
                self.label_shard(t, label, meta)

    def label_shard(self, t: torch.Tensor, label: str, meta: TensorMeta) -> None:
        """Give a DTensor's local shard the DTensor's label: ``to_local()`` returns a
        view of it (``view_as``), which then continues the DTensor's edge; a
        collective the DTensor issues reads the shard."""
        local = t._local_tensor  # type: ignore[attr-defined]
        self.labels.entries[id(local)] = (weakref.ref(local), label, meta, local._version)

    def shard_entry(self, t: torch.Tensor) -> Any:
        """The label entry of the plain tensor the wrapper ``t`` stands for
        (:func:`inner`); None for a plain tensor or an unlabelled one."""
        local = inner(t) if type(t) not in PLAIN_TYPES else None
        return None if local is None else self.labels.get(local)

    def label_result(self, out: Any) -> None:
        """Give the result an ``AsyncCollectiveTensor`` output stands for (its
        ``elem``) the output's label: waiting for it returns that result, which a
        DTensor then wraps (``redistribute`` in ``PrepareModuleInput``)."""
        elem = getattr(out, "elem", None) if type(out) not in PLAIN_TYPES else None
        if isinstance(elem, torch.Tensor) and hasattr(out, "trigger_wait"):
            # the label it has now: an op may return it unchanged
            if (entry := self.labels.get(out)) is not None:
                self.labels.set(elem, entry[0], entry[1])

    def rank_indexed(self, nodes: list[Any], outputs: dict[str, Any]) -> None:
        """Write ``$chunk#0[<rank>]`` (:func:`~pytest_graphir.names.rank_ref`) for
        ``$chunk#0[i]`` throughout ``nodes`` and ``outputs`` (the trace's, in place)
        where a split (:data:`SPLITS`) made as many parts as the ranks of the
        default group or of a mesh dimension of the model's DTensor parameters, the
        trace reads only one of them, and that one is this rank's index in such a
        group: the rank's own chunk (``torch.chunk(x, world)[rank]``), so the ranks
        write the same text. A fixed pick of such a split (``x.chunk(2)[0]`` on 2
        ranks) reads the same way on the rank whose index it is."""
        dist = sys.modules["torch.distributed"]
        ranks: dict[int, set[int]] = {dist.get_world_size(): {dist.get_rank()}}
        for mesh in self.meshes:
            for dim, rank in enumerate(mesh.get_coordinate() or ()):
                ranks.setdefault(mesh.size(dim), set()).add(rank)
        many = {n.name: len(n.outputs) for n in nodes if n.kind == "op" and n.target in SPLITS}
        read: dict[str, set[int]] = {}
        modules = [n.outputs for n in nodes if n.kind == "module"]
        for text in strings_in([[n.args, n.kwargs] for n in nodes] + [modules, outputs]):
            if (target := parse_ref(text)) and target[0] in many and target[1] is not None:
                read.setdefault(target[0], set()).add(target[1])
        mine = {
            ref(name, i): rank_ref(name)
            for name, (i, *more) in ((k, sorted(v)) for k, v in read.items())
            if not more and i in ranks.get(many[name], ())
        }
        if not mine:
            return

        def swap(v: Any) -> Any:
            return mine.get(v, v) if isinstance(v, str) else v

        for n in nodes:
            n.args, n.kwargs = map_plain(n.args, swap), map_plain(n.kwargs, swap)
            if n.kind == "module":
                n.outputs = map_plain(n.outputs, swap)
        outputs.update(map_plain(outputs, swap))

    def mark_local(self, args: tuple[Any, ...], outputs: list[Any]) -> None:
        """Mark ``dist: local`` on the plain tensors an op made from a DTensor's local
        shard (``to_local()``) or from such a tensor: their shapes are this rank's
        part, not the logical shape."""
        for a in args:
            for t in a if isinstance(a, (list, tuple)) else (a,):
                if type(t) in PLAIN_TYPES:
                    if (entry := self.labels.get(t)) is not None and entry[1].dist is not None:
                        for meta in outputs:
                            if isinstance(meta, TensorMeta) and meta.dist is None:
                                meta.dist = LOCAL
                        return

    def mark_local_output(
        self, layouts: list[Any], module: torch.nn.Module, args: Any, outputs: Any
    ) -> None:
        """Mark ``dist: local`` on the plain tensors a ``ParallelStyle``'s output hook
        returned with ``use_local_output`` from a DTensor placed other than
        ``Replicate`` (``RowwiseParallel(output_layouts=Shard(1))``: the
        reduce-scatter's part): their shapes are this rank's part. ``layouts``: one
        placement per output (:func:`local_output_layouts`); an output already
        described (a DTensor's shard, with its ``dist``) is left as it is. A forward
        hook of the style's module, after the style's own (:meth:`watch`)."""
        outs = outputs if isinstance(outputs, tuple) else (outputs,)
        for t, layout in zip(outs, layouts, strict=False):  # a style checks the count
            if layout is None or layout.is_replicate() or not isinstance(t, torch.Tensor):
                continue
            if (entry := self.labels.get(t)) is not None and entry[1].dist is None:
                entry[1].dist = LOCAL

    def watch(self, state: Any) -> list[Any]:
        """Register two forward pre-hooks on each FSDP2 unit, around FSDP's own
        (which all-gathers the unit's parameters and swaps the unsharded ones in):
        the ops FSDP runs for that (buffers, copy-in, views, split) are not recorded
        (:data:`UNSHARDING` set in ``state.hidden``), its collectives are
        (:mod:`.collectives`); after it, the unsharded parameters get their names
        (:meth:`~.state.TraceState.label_named`), so ops read ``$fc1.weight``.
        On each module of ``state.planned`` whose ``ParallelStyle`` returns local
        parts (:func:`local_output_layouts`), a forward hook after the style's
        that marks them (:meth:`mark_local_output`).

        Returns:
            The hooks' ``RemovableHandle`` s, for the caller to remove.
        """
        handles = []
        for path, module in self.units:
            hide = functools.partial(_unsharding, state)
            handles.append(module.register_forward_pre_hook(hide, prepend=True, with_kwargs=True))
            label = functools.partial(_unsharded, state, path)
            handles.append(module.register_forward_pre_hook(label, with_kwargs=True))
        classes = _style_classes() if state.planned else {}
        for _, module in state.planned if classes else ():
            for values in module_styles(module, classes).values():
                if (layouts := local_output_layouts(values)) is not None:
                    mark = functools.partial(self.mark_local_output, layouts)
                    handles.append(module.register_forward_hook(mark))
        return handles


def _unsharding(state: Any, module: torch.nn.Module, args: Any, kwargs: Any) -> None:
    state.hidden |= UNSHARDING  # FSDP's all-gather bookkeeping is not the model's
    state.dist.before = (args, kwargs)


def _unsharded(state: Any, path: str, module: torch.nn.Module, args: Any, kwargs: Any) -> None:
    state.hidden &= ~UNSHARDING
    with torch._C.DisableTorchFunction():
        state.carry_labels(state.dist.before, (args, kwargs))  # the unit's stand-ins
        state.dist.before = None
        for name, t in module.named_parameters(prefix=path):
            if state.labels.get(t) is None:
                state.label_named(t, canonical_module_path(name))


def fsdp_modules(root: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """``(module path, module)`` of every FSDP2 unit of ``root`` (``fully_shard``
    makes a module an ``FSDPModule``), root first; ``[]`` at once, without walking
    ``root``, when ``torch.distributed.fsdp`` was never imported or ``FSDPModule``
    has no subclass yet (``fully_shard`` swaps a module's class for a subclass it
    derives from ``FSDPModule``: without one, no module of the process is a unit)."""
    unit = getattr(sys.modules.get("torch.distributed.fsdp"), "FSDPModule", None)
    if unit is None or not unit.__subclasses__():
        return []
    return [(path, m) for path, m in root.named_modules() if isinstance(m, unit)]


def reshard(units: list[tuple[str, torch.nn.Module]]) -> None:
    """Free every FSDP2 unit's unsharded parameters (``FSDPModule.reshard``): a trace
    starts from the sharded state, whatever the previous step left unsharded (FSDP2
    keeps the root unsharded after a forward until a backward runs), so the forward
    all-gathers every unit the same way each time; the ``params`` section is taken
    in the same state. The outermost units are initialised first as their first
    forward does (``FSDPState._lazy_init``, once), which fixes the root's settings
    (a root unit never reshards after the forward) before :func:`plan_section`
    reads them."""
    outer: list[str] = []
    for path, module in units:
        if not any(path.startswith(p + ".") or p == "" for p in outer):
            outer.append(path)
            module._get_fsdp_state()._lazy_init()  # type: ignore[operator]
        module.reshard()  # type: ignore[operator]


def module_class(module: torch.nn.Module, unwrap: bool = True) -> str:
    """A module's class name as the serial model has it: a wrapper's
    (:data:`~pytest_graphir.names.WRAPPER_ATTRIBUTES`) is the wrapped module's
    (``unwrap=False``: the wrapper's own);
    ``fully_shard`` swaps the class for one it derives (``FSDPLinear`` from
    ``FSDPModule`` and ``Linear``), which is written as the class it derives from
    (``Linear``)."""
    for attribute in WRAPPER_ATTRIBUTES if unwrap else ():  # a wrapper: the class it wraps
        if (inner := module._modules.get(attribute)) is not None:
            return module_class(inner)
    cls = type(module)
    if cls.__name__.startswith("FSDP"):
        unit = getattr(sys.modules.get("torch.distributed.fsdp"), "FSDPModule", None)
        if unit is not None and issubclass(cls, unit):
            cls = next(c for c in cls.__mro__[1:] if not issubclass(c, unit))
    return cls.__name__


def _style_classes() -> dict[str, type]:
    """Every ``ParallelStyle`` class torch defines or the program derived, by class
    name; ``{}`` where ``torch.distributed.tensor.parallel`` was never imported."""
    style = sys.modules.get("torch.distributed.tensor.parallel.style")
    found: dict[str, type] = {}
    todo = [style.ParallelStyle] if style is not None else []
    while todo:
        for sub in todo.pop().__subclasses__():
            found.setdefault(sub.__name__, sub)
            todo.append(sub)
    return found


def _hook_style(hook: Any, classes: dict[str, type]) -> tuple[type, dict[str, Any]] | None:
    """The ``ParallelStyle`` behind a forward (pre-)hook and the fields the hook holds
    (field name -> value as the style keeps it), or None for another hook.

    ``distribute_module`` registers a lambda around a ``functools.partial`` of the
    style's ``_prepare_input_fn`` / ``_prepare_output_fn`` whose bound arguments are
    the fields (``ColwiseParallel``: ``input_layouts``, ``desired_input_layouts``,
    ``output_layouts``, ``use_local_output``); ``PrepareModuleInput`` and
    ``PrepareModuleOutput`` register a lambda around the style itself, whose
    ``__init__`` parameters are its fields. A hook only named after a style
    (:func:`~pytest_graphir.names.hook_name`) gives the style without fields."""
    target = getattr(hook, "hook", hook) if type(hook).__name__ == "_WrappedHook" else hook
    cells = [c.cell_contents for c in getattr(target, "__closure__", None) or ()]
    for held in (getattr(target, "__self__", None), *cells):
        cls = type(held)
        if classes.get(cls.__name__) is cls:  # the style itself
            params = inspect.signature(cls).parameters
            return cls, {n: getattr(held, n) for n in params if hasattr(held, n)}
        if isinstance(held, functools.partial):
            if (owner := getattr(held.func, "__qualname__", "").split(".")[0]) in classes:
                named = zip(inspect.signature(held.func).parameters, held.args, strict=False)
                return classes[owner], {**dict(named), **held.keywords}
    name = hook_name(hook).split(".")[0]
    return (classes[name], {}) if name in classes else None


def module_styles(module: torch.nn.Module, classes: dict[str, type]) -> dict[type, dict[str, Any]]:
    """The ``ParallelStyle`` s whose hooks ``parallelize_module`` registered on
    ``module`` (``classes``: :func:`_style_classes`), each with the fields its hooks
    hold (:func:`_hook_style`; a style's input and output hooks merged), in hook
    order, forward pre-hooks first; ``{}`` for a module without."""
    found: dict[type, dict[str, Any]] = {}
    for hook in (*module._forward_pre_hooks.values(), *module._forward_hooks.values()):
        if (style := _hook_style(hook, classes)) is not None:
            found.setdefault(style[0], {}).update(style[1])
    return found


def layout_text(value: Any) -> Any:
    """A style's field as the ``plan`` section writes it: a placement by
    :func:`placement_name` (``S(1)``, ``R``), a tuple of them as a list, a dict of
    them (``input_kwarg_layouts``) per key; ``None``, a bool, an int or a string as
    it is; anything else by its ``repr``."""
    if isinstance(value, (tuple, list)):
        return [layout_text(v) for v in value]
    if isinstance(value, dict):
        return {str(k): layout_text(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return placement_name(value) if hasattr(value, "is_shard") else repr(value)


def style_fields(cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """The fields of a ``ParallelStyle`` of class ``cls`` worth a ``plan`` line
    (written by :func:`layout_text`), in ``values`` order: each one ``cls``'s
    ``__init__`` requires (``PrepareModuleOutput``'s ``output_layouts`` and
    ``desired_output_layouts``), and each one that differs from the style built
    with its defaults (``ColwiseParallel(output_layouts=Shard(1))``: its
    ``output_layouts``). A field the default style does not have (set in ``_apply``
    from the module's type: ``RowwiseParallel``'s ``desired_input_layouts``) is left
    out; every field is written when ``cls`` cannot be built from ``values``.

    Args:
        cls: the style's class.
        values: field name -> value as the style holds it (:func:`module_styles`).

    Returns:
        Field name -> written value; ``{}`` for a style with its defaults.
    """
    named = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    params = inspect.signature(cls).parameters.values()
    required = {p.name for p in params if p.default is p.empty and p.kind in named}
    try:
        reference: Any = cls(**{n: values[n] for n in required})
    except Exception:  # a style of the program's that needs more: every field written
        reference = None
    written = {name: layout_text(value) for name, value in values.items()}
    for name in written.keys() - required if reference is not None else ():
        if layout_text(getattr(reference, name, written[name])) == written[name]:
            del written[name]  # as the default style has it
    return written


def local_output_layouts(values: dict[str, Any]) -> list[Any] | None:
    """The layouts a style's output hook turns into plain local tensors, one per
    output (``desired_output_layouts``, else ``output_layouts``), where the style
    has ``use_local_output`` and any of them is not ``Replicate``: such an output
    is this rank's part. None for any other style."""
    layouts = values.get("desired_output_layouts", values.get("output_layouts"))
    if not values.get("use_local_output") or not isinstance(layouts, (tuple, list)):
        return None
    return list(layouts) if any(p is not None and not p.is_replicate() for p in layouts) else None


_MIXED_PRECISION = ("param_dtype", "reduce_dtype", "output_dtype")
"""The ``MixedPrecisionPolicy`` fields an FSDP2 unit's ``plan`` entry writes when set."""


def plan_section(
    modules: list[tuple[str, torch.nn.Module]],
    units: list[tuple[str, torch.nn.Module]],
    wrappers: dict[str, str],
) -> dict[str, dict[str, Any]]:
    """The ``plan`` section: how a model is parallelised, per module path (wrapper
    segments left out, :func:`~pytest_graphir.names.canonical_module_path`; the root
    as ``<root>``), for the modules that have any of:

    * ``style``: the tensor-parallel ``ParallelStyle`` s whose hooks
      ``parallelize_module`` registered on it (``ColwiseParallel``; a list, sorted,
      for several: ``PrepareModuleInputOutput`` registers ``PrepareModuleInput``
      and ``PrepareModuleOutput``) (:func:`module_styles`);
    * right after it, the style's fields that differ from its defaults or have
      none (:func:`style_fields`: ``input_layouts``, ``output_layouts``,
      ``use_local_output``; ``PrepareModuleInput``'s ``desired_input_layouts``,
      ``input_kwarg_layouts``, ...), placements written as in ``params``
      (``"output_layouts": ["S(1)"]``); for several styles, under each one's name
      (``"PrepareModuleInput": {"input_layouts": ["S(0)"]}``). A style with its
      defaults adds nothing here;
    * ``mesh`` and ``params``: the DeviceMesh dimension names, and each of its own
      DTensor parameters' placements (``{"weight": ["S(0)"]}``);
    * ``fsdp``: an FSDP2 unit's ``reshard_after_forward`` and the mixed-precision
      dtypes it sets (``param_dtype``, ``reduce_dtype``, ``output_dtype``);
    * ``wrapper``: the class of a wrapper around it (``CheckpointWrapper``).

    ``modules``: ``(module path, module)`` in ``named_modules`` order, at least every
    module that has any of these (the model's walk,
    :attr:`~.state.TraceState.planned`); ``units``: the FSDP2 units
    (:func:`fsdp_modules`); ``wrappers``: module path -> class of the wrapper
    around it. Read after :func:`reshard`, before the forward. Empty for a model
    with none.
    """
    classes = _style_classes()
    unit_ids = {id(m) for _, m in units}
    plan: dict[str, dict[str, Any]] = {}
    for raw, module in modules:
        entry: dict[str, Any] = {}
        found = module_styles(module, classes).items()
        styles = dict(sorted((c.__name__, style_fields(c, v)) for c, v in found))  # names unique
        if len(styles) == 1:  # its fields right after it
            name, fields = styles.popitem()
            entry.update(style=name, **fields)
        elif styles:  # each one's under its name
            entry.update(style=list(styles), **{n: f for n, f in styles.items() if f})
        params = {n: dist_entry(p) for n, p in module._parameters.items() if p is not None}
        if placed := {n: d for n, d in params.items() if d is not None}:
            entry["mesh"] = next(iter(placed.values()))["mesh_dims"]
            entry["params"] = {n: d["placements"] for n, d in placed.items()}
        if id(module) in unit_ids:
            state = module._get_fsdp_state()  # type: ignore[operator]
            group = state._fsdp_param_group
            dtypes = {k: getattr(state._mp_policy, k) for k in _MIXED_PRECISION}
            entry["fsdp"] = {
                "reshard_after_forward": group is None or group.post_forward_mesh_info is not None,
                **{k: dtype_name(d) for k, d in dtypes.items() if d is not None},
            }
        if (path := canonical_module_path(raw)) in wrappers:
            entry["wrapper"] = wrappers[path]
        if entry:
            plan.setdefault(path or ROOT_LABEL, {}).update(entry)
    # a wrapper's entry and its module's merged: the style's fields right after it
    order = {"style": 0, "mesh": 2, "params": 3, "fsdp": 4, "wrapper": 5}
    return {p: {k: e[k] for k in sorted(e, key=lambda k: order.get(k, 1))} for p, e in plan.items()}


_COMBINE: dict[str, Any] = {"min": min, "max": max, "nan": sum, "inf": sum, "sum": sum, "true": sum}
"""How :func:`global_stats` combines the parts' statistics besides the moments."""


def global_stats(metas: list[TensorMeta]) -> None:
    """``trace(dist_stats="global")``: each DTensor entry's statistics become the
    logical tensor's, combined from the local-shard statistics of the ranks of its own
    DeviceMesh after the forward. One ``all_gather_object`` over the default process
    group carries every entry's statistics, shard size and place in its mesh (the same
    call on every rank: the ranks' traces have the same entries).

    Per entry (``metas`` in the trace's order, each with a ``dist`` dict): the parts
    combined are those of the ranks of the same mesh whose coordinate equals this
    rank's along every ``Replicate`` dimension: every shard along the ``Shard``
    dimensions, one copy along the replicated ones (a 2-D ``dp x tp`` mesh whose
    activations live on the ``tp`` submesh combines this rank's ``tp`` group, never
    another data-parallel group's data; HSDP's shard group). Means and standard
    deviations by :func:`.stats.device.combine_moments`, ``min``/``max`` over the
    parts, counts added; ``dist.stats`` reads ``global``. With a ``Partial``
    placement the ranks hold summands, which no statistic combines: they stay the local
    shard's, ``dist.stats`` reads ``local``.

    Raises:
        RuntimeError: the ranks' traces have different DTensor entries (their
            structure differs; compare them with ``assert_ranks_agree``).
    """
    import torch.distributed as dist

    from .stats.device import combine_moments

    rows = [(m.stats, math.prod(m.dist["local"]), getattr(m.dist, "where", None)) for m in metas]  # type: ignore[index]
    every: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(every, rows)
    if len({len(r) for r in every}) > 1:
        raise RuntimeError("dist_stats='global': the ranks traced different DTensor entries")
    for i, (meta, (_, _, mine)) in enumerate(zip(metas, rows, strict=True)):  # mine: its where
        info: Any = meta.dist
        if any(p.startswith("P(") for p in info["placements"]) or not meta.stats or mine is None:
            info["stats"] = "local"
            continue
        replicated = [d for d, p in enumerate(info["placements"]) if p == "R"]
        same = (mine[0], [mine[1][d] for d in replicated])
        parts = [
            (stats, n)
            for stats, n, where in (r[i] for r in every)
            if where is not None and (where[0], [where[1][d] for d in replicated]) == same
        ]
        combined: dict[str, Any] = {}
        if "mean" in meta.stats:
            moments = [[float(k), s["mean"], s["std"]] for s, k in parts]  # this rank's among them
            n, mean, std = torch.tensor(moments, dtype=torch.float64).T
            owner = torch.zeros(len(parts), dtype=torch.int64)
            total, m2 = combine_moments(owner, 1, n, mean, std * std * n)
            combined = {"mean": float(total[0]), "std": float((m2[0] / n.sum()).sqrt())}  # 0/0: NaN
        for key in meta.stats.keys() & _COMBINE.keys():
            combined[key] = _COMBINE[key](s[key] for s, _ in parts)
        meta.stats = {k: combined[k] for k in meta.stats}
        info["stats"] = "global"


def dtensor_metas(*values: Any) -> list[TensorMeta]:
    """Every :class:`TensorMeta` with a DTensor's ``dist`` entry in ``values`` (node
    lists, sections: nested lists and dicts), each once, in the order found."""
    found: dict[int, TensorMeta] = {}

    def keep(value: Any) -> None:
        if isinstance(value, TensorMeta) and isinstance(value.dist, dict):
            found.setdefault(id(value), value)
        elif hasattr(value, "outputs"):  # a Node
            map_plain(value.outputs, keep)

    map_plain(list(values), keep)
    return list(found.values())
