"""Random weights that do not depend on the architecture: :func:`init_by_name`.

A model built with random weights draws every parameter from torch's one global
stream, in construction order, and transformers' ``PreTrainedModel`` initialises every
weight again after construction: one more layer moves the stream, so every weight
(and every activation of the snapshot) differs. :func:`init_by_name` re-draws each
parameter from a generator seeded by its own qualified name, so a parameter's values
depend on its name, shape and the seed only.

Imports torch and the statistics' float64 reference of ``capture``; the package
imports this module only when ``init_by_name`` is asked for.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import torch
from torch.nn.parameter import is_lazy  # type: ignore[attr-defined]

from .capture.stats import reference_stats

__all__ = ["init_by_name", "name_seed"]

M = TypeVar("M")

SCALE_FACTOR = 2.0
"""A module's own init is kept for a parameter when the standard deviation it draws is
within this factor of the parameter's present one, and its mean within one present
standard deviation, each widened by the sampling noise of a tensor of that size
(``3 / sqrt(numel)``): otherwise the parameter was initialised some other way (a
custom ``nn.init`` call after construction) and is drawn with its present mean and
std instead."""

SCALE_MIN_ELEMENTS = 32
"""Parameters with fewer elements keep their module's own init without the scale check:
a handful of values does not tell one init's scale from another's."""


def name_seed(seed: int, name: str) -> int:
    """The generator seed of parameter ``name``: the first 63 bits of
    SHA-256(``"<seed>\\0<name>"``), the same in every process (Python's ``hash()`` of a
    string is salted per process).

    Args:
        seed: the caller's seed (any int).
        name: the parameter's qualified name (``model.layers.0.mlp.up_proj.weight``).

    Returns:
        An int in ``[0, 2**63)``, for ``torch.manual_seed`` or ``Generator.manual_seed``.
    """
    digest = hashlib.sha256(f"{seed}\0{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def init_by_name(model: M, seed: int = 0) -> M:
    """Re-draw every floating-point parameter of ``model`` from a generator seeded by
    ``(seed, its qualified name)``, so that adding, removing or reordering modules
    leaves every other parameter as it was.

    What it changes, parameter by parameter (each once, under its first name in
    ``model.named_parameters()``, so tied weights such as an ``lm_head`` tied to the
    embeddings stay one tensor):

    * a constant parameter (every element equal: a LayerNorm weight of ones, a zero
      bias; also any one-element parameter) is left as it is;
    * otherwise its owning module's own init is run with torch's global generators
      seeded by :func:`name_seed` (``torch.random.fork_rng``, so the caller's random
      state is restored): transformers' ``PreTrainedModel._init_weights(module)`` of the
      nearest enclosing ``PreTrainedModel``, else the module's ``reset_parameters()``.
      Only this parameter's new values are kept; every other parameter and buffer of
      the module (and of its children) is restored. The draw is kept when it has the
      parameter's scale (:data:`SCALE_FACTOR`);
    * otherwise (no such init, the init left it unchanged or drew another scale, or it
      raised) it is drawn from a normal distribution with the parameter's present mean
      (0 where that is within sampling noise of 0) and standard deviation, by a CPU
      ``torch.Generator`` seeded by :func:`name_seed`. Its values then follow the
      present standard deviation, which another draw (another architecture) moves by
      its sampling noise: such a parameter is the same across architectures up to
      that noise only, not bit for bit.

    Left alone: buffers (rotary ``inv_freq``, BatchNorm running statistics), integer,
    bool and complex parameters, parameters on the ``meta`` device (nothing to draw)
    and uninitialised lazy parameters. Values drawn by a module's own init on an
    accelerator come from that device's generator, so they differ from the CPU's for
    the same seed (as any torch draw does).

    Args:
        model: an ``nn.Module``; changed in place.
        seed: mixed into every parameter's seed; another seed gives other weights.

    Returns:
        ``model`` itself, for ``model = init_by_name(Model(config))``.

    Raises:
        TypeError: ``model`` is not an ``nn.Module``.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(
            f"init_by_name() needs an nn.Module, got {type(model).__name__}; "
            "call init_by_name(model) on the model before tracing it"
        )
    modules = dict(model.named_modules(remove_duplicate=False))
    rng = _accelerators(model)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if is_lazy(param) or param.is_meta or not param.is_floating_point():
                continue  # no values to draw: lazy, meta, integer, bool or complex
            if param.numel() <= 1 or torch.equal(*torch.aminmax(param.detach())):
                continue  # a constant: one element, a LayerNorm weight of ones, a zero bias
            owner_path, _, attr = name.rpartition(".")
            owner = modules[owner_path]
            generator_seed = name_seed(seed, name)
            inits = _inits(modules, owner_path, owner)
            draws = (_owner_draw(owner, attr, i, generator_seed, rng) for i in inits)
            if (drawn := next((d for d in draws if d is not None), None)) is None:
                drawn = _normal_like(param, generator_seed)
            if drawn is not None:
                param.copy_(drawn)
    return model


def _accelerators(model: Any) -> dict[str, Any]:
    """The keyword arguments of ``torch.random.fork_rng`` for the accelerator the
    model's tensors lie on: its device indices (``devices``) and type
    (``device_type``); no devices (and ``cuda``, fork_rng's default) for a CPU-only
    model."""
    tensors = [*model.parameters(), *model.buffers()]
    on = [t.device for t in tensors if t.device.type not in ("cpu", "meta")]
    kind = on[-1].type if on else "cuda"
    return {"devices": sorted({d.index or 0 for d in on}), "device_type": kind}


def _inits(modules: dict[str, Any], owner_path: str, owner: Any) -> Iterator[Callable[[], Any]]:
    """The inits of ``owner`` to try, in order: the nearest enclosing
    ``PreTrainedModel``'s ``_init_weights(owner)``, then ``owner.reset_parameters()``.
    A transformers ``PreTrainedModel`` is told by its class hierarchy's names, so
    transformers is never imported here."""
    parts = owner_path.split(".") if owner_path else []
    for depth in range(len(parts), -1, -1):
        ancestor = modules[".".join(parts[:depth])]  # each a module path
        if callable(getattr(ancestor, "_init_weights", None)) and any(
            c.__name__ == "PreTrainedModel" for c in type(ancestor).__mro__
        ):
            yield functools.partial(ancestor._init_weights, owner)
            break
    if callable(reset := getattr(owner, "reset_parameters", None)):
        yield reset


def _owner_draw(
    owner: Any, attr: str, init: Callable[[], Any], generator_seed: int, rng: dict[str, Any]
) -> torch.Tensor | None:
    """Run ``init`` under generators seeded by ``generator_seed`` (``rng``: the
    accelerators to fork, :func:`_accelerators`) and return the values it gave the
    parameter ``owner.<attr>`` when they have that parameter's present scale, else
    None; every parameter and buffer of ``owner``'s subtree is restored either way."""
    param = owner._parameters[attr]
    saved = list(_tensor_slots(owner))
    flagged = getattr(param, "_is_hf_initialized", False)
    drawn: torch.Tensor | None = None
    try:
        if flagged:  # transformers' init functions skip a tensor flagged as loaded
            param._is_hf_initialized = False  # type: ignore[attr-defined]
        # NaN first: an init that does not draw this parameter leaves them, one that
        # draws the present values again (a second call) does not
        param.fill_(math.nan)
        with torch.random.fork_rng(**rng):
            torch.manual_seed(generator_seed)
            init()
        new = owner._parameters.get(attr)
        if isinstance(new, torch.Tensor) and new.shape == param.shape:
            drawn = new.detach().to(param.dtype, copy=True)
    except Exception:  # an init that cannot run here: fall back to mean and std
        drawn = None
    finally:
        for store, key, obj, data in saved:
            store[key] = obj
            obj.copy_(data)
        if flagged:
            param._is_hf_initialized = True  # type: ignore[attr-defined]
    # a NaN left (a value the init did not draw) makes the moments NaN: not the same scale
    return drawn if drawn is not None and _same_scale(param, drawn) else None


def _tensor_slots(owner: Any) -> Iterator[tuple[dict[str, Any], str, Any, Any]]:
    """``(store, key, tensor, copy of its values)`` for every parameter and buffer of
    ``owner`` and its children (``store`` is a module's ``_parameters`` or
    ``_buffers``), to put back after an init ran."""
    for module in owner.modules():
        for store in (module._parameters, module._buffers):
            for key, t in store.items():
                if t is not None and not t.is_meta:
                    yield store, key, t, t.detach().clone()


def _same_scale(old: torch.Tensor, new: torch.Tensor) -> bool:
    """True when ``new`` has ``old``'s scale (see :data:`SCALE_FACTOR`)."""
    old_std, old_mean = _moments(old)
    new_std, new_mean = _moments(new)
    if not all(math.isfinite(v) for v in (old_std, old_mean, new_std, new_mean)):
        return False
    if old.numel() < SCALE_MIN_ELEMENTS:
        return True
    if old_std == 0 or new_std == 0:
        return False
    noise = 3 / math.sqrt(old.numel())
    factor = SCALE_FACTOR * (1 + noise)
    ratio = new_std / old_std
    return 1 / factor <= ratio <= factor and abs(new_mean - old_mean) <= old_std * (1 + noise)


def _moments(t: torch.Tensor) -> tuple[float, float]:
    """(population std, mean) of ``t`` by the statistics' float64 reference."""
    stats = reference_stats(t)
    return float(stats["std"]), float(stats["mean"])


def _normal_like(param: torch.Tensor, generator_seed: int) -> torch.Tensor | None:
    """Values drawn from N(mean, std) of ``param`` by a CPU generator seeded by
    ``generator_seed``, the mean taken as 0 where it is within the sampling noise of
    0 (``3 * std / sqrt(numel)``); None when its mean or std is not finite. A
    parameter that holds such a draw already (an earlier call, the scale it was drawn
    with kept on the parameter as ``_graphir_scale``) is drawn with that scale again,
    so a second call gives the same values."""
    kept = getattr(param, "_graphir_scale", None)
    if kept is not None and kept[0] == generator_seed:
        again = _draw(param, generator_seed, kept[1], kept[2])
        if torch.equal(again, param):
            return again
    std, mean = _moments(param)
    if not (math.isfinite(std) and math.isfinite(mean)):
        return None
    if abs(mean) <= 3 * std / math.sqrt(param.numel()):
        mean = 0.0
    param._graphir_scale = (generator_seed, mean, std)  # type: ignore[attr-defined]
    return _draw(param, generator_seed, mean, std)


def _draw(param: torch.Tensor, generator_seed: int, mean: float, std: float) -> torch.Tensor:
    """N(``mean``, ``std``) values of ``param``'s shape, dtype and device, drawn in
    float64 on the CPU by a generator seeded by ``generator_seed``."""
    generator = torch.Generator(device="cpu").manual_seed(generator_seed)
    values = torch.empty(param.shape, dtype=torch.float64).normal_(mean, std, generator=generator)
    return values.to(device=param.device, dtype=param.dtype)
