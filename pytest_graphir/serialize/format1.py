"""Reading a format-1 snapshot (YAML flow mappings, written before format 2): PyYAML's
safe loader (:func:`_loads_yaml`), after a scan of the event stream that refuses
anchors, aliases, tags and deep nesting (:func:`_scan_events`)."""

from __future__ import annotations

from typing import Any

import yaml

from .checks import (
    LONG_INTEGER,
    MAX_DEPTH,
    SnapshotFormatError,
    _check_integers,
    _line_column,
    _shown,
    _validate,
)

_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BaseLoader):  # type: ignore[misc]
    """Safe loader that refuses duplicate mapping keys (a hand-edit gone wrong)."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise SnapshotFormatError(f"duplicate key {key!r}", key_node.start_mark.line + 1)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_Loader.add_constructor(
    "tag:yaml.org,2002:map", lambda loader, node: loader.construct_mapping(node)
)


def _loads_yaml(text: str) -> dict[str, Any]:
    """Load a format-1 snapshot (YAML flow mappings, one node per line) with PyYAML's
    safe loader, after :func:`_scan_events` refused anchors, aliases, tags and deep
    nesting; validated as format 2 is."""
    _check_integers(text)
    try:
        key_lines = _scan_events(text)
        doc = yaml.load(text, Loader=_Loader)
    except SnapshotFormatError:
        raise
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise SnapshotFormatError(f"invalid YAML: {exc.problem or exc}", line) from None
    except yaml.reader.ReaderError as exc:
        raise SnapshotFormatError(
            f"invalid YAML: {exc.reason}", _line_column(text, exc.position)[0]
        ) from None
    except yaml.YAMLError as exc:
        raise SnapshotFormatError(f"invalid YAML: {exc}", 1) from None
    except RecursionError:  # pragma: no cover - _scan_events caps the depth first
        raise SnapshotFormatError(f"nested deeper than {MAX_DEPTH} levels", 1) from None
    except ValueError:  # int() past Python's limit, written as YAML's 1_000 or 0x10
        raise SnapshotFormatError(LONG_INTEGER) from None
    _validate(doc, text, key_lines)
    return doc  # type: ignore[no-any-return]


_START = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_END = (yaml.MappingEndEvent, yaml.SequenceEndEvent)


def _scan_events(text: str) -> dict[tuple[str, ...], int]:
    """One pass over the YAML event stream, before anything is constructed.

    Refuses what the format never writes: anchors (``&a``), aliases (``*a``, the
    alias bomb), explicit tags (``!!python/object``), and nesting deeper than
    :data:`MAX_DEPTH`. libyaml's parser keeps its state on the heap, so even a
    file of 10 million ``[`` is refused at the 65th.

    Returns:
        The 1-based line of each top-level key ``(section,)`` and of each key of a
        section's mapping ``(section, name)``, for error messages.

    Raises:
        SnapshotFormatError: one of the above, with its line.
        yaml.YAMLError: the text is not YAML (the caller adds the line).
    """
    lines: dict[tuple[str, ...], int] = {}
    # per open collection: [is_mapping, next_is_key, current key]
    stack: list[list[Any]] = []
    events: Any = yaml.parse(text, Loader=_BaseLoader)
    for event in events:
        kind = type(event)
        if kind is yaml.ScalarEvent or kind in _START:
            if event.anchor is not None:
                raise SnapshotFormatError(
                    f"YAML anchor '&{_shown(event.anchor)}': snapshots never use anchors "
                    "or aliases",
                    event.start_mark.line + 1,
                )
            if (event.tag is not None and kind is not yaml.ScalarEvent) or (
                kind is yaml.ScalarEvent and event.implicit == (False, False)
            ):
                tag = (event.tag or "").replace("tag:yaml.org,2002:", "!!")
                raise SnapshotFormatError(
                    f"YAML tag '{_shown(tag)}': snapshots never use tags", event.start_mark.line + 1
                )
            if stack and stack[-1][0]:  # in a mapping: a key, then its value
                top = stack[-1]
                if top[1]:
                    top[2] = key = event.value if kind is yaml.ScalarEvent else None
                    if key is not None and len(stack) <= 2:
                        path = (key,) if len(stack) == 1 else (stack[0][2], key)
                        lines.setdefault(path, event.start_mark.line + 1)
                top[1] = not top[1]
            if kind is not yaml.ScalarEvent:
                stack.append([kind is yaml.MappingStartEvent, True, None])
                if len(stack) > MAX_DEPTH:
                    raise SnapshotFormatError(
                        f"nested deeper than {MAX_DEPTH} levels: snapshots nest a few levels only",
                        event.start_mark.line + 1,
                    )
        elif kind in _END:
            stack.pop()
        elif kind is yaml.AliasEvent:
            raise SnapshotFormatError(
                f"YAML alias '*{_shown(event.anchor or '')}': snapshots never use anchors "
                "or aliases",
                event.start_mark.line + 1,
            )
    return lines
