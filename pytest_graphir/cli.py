"""The ``graphir`` command: read, diff and draw ``.graphir`` snapshots without pytest.

::

    graphir show FILE [--depth N] [--stats]      torchinfo-like summary of a snapshot
    graphir diff OLD NEW [--max-lines N] [--all] [--rtol R] [--atol A]
                                                 the change list of a test failure, complete
                                                 (--all: every drifting value, ungrouped)
    graphir html [OLD] NEW -o out.html           the HTML graph report (OLD NEW as for diff;
                                                 one FILE: that snapshot alone)
    graphir git-diff PATH OLD-FILE OLD-HEX OLD-MODE NEW-FILE NEW-HEX NEW-MODE
                                                 git's external diff calling convention
    graphir migrate FILE...                      rewrite format-1 (YAML) snapshots in the
                                                 current format, same graph, same values

``OLD`` (and ``FILE``) may be a git revision spec, ``REV:path`` (``HEAD~1:tests/
__snapshots__/test_m/test_a.graphir``; ``REV:./name`` for a path relative to the
current directory), read with ``git show``.

Exit status of ``diff``: 0 equal within tolerance, 1 different, 2 a file that is
missing or not a valid snapshot (the message names the file and line); of
``migrate``: 0, or 2 at the first file it cannot convert (those before it are done). ``git-diff``
exits 0 whenever it could print a diff, as git requires of an external diff command.

Argument parsing is the standard library's :mod:`argparse`; colour comes from
``rich`` (colour only on a terminal; ``NO_COLOR`` and ``FORCE_COLOR`` respected).
Nothing here imports torch.
"""

from __future__ import annotations

import argparse
import difflib
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .compare import Comparison, Tolerance, compare
from .compare import message as text
from .compare.sections import communication, communication_table
from .defaults import MAX_TOLERANCE, OPTIONS, tolerance
from .ir import FORMAT_VERSION, describe
from .names import aligned, fmt, plural
from .serialize import FORMAT_1_READ_BY_MIGRATE, SnapshotFormatError, decode, loads, upgrade

EXIT_EQUAL, EXIT_DIFFER, EXIT_BAD_FILE = 0, 1, 2
STYLE = {
    "summary": "bold",
    "added": "green",
    "removed": "red",
    "changed": "yellow",
    "drift": "cyan",
    "aside": "dim",
}
GIT_DIFF_ARGS = 7


class BadFile(Exception):
    """A snapshot that cannot be read: ``str()`` is ``<file>[:<line>]: <reason>``."""


def _read(spec: str) -> bytes:
    """Bytes of ``spec``: a file, ``-`` (standard input) or a git ``REV:path``."""
    if spec == "-":
        return sys.stdin.buffer.read()
    path = Path(spec)
    if path.is_file():
        return path.read_bytes()
    if ":" in spec and not path.exists():
        try:
            done = subprocess.run(["git", "show", spec], capture_output=True)
        except FileNotFoundError:
            raise BadFile(
                f"{spec}: git is not installed, so a REV:path spec cannot be read"
            ) from None
        if done.returncode != 0:
            lines = done.stderr.decode(errors="replace").strip().splitlines() or ["failed"]
            raise BadFile(f"{spec}: `git show {spec}` failed: {lines[-1]}")
        return done.stdout
    raise BadFile(
        f"{spec}: no such file (for a file in git history, write REV:path, "
        "e.g. HEAD~1:tests/__snapshots__/test_m/test_a.graphir)"
    )


def load(spec: str, read: Any = loads) -> Any:
    """Read and parse one snapshot.

    Args:
        spec: a file path, ``-`` for standard input, or ``REV:path`` (``git show``).
        read: what reads the text (:func:`~pytest_graphir.serialize.loads`, or
            :func:`~pytest_graphir.serialize.upgrade` for ``migrate``).

    Returns:
        What ``read`` returns: the snapshot document.

    Raises:
        BadFile: missing, unreadable, not UTF-8 or invalid (see
            :class:`~pytest_graphir.serialize.SnapshotFormatError`); the message
            names the file and, where known, the line.
    """
    try:
        return read(decode(_read(spec)))
    except OSError as exc:
        raise BadFile(f"{spec}: {exc.strerror or exc}") from None
    except SnapshotFormatError as exc:
        where = f"{spec}:{exc.line}" if exc.line else spec
        raise BadFile(f"{where}: {exc.reason}") from None


# -- output ----------------------------------------------------------------------------


Out = Callable[..., None]
"""Prints one line (``out(value="", style=None)``), in ``style`` where colour is on."""


def output(color: bool | None = None) -> Out:
    """Coloured lines on a terminal (``rich``), plain text elsewhere."""
    from rich.console import Console

    # on sys.stdout as it is at each write; rich turns colour off when it is not a
    # terminal, and honours NO_COLOR / FORCE_COLOR; soft_wrap keeps long lines whole
    console = Console(
        highlight=False,
        soft_wrap=True,
        emoji=False,
        markup=False,
        no_color=True if color is False else None,
        force_terminal=True if color else None,
    )
    return lambda value="", style=None: console.print(value, style=style)


def print_comparison(
    out: Out, result: Comparison, max_lines: int, hint: str, grouped: bool = True
) -> None:
    """:meth:`~pytest_graphir.compare.Comparison.lines` (``max_lines`` change lines, 0 =
    all; drift grouped unless ``grouped`` is false), coloured by kind."""
    for line, kind in result.kinds_of_lines(max_lines, hint, grouped):
        out(line, STYLE.get(kind))


# -- show ------------------------------------------------------------------------------


def _per_dim(value: Any) -> str:
    """One value per mesh dimension (placements, the mesh's dimension names):
    ``["S(0)"]`` -> ``S(0)``; ``["S(0)", "R"]`` (a 2-D mesh) -> ``(S(0), R)``."""
    if isinstance(value, list):
        inner = ", ".join(map(fmt, value))
        return inner if len(value) == 1 else f"({inner})"
    return fmt(value)


def plan_line(entry: dict[str, Any]) -> str:
    """One module's ``plan`` entry on one line, its parts ``; ``-separated: the
    tensor-parallel style(s) with their non-default fields
    (``ColwiseParallel(input_layouts=[S(0)])``), ``mesh tp: weight S(0), bias S(0)`` (the mesh's
    dimension names, then each DTensor parameter's placements), ``FSDP unit
    (reshard_after_forward=true, param_dtype=bfloat16)``, ``wrapper CheckpointWrapper``;
    a key this does not know as ``key=value``."""
    parts = []
    rest = {
        k: v for k, v in entry.items() if k not in ("style", "mesh", "params", "fsdp", "wrapper")
    }
    if "style" in entry:
        style = entry["style"]
        if isinstance(style, list):  # several: each one's fields under its name
            parts.append(" + ".join(f"{n}{_fields(rest.pop(str(n), {}))}" for n in style))
        else:  # one: its fields beside it
            parts.append(f"{style}{_fields(rest)}")
            rest = {}
    if "params" in entry or "mesh" in entry:
        params = entry.get("params")
        placed = (
            ", ".join(f"{n} {_per_dim(p)}" for n, p in params.items())
            if isinstance(params, dict)
            else fmt(params)
        )
        parts.append(f"mesh {_per_dim(entry.get('mesh'))}" + f": {placed}" * bool(params))
    if "fsdp" in entry:
        parts.append(f"FSDP unit {_fields(entry['fsdp'])}".rstrip())
    if "wrapper" in entry:
        parts.append(f"wrapper {fmt(entry['wrapper'])}")
    parts += [f"{k}={fmt(v)}" for k, v in rest.items()]
    return "; ".join(parts)


def _fields(values: Any) -> str:
    """A style's non-default fields, ``(input_layouts=[S(0)])``; empty when none."""
    items = values.items() if isinstance(values, dict) else ()
    shown = ", ".join(f"{k}={fmt(v)}" for k, v in items)
    return f"({shown})" if shown else ""


def cmd_show(ns: argparse.Namespace, out: Out) -> int:
    """``graphir show``: a torchinfo-like summary of one snapshot: model and file, the
    summary ``repr(graph)`` shows too (:func:`~pytest_graphir.ir.describe`: call,
    module tree, op totals, sections; ``--depth``: deepest module level shown, 0: all;
    ``--stats``: mean/std/min/max of each module's first output), a parallel model's
    ``plan`` (one line per module path, :func:`plan_line`) and communication table
    (per module, phase, op and group:
    :func:`~pytest_graphir.compare.sections.communication`)."""
    doc = load(ns.file)
    out(f"{doc.get('meta', {}).get('model', '?')}  ({ns.file})", "bold")
    describe(doc, out, ns.depth, ns.stats)
    if plan := doc.get("plan"):  # one line per module path
        out()
        out(f"plan: {plural(len(plan), 'module')}", "bold")
        width = max(len(path) for path in plan)  # loads: every key is a string
        for path, entry in plan.items():
            line = plan_line(entry) if isinstance(entry, dict) else fmt(entry)
            out(f"  {path.ljust(width)}  {line}")
    # the communication table, headed by the totals; "collectives: none" for a
    # snapshot whose collectives section is empty and whose forward has none; nothing
    # for a model that is not distributed
    comms = communication(doc)
    if comms or "collectives" in doc:
        calls, sent = sum(r[4] for r in comms), sum(r[5] for r in comms)
        shown = f"{plural(calls, 'call')}, {text.human_bytes(sent)}" if comms else "none"
        out()
        out(f"collectives: {shown}", "bold")
        if comms:
            table = [[f"  {module}", *rest] for module, *rest in communication_table(comms)]
            for i, line in enumerate(aligned(table, right=frozenset({4, 5}))):
                out(line, "bold" if i == 0 else None)
    return EXIT_EQUAL


# -- commands --------------------------------------------------------------------------


def cmd_diff(ns: argparse.Namespace, out: Out) -> int:
    """``graphir diff``: 0 equal within tolerance, 1 different."""
    result = compare(load(ns.old), load(ns.new), Tolerance(rtol=ns.rtol, atol=ns.atol))
    out(f"--- {ns.old}", "red")
    out(f"+++ {ns.new}", "green")
    hint = "use --max-lines 0 to see them all" if ns.max_lines else "use --all for every line"
    # --all: every line, drift not grouped, so nothing is left out for the hint to name
    print_comparison(out, result, 0 if ns.all else ns.max_lines, hint, grouped=not ns.all)
    return EXIT_DIFFER if result else EXIT_EQUAL


def cmd_html(ns: argparse.Namespace, out: Out) -> int:
    """``graphir html``: write the report of ``NEW`` against ``OLD`` (the order of
    ``graphir diff``), or of one snapshot alone."""
    if len(ns.files) > 2:
        raise BadFile(f"{ns.files[2]}: graphir html takes OLD NEW or one FILE, not {len(ns.files)}")
    old = load(ns.files[0]) if len(ns.files) == 2 else None
    new = load(ns.files[-1])
    result = compare(old, new, Tolerance(rtol=ns.rtol, atol=ns.atol)) if old else None
    note = text.summary(result) if result else ""
    from .extension.files import write_atomic
    from .report import render_html

    title = f"{new.get('meta', {}).get('model', 'graph')}: {ns.files[-1]}"
    changes = result.changes if result else ()
    write_atomic(Path(ns.output), render_html(new, old, changes, title=title, tolerance_note=note))
    out(f"graphir: wrote {Path(ns.output)}" + (f" ({note})" if note else ""))
    return EXIT_EQUAL


def cmd_git_diff(ns: argparse.Namespace, out: Out) -> int:
    """``graphir git-diff``: git's external diff convention (``diff.graphir.command``).

    git passes ``path old-file old-hex old-mode new-file new-hex new-mode``; an added
    or deleted file is ``/dev/null``. Prints the semantic diff; a side that is not a
    valid snapshot falls back to a line diff. Exits 0 (git aborts on any other status).
    """
    out(f"graphir diff a/{ns.path} b/{ns.path}", "bold")
    if os.devnull in (ns.old_file, ns.new_file):
        added = ns.old_file == os.devnull
        state = "new snapshot" if added else "deleted snapshot"
        try:
            doc = load(ns.new_file if added else ns.old_file)
            nodes, model = doc.get("nodes", {}), doc.get("meta", {}).get("model", "?")
            n_ops = sum("op" in v for v in nodes.values())
            out(f"{state}: {model}, {len(nodes)} nodes ({n_ops} ops)", "green" if added else "red")
        except BadFile as exc:
            out(f"{state} ({exc})")
        return EXIT_EQUAL
    try:
        old, new = load(ns.old_file), load(ns.new_file)
    except BadFile as exc:
        out(f"graphir: {exc}; showing a line diff", "red")
        a = Path(ns.old_file).read_text(encoding="utf-8", errors="replace").splitlines()
        b = Path(ns.new_file).read_text(encoding="utf-8", errors="replace").splitlines()
        for line in difflib.unified_diff(a, b, f"a/{ns.path}", f"b/{ns.path}", lineterm=""):
            out(line)
        return EXIT_EQUAL
    result = compare(old, new, Tolerance(rtol=ns.rtol, atol=ns.atol))
    print_comparison(out, result, ns.max_lines, "run `graphir diff` with --max-lines 0")
    return EXIT_EQUAL


def _tolerance(text: str) -> float:
    """A ``--rtol``/``--atol`` value, checked as every tolerance is
    (:func:`~pytest_graphir.defaults.tolerance`).

    Raises:
        argparse.ArgumentTypeError: not a number from 0 to ``MAX_TOLERANCE``, so
            argparse's usage error names the flag and the accepted range.
    """
    try:
        return tolerance(float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected a number from 0 to {MAX_TOLERANCE:g}"
        ) from None


def cmd_migrate(ns: argparse.Namespace, out: Out) -> int:
    """``graphir migrate``: rewrite each format-1 file in the current format
    (:func:`~pytest_graphir.serialize.upgrade`), as ``--graphir-update`` writes a
    snapshot (temporary file, ``os.replace``, mode kept); a file already in the
    current format is left as it is."""
    from .extension.files import replaceable_mode, write_atomic

    for path in map(Path, ns.files):
        if not path.is_file():  # not a git revision or stdin: the file is rewritten
            raise BadFile(f"{path}: no such file")
        try:
            load(str(path))
            out(f"graphir: {path} is in format {FORMAT_VERSION} already")
        except BadFile as exc:
            if FORMAT_1_READ_BY_MIGRATE not in str(exc):
                raise
            write_atomic(path, load(str(path), upgrade), replaceable_mode(path))
            out(f"graphir: migrated {path} to format {FORMAT_VERSION}")
    return EXIT_EQUAL


def _tolerance_args(p: argparse.ArgumentParser) -> None:
    for name in ("rtol", "atol"):
        default = OPTIONS[name].default
        p.add_argument(
            f"--{name}",
            type=_tolerance,
            default=default,
            help=f"{OPTIONS[name].help}, as the ini option graphir_{name} (default {default:g})",
        )


def parser() -> argparse.ArgumentParser:
    """The ``graphir`` argument parser (``argparse``, one sub-parser per command)."""
    top = argparse.ArgumentParser(
        prog="graphir",
        description="Read, diff and draw .graphir model-graph snapshots.",
        epilog="FILE/OLD/NEW: a path, '-' for stdin, or a git REV:path "
        "(e.g. HEAD~1:tests/__snapshots__/test_m/test_a.graphir).",
    )
    top.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="colour output (auto: on a terminal unless NO_COLOR is set)",
    )
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("show", help="summary of a snapshot: module tree, ops, shapes")
    p.add_argument("file", metavar="FILE")
    p.add_argument(
        "--depth", type=int, default=3, help="module tree levels shown (default 3, 0 = all)"
    )
    p.add_argument(
        "--stats", action="store_true", help="add mean/std/min/max of each module's first output"
    )
    p.set_defaults(run=cmd_show)
    p = sub.add_parser(
        "diff", help="the changes between two snapshots (exit 0 equal, 1 different, 2 bad file)"
    )
    p.add_argument("old", metavar="OLD")
    p.add_argument("new", metavar="NEW")
    p.add_argument("--max-lines", type=int, default=0, help="change lines shown (default 0 = all)")
    p.add_argument(
        "--all",
        action="store_true",
        help="one line per change, drift not grouped per module (every drifting value)",
    )
    _tolerance_args(p)
    p.set_defaults(run=cmd_diff)
    p = sub.add_parser(
        "html", help="write the HTML graph report of NEW against OLD (as diff), or of one FILE"
    )
    p.add_argument("files", metavar="[OLD] NEW", nargs="+", help="OLD NEW, or one FILE")
    p.add_argument("-o", "--output", required=True, help="the .html file to write")
    _tolerance_args(p)
    p.set_defaults(run=cmd_html)
    p = sub.add_parser("git-diff", help="git external diff driver (diff.graphir.command)")
    for name in ("path", "old_file", "old_hex", "old_mode", "new_file", "new_hex", "new_mode"):
        p.add_argument(name)
    p.add_argument("--max-lines", type=int, default=0, help=argparse.SUPPRESS)
    _tolerance_args(p)
    p.set_defaults(run=cmd_git_diff)
    p = sub.add_parser("migrate", help="rewrite format-1 (YAML) snapshots in the current format")
    p.add_argument("files", metavar="FILE", nargs="+")
    p.set_defaults(run=cmd_migrate)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``graphir``; return the exit status.

    Seven arguments that are not a command are taken as git's external diff call
    (``git config diff.graphir.command graphir``), as if ``git-diff`` came first.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    commands = {"show", "diff", "html", "git-diff", "migrate"}
    if len(args) == GIT_DIFF_ARGS and args[0] not in commands and not args[0].startswith("-"):
        args.insert(0, "git-diff")
    ns = parser().parse_args(args)
    out = output({"always": True, "never": False}.get(ns.color))
    try:
        return int(ns.run(ns, out))
    except BadFile as exc:
        print(f"graphir: {exc}", file=sys.stderr)
        return EXIT_BAD_FILE
    except BrokenPipeError:  # `graphir diff ... | head`
        return EXIT_EQUAL


if __name__ == "__main__":
    sys.exit(main())
