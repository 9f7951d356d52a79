"""Which of the model's modules a Python frame belongs to, and graph-break reasons cleaned.

Dynamo compiles frames, not modules. To put a graph, or a graph break, at a module
path, two facts are read off the running interpreter:

* the *frame root*: walking the Python stack outward from a point inside a compile
  (or a compiled graph's call), the first frame whose first argument is one of the
  model's modules. A module's ``forward`` frame (and its ``torch_dynamo_resume_in_*``
  continuations, called from it) finds that module; a compile of a module's forward is
  entered from ``Module._call_impl``, whose ``self`` is that module.
* the *code owner*: a break's user stack names functions by file, name and line; the
  model's modules whose class defines a function with that code are candidates, and
  the frame root narrows them down to one instance in all but unusual cases.

Reasons from ``torch._dynamo.utils.counters["graph_break"]`` are multi-line texts with
file paths, line numbers and hints; :func:`clean_reason` keeps the headline, the first
line of the explanation and the graph-break site code (``gb0170``), and
:func:`readable_path` makes a source file a path a reader can open.
"""

from __future__ import annotations

import os
import re
import types
import weakref
from collections.abc import Iterable
from typing import Any

import torch

MAX_REASON = 240
"""Longest cleaned reason kept (characters)."""

_GB_CODE = re.compile(r"/gb/(gb\d+)\.html")
_FILE = re.compile(r"File \"[^\"]*\"")
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:[\\/][\w.\-<>]+)+\.pyc?")
_LINE = re.compile(r"\bline \d+")
AT_LINE = re.compile(r"_at_\d+")
"""The line number in a Dynamo frame name (``torch_dynamo_resume_in_forward_at_17``)."""
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
_SPACES = re.compile(r"\s+")


def scrub(text: str) -> str:
    """Remove what differs between machines: file paths, line numbers, addresses."""
    text = _FILE.sub('File "<file>"', text)
    text = _PATH.sub("<file>", text)
    text = _LINE.sub("line <n>", text)
    text = AT_LINE.sub("", text)
    text = _ADDRESS.sub("0x?", text)
    return _SPACES.sub(" ", text).strip()


def clean_reason(reason: str) -> str:
    """Return a one-line, machine-independent form of a Dynamo graph-break reason.

    Args:
        reason: a key of ``counters["graph_break"]`` or a
            ``GraphCompileReason.reason``, e.g. ``"Data-dependent branching\\n
            Explanation: Detected data-dependent branching (e.g. ...). Dynamo does not
            ...\\n  Hint: ...\\n For more details ... /gb/gb0170.html"``.

    Returns:
        ``"Data-dependent branching: Detected data-dependent branching (e.g. `if
        my_tensor.sum() > 0:`). Dynamo does not support tracing dynamic control
        flow. [gb0170]"``: the headline, the first line of the explanation, and the
        graph-break site code when the reason has one. No paths, line numbers or
        addresses.
    """
    lines = [line.strip() for line in reason.strip().splitlines()]
    head = lines[0] if lines else ""
    explanation = next((x[12:].strip() for x in lines[1:] if x.startswith("Explanation:")), "")
    text = scrub(head)
    if explanation and explanation not in head:
        text = f"{text}: {scrub(explanation)}"
    if len(text) > MAX_REASON:
        text = text[: MAX_REASON - 3].rstrip() + "..."
    code = _GB_CODE.search(reason)
    if code:
        text = f"{text} [{code.group(1)}]"
    return text


def module_paths(model: torch.nn.Module) -> dict[int, str]:
    """``id(module) -> module path`` for every module of ``model`` (``""`` for the model);
    a module reachable under two names keeps the first, as in the eager trace."""
    return {id(m): path for path, m in model.named_modules()}


def frame_root(frame: types.FrameType | None, paths: dict[int, str]) -> str | None:
    """Walk outward from ``frame`` to the first frame whose first argument is a module
    in ``paths``; return that module's path, or None when no frame has one."""
    while frame is not None:
        code = frame.f_code  # co_argcount counts positional-only arguments too
        first = frame.f_locals.get(code.co_varnames[0]) if code.co_argcount else None
        if isinstance(first, torch.nn.Module) and id(first) in paths:
            return paths[id(first)]
        frame = frame.f_back
    return None


def _codes(func: Any) -> Iterable[types.CodeType]:
    """Code objects of a function and of what it wraps (``functools.wraps`` chains)."""
    for _ in range(8):  # a bounded walk, in case a __wrapped__ chain loops
        if isinstance(func, (staticmethod, classmethod)):
            func = func.__func__
        code = getattr(func, "__code__", None)
        if isinstance(code, types.CodeType):
            yield code
        func = getattr(func, "__wrapped__", None)


_CLASS_CODES: weakref.WeakKeyDictionary[type, tuple[tuple[str, str, int, int], ...]] = (
    weakref.WeakKeyDictionary()
)


def _class_codes(cls: type) -> tuple[tuple[str, str, int, int], ...]:
    """``(filename, name, first line, last line)`` of every function a module class
    defines (its own and inherited, ``nn.Module`` itself excluded); cached per class."""
    if cls not in _CLASS_CODES:
        out: list[tuple[str, str, int, int]] = []
        for klass in cls.__mro__:
            if klass is torch.nn.Module or klass is object:
                continue
            for value in vars(klass).values():
                for code in _codes(value):
                    lines = (line for _, _, line in code.co_lines() if line is not None)
                    last = max(lines, default=code.co_firstlineno)
                    out.append((code.co_filename, code.co_name, code.co_firstlineno, last))
        _CLASS_CODES[cls] = tuple(out)
    return _CLASS_CODES[cls]


def code_owners(
    model_modules: dict[str, torch.nn.Module], filename: str, name: str, lineno: int | None
) -> list[str]:
    """Module paths whose class defines the function at ``filename``/``name``/``lineno``."""
    return [
        path
        for path, module in model_modules.items()
        if any(
            (f, n) == (filename, name) and (lineno is None or first <= lineno <= last)
            for f, n, first, last in _class_codes(type(module))
        )
    ]


def within(path: str, root: str) -> bool:
    """True when module ``path`` is ``root`` or inside it."""
    return not root or path == root or path.startswith(root + ".")


def rebase(scope: str, base: str | None, root: str | None) -> str:
    """Move ``scope`` from under module ``base`` to under module ``root`` (left where it
    is when either is unknown, None).

    A graph compiled for ``blocks.0`` and reused for ``blocks.1`` (Dynamo caches per
    code object) records ``blocks.0.fc``; run for ``blocks.1`` it is ``blocks.1.fc``.
    """
    if base is None or root is None or base == root:
        return scope
    if scope == base:
        return root
    if base and scope.startswith(base + "."):
        return root + scope[len(base) :]
    return scope


def readable_path(filename: str) -> str:
    """A path a reader can open: relative to its site-packages directory
    (``transformers/masking_utils.py``) or to the working directory, else absolute."""
    path = os.path.abspath(filename)
    norm = path.replace("\\", "/")
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in norm:
            return norm.rsplit(marker, 1)[1]
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return path
    return path if rel.startswith("..") else rel
