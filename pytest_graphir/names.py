"""The snapshot's vocabulary: each name format written once, with its parser beside it.

Floor 1, next to :mod:`pytest_graphir.ir` (no torch import): capture and compiled
build names with these functions, and compare, report and the CLI read them back
with the parsers here, never with their own string splitting.

* node names: an op node is ``<scope>/<op>#<k>`` (``transformer.h.0.attn/split#0``;
  ``<op>#<k>`` at the root), a module node its module path, with ``@<i>`` for the
  i-th call (i >= 1) of a module that runs more than once (``blocks.0@1``);
* references: ``$<node>`` or ``$<node>[<i>]`` (output ``i`` of a node with several
  tensor outputs), ``$<input>``, ``$<parameter>``; a constant string that starts
  with ``$`` is written with the prefix doubled (``$$``) and is no reference;
* hook events: ``<module path> <kind>[ <hook name>]``, the root module as
  ``<root>``: ``<root> forward_pre``, ``blocks.0 forward_hook log_output`` (the same
  spelling in the ``hooks`` section of a trace and in the ``compiled`` checks);
* the ``meta`` keys that set the granularity, and the ``compiled`` section's keys.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

REF_PREFIX = "$"
"""Marks a string argument as a reference to a tensor (``$name``); a constant
string that starts with it is written with the prefix doubled."""

ROOT_LABEL = "<root>"
"""How hook events name the model itself (its module path is ``""``)."""

GRANULARITY_KEYS = ("view", "depth", "blackbox")
"""``meta`` keys written by ``trace(view=..., depth=..., blackbox=...)``; a snapshot
taken at another granularity is a different kind of snapshot, not a model change."""

# -- the ``compiled`` section (pytest_graphir.compiled.compiled_report.CompiledReport.to_data)
GRAPH_BREAKS = "graph_breaks"
"""Key of the graph-break list in the ``compiled`` section."""
GRAPH_BREAK_PLACE = ("reason", "scope", "location")
"""The fields that identify one graph break (the rest, ``count``, is compared)."""
PER_GRAPH = "per_graph"
"""Key of the per-graph summaries (first call) in the ``compiled`` section."""
RECOMPILED_GRAPHS = "recompiled_graphs"
"""Key of the per-graph summaries of the graphs a second call compiled."""
GRAPH_LISTS = (PER_GRAPH, RECOMPILED_GRAPHS)
"""``compiled`` keys holding one entry per FX GraphModule."""


# -- node names ---------------------------------------------------------------------
_OP_NAME = re.compile(r"^(?:(.*)/)?([^/#]+)#(\d+)$")


class OpName(NamedTuple):
    """An op node name taken apart: ``blk/gelu#0`` -> ``OpName("blk", "gelu", 0)``."""

    scope: str
    op: str
    k: int


def op_node_base(scope: str, op: str) -> str:
    """The name of ``op``'s calls in the module labelled ``scope`` (``""``: the root),
    without the call index: ``blk/gelu``; :func:`op_node_name` numbers it."""
    return f"{scope}/{op}" if scope else op


def op_node_name(base: str, index: int) -> str:
    """The name of the ``index``-th call (from 0) of the op whose :func:`op_node_base`
    is ``base``: ``blk/gelu#0``, which :func:`parse_op_name` takes apart."""
    return f"{base}#{index}"


PATH_SEPARATORS = "/#@"
"""Characters that separate the parts of node names (``scope/op#k``, ``path@i``), so a
module path may not contain them."""


def check_module_path(path: str) -> None:
    """Refuse a module path that holds one of :data:`PATH_SEPARATORS`: a module
    registered as ``a/linear#0`` beside a module ``a`` would take the name of ``a``'s
    first ``linear`` op, and the changes of one would read as the other's.

    Raises:
        ValueError: naming the path, the character and the fix.
    """
    for char in PATH_SEPARATORS:
        if char in path:
            raise ValueError(
                f"trace(): module path {path!r} contains {char!r}, which node names use "
                f"(an op node is <module path>/<op>#<k>, a module's later call "
                f"<module path>@<i>); register the module under a name without "
                f"'/', '#' or '@' (nn.Module.add_module)"
            )


def module_node_name(path: str, call: int) -> str:
    """The name of the ``call``-th call (from 0) of the module at ``path``."""
    return path if call <= 0 else f"{path}@{call}"


def parse_op_name(name: str) -> OpName | None:
    """Take an op node name apart; None for a module node name."""
    m = _OP_NAME.match(name)
    return None if m is None else OpName(m.group(1) or "", m.group(2), int(m.group(3)))


def op_scope(name: str) -> str:
    """The module label an op node ran in (``blk@1/gelu#0`` -> ``blk@1``, ``add#0`` ->
    ``""``); ``""`` for a module node name."""
    return name.rpartition("/")[0]


def module_path(label: str) -> str:
    """A module label without its call number: ``blocks.0@2`` -> ``blocks.0``."""
    return label.partition("@")[0]


def call_index(label: str) -> int:
    """The call number of a module label: ``blocks.0@2`` -> 2, ``blocks.0`` -> 0."""
    _, at, call = label.partition("@")
    return int(call) if at and call.isdecimal() else 0


def node_scope(name: str) -> str:
    """The module a node belongs to: an op node's scope label (``blk@1/gelu#0`` ->
    ``blk@1``), a module node's own path (``blk@1`` -> ``blk``)."""
    return op_scope(name) if "/" in name else module_path(name)


def local_name(name: str) -> str:
    """An op node name without its scope: ``blk/gelu#0`` -> ``gelu#0``."""
    return name.rpartition("/")[2]


def parent_path(path: str) -> str:
    """The parent module's path: ``encoder.layer.0`` -> ``encoder.layer``; ``""`` at the
    root."""
    return path.rpartition(".")[0]


# -- references ---------------------------------------------------------------------
def ref(name: str, index: int | None = None) -> str:
    """A reference to ``name`` (a node, input, parameter or buffer); ``index`` picks one
    output of a node with several tensor outputs."""
    return f"{REF_PREFIX}{name}" if index is None else f"{REF_PREFIX}{name}[{index}]"


def is_ref(value: Any) -> bool:
    """True for a reference string (``$x``), False for constants (``$$x`` included)."""
    return isinstance(value, str) and value.startswith(REF_PREFIX) and value[:2] != REF_PREFIX * 2


def parse_ref(value: Any) -> tuple[str, int | None] | None:
    """``$blk/split#0[1]`` -> ``("blk/split#0", 1)``, ``$x`` -> ``("x", None)``; None for
    anything that is not a reference."""
    if not is_ref(value):
        return None
    body = value[len(REF_PREFIX) :]
    base, bracket, rest = body.partition("[")
    if bracket and rest.endswith("]") and rest[:-1].isdecimal():
        return base, int(rest[:-1])
    if bracket and rest == RANK + "]":  # the output this rank picked (rank_ref)
        return base, None
    return body, None


def strings_in(value: Any) -> Iterator[str]:
    """Every string anywhere in ``value`` (nested lists, tuples and dict values), in
    order: where references can be."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, (list, tuple, dict)):
        for v in value.values() if isinstance(value, dict) else value:
            yield from strings_in(v)


def refs_in(value: Any) -> list[str]:
    """The names referenced anywhere in ``value`` (:func:`strings_in`), output indices
    dropped, in order of appearance."""
    return [target[0] for text in strings_in(value) if (target := parse_ref(text))]


def escape_constant(text: str) -> str:
    """A constant string as written in an argument list: one starting with ``$`` gets
    the prefix doubled, so it never reads as a reference."""
    return REF_PREFIX + text if text.startswith(REF_PREFIX) else text


# -- ranks --------------------------------------------------------------------------
RANK = "<rank>"
"""How a rank-valued op argument is written: the same on every rank."""


def rank_ref(name: str) -> str:
    """A reference to the output of node ``name`` that this rank picked by its rank
    (``torch.chunk(x, world)[rank]``): ``$chunk#0[<rank>]``, the same on every rank;
    :func:`parse_ref` reads it as the whole node's."""
    return f"{REF_PREFIX}{name}[{RANK}]"


def peer_name(peer: int, rank: int, size: int) -> str:
    """The peer of a point-to-point transfer relative to the calling rank, the same
    text on every rank of a ring or pipeline: group rank ``peer`` seen from group rank
    ``rank`` of a group of ``size`` is ``<rank+1>`` (the next), ``<rank-1>`` (the
    previous); an offset past half the group counts the other way round."""
    offset = (peer - rank) % size
    offset = offset - size if offset > size // 2 else offset
    return f"<rank{offset:+d}>"


def parse_peer(text: str) -> int | None:
    """``<rank+1>`` -> 1, ``<rank-1>`` -> -1 (:func:`peer_name`); None for other text."""
    m = re.fullmatch(r"<rank([+-][0-9]+)>", text)
    return None if m is None else int(m.group(1))


# -- hook events --------------------------------------------------------------------
class HookEventParts(NamedTuple):
    """A hook event taken apart: module path (``<root>`` for the model), kind, hook name
    (``""`` for the tracer's own events)."""

    module: str
    kind: str
    hook: str


def hook_event(module: str, kind: str, hook: str = "") -> str:
    """The one spelling of a hook event.

    Args:
        module: module label (``""`` or ``<root>`` for the model itself).
        kind: ``forward_pre`` / ``forward`` / ``backward_pre`` / ``backward`` for the
            tracer's global hooks; ``forward_pre_hook``, ``forward_hook``,
            ``backward_pre_hook``, ``backward_hook`` (and the ``state_dict`` ones) for
            the model's own hooks.
        hook: the hook's name (:func:`hook_name`) for the model's own hooks.
    """
    text = f"{module or ROOT_LABEL} {kind}"
    return f"{text} {hook}" if hook else text


def parse_hook_event(event: str) -> HookEventParts:
    """Take a :func:`hook_event` string apart (missing parts are ``""``)."""
    module, _, rest = event.partition(" ")
    kind, _, hook = rest.partition(" ")
    return HookEventParts(module, kind, hook)


def hook_name(hook: Any) -> str:
    """The name a hook is recorded under: its ``__qualname__`` without the
    ``<locals>`` part (``make_probe.<locals>.probe`` -> ``probe``: renaming the test
    that registers it is no model change), or its class's ``__qualname__`` +
    ``.__call__`` for a callable object (``Observer.__call__``). Never an address.

    Unwraps ``functools.partial`` and torch's ``_WrappedHook`` (what
    ``Module.register_*_hook(..., with_kwargs=...)`` and ``register_state_dict_*`` keep
    in the hook dicts; its ``hook`` attribute is the user's function).
    """
    target = getattr(hook, "hook", hook) if type(hook).__name__ == "_WrappedHook" else hook
    while isinstance(target, functools.partial):
        target = target.func
    name = getattr(target, "__qualname__", None)
    if not isinstance(name, str) or isinstance(target, type):
        name = f"{type(target).__qualname__}.__call__"
    name = name.rsplit("<locals>.", 1)[-1]
    if name == "<lambda>":  # a lambda forwarding to a function it closes over: that one
        for cell in getattr(target, "__closure__", None) or ():
            content = cell.cell_contents
            if callable(content) and not isinstance(content, type):
                return hook_name(content)
    return name


ACTIVATION_WRAPPER = "_checkpoint_wrapped_module"
"""The attribute under which ``checkpoint_wrapper`` and ``offload_wrapper``
(``torch.distributed.algorithms._checkpoint.checkpoint_wrapper.ActivationWrapper``)
hold the module they wrap."""
WRAPPER_ATTRIBUTES = (ACTIVATION_WRAPPER, "_fsdp_wrapped_module", "_orig_mod")
"""The attribute under which a wrapper module holds the module it wraps: activation
checkpointing's ``checkpoint_wrapper``, FSDP1's ``FullyShardedDataParallel``,
``torch.compile``'s ``OptimizedModule``."""


def canonical_module_path(path: str) -> str:
    """A module path or parameter name without wrapper segments
    (:data:`WRAPPER_ATTRIBUTES`): ``layers.0._checkpoint_wrapped_module.attn.weight``
    -> ``layers.0.attn.weight``, so wrapping a module renames nothing."""
    if "._" not in path and not path.startswith("_"):
        return path  # the common case: no segment can be a wrapper's
    return ".".join(p for p in path.split(".") if p not in WRAPPER_ATTRIBUTES)


# -- small shared helpers -----------------------------------------------------------
@functools.cache
def dtype_name(dtype: Any) -> str:
    """A torch dtype as snapshots write it: ``torch.float32`` -> ``float32`` (cached:
    the tracer asks once per recorded tensor)."""
    return str(dtype).removeprefix("torch.")


def first_names(names: Iterable[str]) -> str:
    """``a, b, c, d and 3 more``: the first four names and how many are left out."""
    items = list(names)
    return ", ".join(items[:4]) + (f" and {len(items) - 4} more" if len(items) > 4 else "")


def plural(n: int, word: str) -> str:
    """``1 node``, ``2 nodes``, ``3 entries``: a count and its noun."""
    if n == 1:
        return f"{n} {word}"
    return f"{n} {word[:-1]}ies" if word.endswith("y") else f"{n} {word}s"


def fmt(value: Any) -> str:
    """One value as the snapshot shows it: floats to 6 significant digits, lists
    ``[a,b]``, ``null``, ``true``/``false``."""
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list):
        return "[" + ",".join(fmt(v) for v in value) + "]"
    return json.dumps(value) if value is None or isinstance(value, bool) else str(value)


def aligned(table: Sequence[Sequence[str]], right: frozenset[int] = frozenset()) -> list[str]:
    """``table``'s rows as lines of columns two spaces apart, each column as wide as
    its widest cell, those numbered in ``right`` right-aligned; no trailing spaces."""
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))] if table else []
    return [
        "  ".join(
            c.rjust(w) if j in right else c.ljust(w)
            for j, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in table
    ]


def map_plain(value: Any, fn: Callable[[Any], Any]) -> Any:
    """Apply ``fn`` to every leaf of plain snapshot data (lists and dicts rebuilt,
    dict keys kept): the one tree-map over loaded snapshot documents. Tensor
    outputs of a model are walked by :func:`pytest_graphir.leaves.flatten` instead."""
    if isinstance(value, list):
        return [map_plain(v, fn) for v in value]
    if isinstance(value, dict):
        return {k: map_plain(v, fn) for k, v in value.items()}
    return fn(value)


# -- the launcher ----------------------------------------------------------------------
def launcher_rank() -> int:
    """This process's rank under a launcher (``RANK``, set by ``torchrun``); 0 elsewhere.
    The one place the package reads the launcher's environment."""
    import os

    value = os.environ.get("RANK", "").strip()
    return int(value) if value.isdecimal() else 0


def writes_snapshots() -> bool:
    """False on a launcher's rank above 0 (``torchrun -m pytest``): every rank runs
    the whole session, so only rank 0 writes snapshots; the others still compare."""
    return launcher_rank() == 0
