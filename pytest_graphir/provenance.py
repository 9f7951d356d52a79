"""Where a snapshot was written: torch and package versions, Python, device, float32 math.

Floor 1 of the package, like :mod:`pytest_graphir.ir`: no torch import at module
level, so the extension can read a snapshot's provenance without loading torch.

A snapshot carries its provenance as one comment line just before the end line::

    # provenance: {torch: 2.13.0+cpu, python: 3.11.7, device: cpu, float32: highest,
    #   packages: {transformers: 5.23.0}}     (one line in the file)

It is a YAML comment, so it is never compared: rewriting a snapshot on another
machine changes this line only, and a snapshot that still matches is never
rewritten. Snapshots written before provenance existed have no such line and load
as before. When a comparison fails and the stored provenance differs from this
run's, :func:`note` says so first, since a torch upgrade or another device explains
op-level drift better than any change of the model.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Iterable
from importlib.metadata import PackageNotFoundError, packages_distributions, version
from typing import Any

import yaml

PREFIX = "# provenance: "
"""Start of the provenance line in a snapshot."""

_KEYS = ("torch", "python", "device", "float32")


_distributions = functools.cache(packages_distributions)


@functools.lru_cache(maxsize=256)
def _version_of(top_level: str) -> tuple[str, str] | None:
    for dist in _distributions().get(top_level, []):
        with contextlib.suppress(PackageNotFoundError):  # a stale dist-info: the next one
            return dist, version(dist)
    return None


def packages(module_names: set[str]) -> dict[str, str]:
    """Return ``{distribution: version}`` for the installed distributions that provide
    the given Python modules (``transformers.models.gpt2.modeling_gpt2`` ->
    ``transformers``), from ``importlib.metadata.packages_distributions``.

    Modules of no installed distribution (the test file, ``__main__``) and torch
    itself (recorded on its own) are left out. Sorted by name.
    """
    tops = {name.split(".", 1)[0] for name in module_names} - {"torch", "builtins", "__main__", ""}
    return dict(sorted(hit for top in tops if (hit := _version_of(top)) is not None))


def collect(device: str, float32: str, modules: Iterable[Any]) -> dict[str, Any]:
    """The provenance of a trace run now.

    Args:
        device: device type the model ran on (``"cpu"``, ``"cuda"``).
        float32: the float32 math in effect (see
            :func:`pytest_graphir.capture.precision.effective_mode`).
        modules: the traced model's modules (the tracer walks the module tree once); the
            packages are those defining their classes (``type(m).__module__``).

    Returns:
        ``{"torch", "python", "device", "float32", "packages"}``; ``packages`` maps
        distribution names to versions.
    """
    import torch

    return {
        "torch": str(torch.__version__),
        "python": ".".join(str(v) for v in sys.version_info[:3]),
        "device": device,
        "float32": float32,
        "packages": packages({type(m).__module__ for m in modules}),
    }


def line(provenance: dict[str, Any]) -> str:
    """The snapshot line holding ``provenance`` (no newline)."""
    text: str = yaml.safe_dump(provenance, default_flow_style=True, width=2**30, sort_keys=False)
    return PREFIX + text.strip()


def read(text: str) -> dict[str, Any] | None:
    """The provenance recorded in snapshot ``text``, or None (older snapshot, no
    line, or a line that does not parse: provenance never makes a snapshot invalid)."""
    start = text.rfind("\n" + PREFIX)
    if start < 0:
        return None
    try:
        value = yaml.safe_load(text[start + 1 + len(PREFIX) :].partition("\n")[0])
    except yaml.YAMLError:
        return None
    return value if isinstance(value, dict) else None


_LABELS = {"torch": "torch", "python": "Python", "float32": "float32 math"}


def _describe(p: dict[str, Any], keys: list[str]) -> str:
    parts = [
        f"{_LABELS[k]} {p.get(k, '?')}"
        if k in _LABELS
        else f"{k} {(p.get('packages') or {}).get(k, '(not used)')}"
        for k in keys
    ]
    return f"{', '.join(parts)} on {p.get('device', '?')}".lstrip()


def note(stored: dict[str, Any] | None, current: dict[str, Any] | None) -> str | None:
    """The line that opens a failure message when the snapshot was written elsewhere.

    Returns:
        e.g. ``"graphir: snapshot written with torch 2.13.0 on cpu; this run torch
        2.11.0 on cuda: op-level differences may come from the upgrade"``, naming
        only what differs (torch, packages whose code the model ran, Python, device,
        float32 math); None when either side has no provenance or nothing differs.
    """
    if not stored or not current:
        return None
    differ = [k for k in _KEYS if stored.get(k) != current.get(k)]
    old_pk, new_pk = stored.get("packages") or {}, current.get("packages") or {}
    differ_pk = sorted(k for k in set(old_pk) | set(new_pk) if old_pk.get(k) != new_pk.get(k))
    if not differ and not differ_pk:
        return None
    keys = [k for k in ("torch", *differ_pk, "python", "float32") if k in differ or k in differ_pk]
    upgrade = "torch" in differ or differ_pk or "python" in differ
    cause = "the upgrade" if upgrade else "the device" if "device" in differ else "the float32 math"
    return (
        f"graphir: snapshot written {'with ' if keys else ''}{_describe(stored, keys)}; "
        f"this run {_describe(current, keys)}: op-level differences may come from {cause}"
    )


def notes(stored_text: str, current_text: str) -> list[str]:
    """:func:`note` for two snapshot texts, as a list of zero or one line."""
    text = note(read(stored_text), read(current_text))
    return [text] if text else []
