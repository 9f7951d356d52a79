"""The ``.graphir`` snapshot text format: write, and load safely.

A snapshot is a YAML document written one node per line, so a pull-request diff
shows exactly the nodes that changed::

    # graphir-format: 1
    # pytest-graphir snapshot of GPT2LMHeadModel; regenerate with `pytest --graphir-update`
    meta: {model: GPT2LMHeadModel, args: [input_ids], kwargs: [], training: false, ...}
    inputs:
      input_ids: {shape: [1, 16], dtype: int64, min: 6307, max: 49922, sum: 414116}
    nodes:
      transformer/view#0: {op: view, args: [$input_ids, -1, 16], out: [{shape: [1, 16], ...}]}
      transformer.wte/embedding#0: {op: embedding, args: [$transformer/view#0, ...], ...}
    outputs:
      logits: {ref: $lm_head/linear#0, shape: [1, 16, 50257], dtype: float32}
    hooks:                      # optional sections: trace(..., hooks=True, backward=True)
      - transformer forward_pre
    # end of graphir snapshot

Statistics are rounded to 6 significant digits when written (tolerances apply when
comparing). Loading uses PyYAML's safe loader (its C version when available): no
Python object tags, nothing executed. The end line makes a truncated file an error
rather than a silently shorter graph. Nothing machine-specific is compared: no
memory addresses, ``id()`` values, paths or timestamps are written, and where the
snapshot was written (torch and package versions, device) is one comment line
before the end line (:mod:`pytest_graphir.provenance`), which the loader skips.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from . import provenance as _provenance
from .ir import (
    COUNT_KEYS,
    FORMAT_VERSION,
    OPTIONAL_SECTIONS,
    SEQUENCE_SECTIONS,
    STAT_KEYS_FLOAT,
    GraphIR,
)

HEADER = f"# graphir-format: {FORMAT_VERSION}"
END = "# end of graphir snapshot"
SECTIONS = ("meta", "inputs", "nodes", "outputs")
SIGNIFICANT_DIGITS = 6
_ROUNDED = frozenset(STAT_KEYS_FLOAT) - COUNT_KEYS
_HEADER_RE = re.compile(r"^# graphir-format: (\S+)\s*$")
_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-/#@]*$")
_YAML_WORDS = frozenset({"y", "n", "yes", "no", "on", "off", "true", "false", "null"})

_Dumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class SnapshotFormatError(ValueError):
    """A snapshot text that is not a valid graphir document of this format version.

    Attributes:
        line: 1-based line of the problem when known, else None.
        reason: what is wrong, without the location.
    """

    def __init__(self, reason: str, line: int | None = None) -> None:
        self.reason = reason
        self.line = line
        super().__init__(f"line {line}: {reason}" if line else reason)


class _Loader(_BaseLoader):  # type: ignore[misc]
    """Safe loader that refuses duplicate mapping keys (a hand-edit gone wrong)."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise SnapshotFormatError(
                    f"duplicate key {key!r}", key_node.start_mark.line + 1
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_Loader.add_constructor(
    "tag:yaml.org,2002:map", lambda loader, node: loader.construct_mapping(node)
)


def _round(value: Any) -> Any:
    if isinstance(value, float) and value == value and value not in (float("inf"), float("-inf")):
        return float(f"{value:.{SIGNIFICANT_DIGITS}g}")
    return value


def _rounded(entry: Any) -> Any:
    """Round the statistics of tensor entries, at any depth."""
    if isinstance(entry, dict):
        if "dtype" in entry:
            return {k: (_round(v) if k in _ROUNDED else v) for k, v in entry.items()}
        return {k: _rounded(v) for k, v in entry.items()}
    if isinstance(entry, list):
        return [_rounded(v) for v in entry]
    return entry


def _flow(value: Any) -> str:
    text: str = yaml.dump(
        value, Dumper=_Dumper, default_flow_style=True, width=2**30, sort_keys=False,
        allow_unicode=True,
    )
    return text[:-4] if text.endswith("\n...\n") else text.rstrip("\n")


def _key(name: str) -> str:
    if _PLAIN_KEY.match(name) and name.lower() not in _YAML_WORDS:
        return name
    return _flow(name)


def dumps(graph: GraphIR | dict[str, Any]) -> str:
    """Serialize a GraphIR (or its ``to_data()`` document) to snapshot text.

    Returns:
        The text, ending in a newline; byte-identical for identical input.
    """
    doc = graph.to_data() if isinstance(graph, GraphIR) else graph
    lines = [HEADER,
             f"# pytest-graphir snapshot of {doc['meta'].get('model', '?')}; "
             "regenerate with `pytest --graphir-update`",
             f"meta: {_flow(doc['meta'])}"]
    for section in ("inputs", "nodes", "outputs"):
        entries = doc[section]
        if not entries:
            lines.append(f"{section}: {{}}")
            continue
        lines.append(f"{section}:")
        for name, value in entries.items():
            lines.append(f"  {_key(str(name))}: {_flow(_rounded(value))}")
    for section in OPTIONAL_SECTIONS:
        if section not in doc:
            continue
        entries = doc[section]
        if not entries:
            lines.append(f"{section}: {'[]' if section in SEQUENCE_SECTIONS else '{}'}")
            continue
        lines.append(f"{section}:")
        if section in SEQUENCE_SECTIONS:
            lines.extend(f"  - {_flow(item)}" for item in entries)
        else:
            lines.extend(f"  {_key(str(k))}: {_flow(_rounded(v))}" for k, v in entries.items())
    if isinstance(graph, GraphIR) and graph.provenance:
        lines.append(_provenance.line(graph.provenance))  # a comment: never compared
    lines.append(END)
    return "\n".join(lines) + "\n"


def loads(text: str) -> dict[str, Any]:
    """Parse and validate snapshot text.

    Returns:
        The document: ``{"meta": {...}, "inputs": {...}, "nodes": {...}, "outputs": {...}}``.

    Raises:
        SnapshotFormatError: not a graphir snapshot, another format version,
            invalid YAML (with the line), a duplicate key, a missing or unknown
            section, a malformed node, or a truncated file (no end line).
    """
    first = text.split("\n", 1)[0]
    match = _HEADER_RE.match(first)
    if not match:
        raise SnapshotFormatError(
            f"not a graphir snapshot: the first line should be {HEADER!r}", 1
        )
    if match.group(1) != str(FORMAT_VERSION):
        raise SnapshotFormatError(
            f"written in graphir format version {match.group(1)}; this pytest-graphir "
            f"reads version {FORMAT_VERSION}", 1
        )
    stripped = text.rstrip("\n").rsplit("\n", 1)
    if len(stripped) < 2 or stripped[-1].strip() != END:
        raise SnapshotFormatError(
            f"truncated: the last line should be {END!r}", text.rstrip("\n").count("\n") + 1
        )
    try:
        doc = yaml.load(text, Loader=_Loader)
    except SnapshotFormatError:
        raise
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise SnapshotFormatError(f"invalid YAML: {exc.problem or exc}", line) from None
    except yaml.YAMLError as exc:
        raise SnapshotFormatError(f"invalid YAML: {exc}") from None
    _validate(doc, text)
    return doc  # type: ignore[no-any-return]


def _line_of(text: str, key: str) -> int | None:
    for i, line in enumerate(text.splitlines(), 1):
        if line.startswith(key + ":") or line.startswith(f"  {key}:"):
            return i
    return None


def _validate(doc: Any, text: str) -> None:
    if not isinstance(doc, dict):
        raise SnapshotFormatError("the document should be a mapping of sections", 3)
    for section in SECTIONS:
        if section not in doc:
            raise SnapshotFormatError(f"missing section {section!r}")
        if not isinstance(doc[section], dict):
            raise SnapshotFormatError(
                f"section {section!r} should be a mapping", _line_of(text, section)
            )
    for section in OPTIONAL_SECTIONS:
        if section in doc:
            kind = list if section in SEQUENCE_SECTIONS else dict
            if not isinstance(doc[section], kind):
                raise SnapshotFormatError(
                    f"section {section!r} should be a {'list' if kind is list else 'mapping'}",
                    _line_of(text, section))
    unknown = set(doc) - set(SECTIONS) - set(OPTIONAL_SECTIONS)
    if unknown:
        name = sorted(unknown)[0]
        raise SnapshotFormatError(f"unknown section {name!r}", _line_of(text, name))
    for section in ("inputs", "nodes", "outputs", *[s for s in OPTIONAL_SECTIONS
                                                     if isinstance(doc.get(s), dict)]):
        for name in doc[section]:
            if not isinstance(name, str):
                raise SnapshotFormatError(f"{section}: key {name!r} should be a string",
                                          _line_of(text, f"{name}"))
    for section in SEQUENCE_SECTIONS:
        for item in doc.get(section) or []:
            if not isinstance(item, str):
                raise SnapshotFormatError(f"{section}: entry {item!r} should be a string",
                                          _line_of(text, section))
    for name, node in doc["nodes"].items():
        if (not isinstance(node, dict) or not ({"op", "module"} & set(node))
                or not isinstance(node.get("out", []), list)):
            raise SnapshotFormatError(
                f"node {name!r} should be a mapping with 'op' or 'module' and an 'out' list",
                _line_of(text, str(name)),
            )
