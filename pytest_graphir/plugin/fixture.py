"""Options, the ``graphir`` marker and the ``graphir_snapshot`` fixture.

The fixture builds syrupy's snapshot assertion with the graphir extension and sets
its per-test options (tolerance, diff length, size limit, where received files go).
Loading this module imports neither torch nor the comparison code: the fixture
imports them when a test first uses it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..extension.files import remove_stale_temporaries
from ..extension.received import (
    add_received_options,
    keep_received,
    received_target,
    report_dir,
)
from .summary import FAILURES

_INI: dict[str, tuple[Any, str]] = {
    "graphir_rtol": (
        1e-3,
        "relative tolerance of graphir statistics, as a fraction of "
        "each tensor's magnitude max(|min|, |max|, std)",
    ),
    "graphir_atol": (1e-5, "absolute tolerance of graphir statistics"),
    "graphir_seed": (0, "torch.manual_seed value set before each test using graphir_snapshot"),
    "graphir_max_diff_lines": (30, "change lines shown in a graphir failure (0 = all)"),
    "graphir_max_snapshot_bytes": (
        32 * 2**20,
        "largest .graphir file read, in bytes "
        "(default 32 MiB); a bigger one fails without being read",
    ),
}


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--graphir-update``, ``--graphir-report``, ``--graphir-received`` and the
    ini options.

    Implements https://docs.pytest.org/en/stable/reference/reference.html#pytest.hookspec.pytest_addoption
    """
    group = parser.getgroup("graphir", "graph snapshots of PyTorch models (pytest-graphir)")
    group.addoption(
        "--graphir-update",
        action="store_true",
        default=False,
        dest="graphir_update",
        help="rewrite graphir snapshots that differ or are missing; other syrupy "
        "snapshots are left alone (syrupy's --snapshot-update rewrites all)",
    )
    for name, (default, help_text) in _INI.items():
        if isinstance(default, float):
            parser.addini(name, help_text, type="float", default=default)
        else:
            parser.addini(name, help_text, type="int", default=default)
    add_received_options(parser, group)


MARKER_OPTIONS = ("rtol", "atol", "seed", "max_diff_lines", "tolerances", "ignore")
"""Keyword arguments of ``@pytest.mark.graphir``."""


def _check_graphir_markers(node: pytest.Item) -> None:
    """Reject positional or unknown ``@pytest.mark.graphir`` arguments.

    Raises:
        pytest.UsageError: names the argument, the valid ones and a close match
            (``rtoll`` -> ``rtol``).
    """
    import difflib

    valid = ", ".join(MARKER_OPTIONS)
    for marker in node.iter_markers("graphir"):
        if marker.args:
            raise pytest.UsageError(
                f"@pytest.mark.graphir{marker.args!r} on {node.nodeid}: positional "
                f"argument(s) are not accepted; valid: {valid} (as keywords, e.g. "
                "@pytest.mark.graphir(rtol=1e-2))"
            )
        for key in marker.kwargs:
            if key not in MARKER_OPTIONS:
                close = difflib.get_close_matches(key, MARKER_OPTIONS, n=1)
                hint = f"; did you mean {close[0]}=?" if close else ""
                raise pytest.UsageError(
                    f"@pytest.mark.graphir on {node.nodeid}: unknown argument {key}; "
                    f"valid: {valid}{hint}"
                )


def _option(request: pytest.FixtureRequest, name: str, cast: Any) -> Any:
    marker = request.node.get_closest_marker("graphir")
    if marker is not None and marker.kwargs.get(name) is not None:
        value = marker.kwargs[name]
    else:
        value = request.config.getini(f"graphir_{name}")
    try:
        return cast(value)
    except (TypeError, ValueError):
        raise pytest.UsageError(
            f"graphir option {name}={value!r} is not a valid {cast.__name__}; fix the "
            f"@pytest.mark.graphir({name}=...) marker or the graphir_{name} ini option"
        ) from None


MARKER_LINE = (
    "graphir(rtol=None, atol=None, seed=None, max_diff_lines=None, tolerances=None, "
    "ignore=None): per-test options of graphir_snapshot, overriding the graphir_* ini options"
)
"""The ``graphir`` marker as ``pytest --markers`` lists it."""


@pytest.fixture
def graphir_snapshot(snapshot: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A syrupy snapshot of a model's graph IR, stored as ``__snapshots__/<module>/<test>.graphir``.

    Example::

        from pytest_graphir import trace

        def test_gpt2(graphir_snapshot):
            model = GPT2LMHeadModel(GPT2Config(n_layer=2)).eval()
            ids = torch.randint(0, 50257, (1, 16))
            assert trace(model, ids) == graphir_snapshot

    The first run fails (no snapshot); ``pytest --graphir-update`` writes it; later
    runs fail when a node is added, removed or changed, or when a statistic drifts
    beyond ``|a - b| <= atol + rtol * max(|min|, |max|, std)``.

    Before the test body runs, ``torch.manual_seed(graphir_seed)`` is called so the
    random weights a test builds are the same on every run. Per test, override the
    ini options with ``@pytest.mark.graphir(rtol=1e-2, atol=1e-4, seed=1)``; per node-name
    pattern, ``tolerances={"lm_head/*": {"rtol": 1e-2}}``, and nodes left out of the
    comparison, ``ignore=["*.dropout/*"]`` (:func:`fnmatch.fnmatchcase` on node names).

    It is syrupy's ``snapshot`` fixture with ``GraphIRExtension``
    (as ``snapshot.with_defaults(extension_class=...)`` builds it, as a
    :class:`~pytest_graphir.extension.GraphIRSnapshotAssertion`: short repr, no
    traceback for file problems); under ``--graphir-update``
    its ``update_snapshots`` flag is set, so only graphir snapshots are rewritten.

    On a failed comparison the snapshot this run produced is kept as
    ``<snapshot>.graphir.received`` (``--graphir-report=DIR`` /
    ``--graphir-received=beside``); a later passing run or update removes it. An
    update also removes the temporary files a killed update left beside the snapshot
    (:func:`~pytest_graphir.extension.files.remove_stale_temporaries`).

    Raises:
        pytest.UsageError: a ``graphir`` marker has a positional or unknown argument,
            or an option value of the wrong type.
    """
    from ..compare import Tolerance

    _check_graphir_markers(request.node)

    snap = _graphir_assertion(snapshot, request)
    ext = snap.extension
    marker = request.node.get_closest_marker("graphir")
    try:
        ext.tolerance = Tolerance.build(
            rtol=_option(request, "rtol", float),
            atol=_option(request, "atol", float),
            tolerances=marker.kwargs.get("tolerances") if marker else None,
            ignore=marker.kwargs.get("ignore") if marker else None,
        )
    except ValueError as exc:
        raise pytest.UsageError(f"@pytest.mark.graphir on {request.node.nodeid}: {exc}") from None
    ext.max_diff_lines = _option(request, "max_diff_lines", int)
    if marker is not None and marker.kwargs.get("max_diff_lines") is not None:
        from ..compare.message import MARKER_MORE_HINT

        ext.more_hint = MARKER_MORE_HINT  # the marker wins over the ini option
    ext.expected_location = ext.get_location(test_location=snap.test_location, index=0)
    ext.test_id = request.node.nodeid
    ext.report_dir = report_dir(request.config)
    ext.rootdir = request.config.rootpath
    ext.failures = request.node.stash.setdefault(FAILURES, [])
    _configure_snapshot_files(ext, request, snap.test_location)
    ext.received_dir = received_target(request.config)
    ext.updating = bool(snap.update_snapshots)

    import torch

    torch.manual_seed(_option(request, "seed", int))
    yield snap
    keep_received(request.config, snap)
    if ext.updating:
        for result in snap.executions.values():
            remove_stale_temporaries(Path(result.snapshot_location))


def _graphir_assertion(snapshot: Any, request: pytest.FixtureRequest) -> Any:
    """syrupy's ``snapshot.with_defaults(extension_class=GraphIRExtension)``, built as a
    :class:`~pytest_graphir.extension.GraphIRSnapshotAssertion`."""
    from ..extension.syrupy_extension import GraphIRExtension, GraphIRSnapshotAssertion

    return GraphIRSnapshotAssertion(
        session=snapshot.session,
        extension_class=GraphIRExtension,
        test_location=snapshot.test_location,
        update_snapshots=snapshot.update_snapshots
        or bool(request.config.getoption("graphir_update")),
        update_new_snapshots_only=snapshot.update_new_snapshots_only,
        include=snapshot.include,
        exclude=snapshot.exclude,
        matcher=snapshot.matcher,
    )


def _configure_snapshot_files(ext: Any, request: pytest.FixtureRequest, test_location: Any) -> None:
    """Limits of the snapshot file: size (``graphir_max_snapshot_bytes``), the
    repository that symlinks may not leave (pytest's rootdir), the test id for
    messages about shortened file names."""
    from syrupy.extensions.base import AbstractSyrupyExtension

    limit = _option(request, "max_snapshot_bytes", int)
    if limit <= 0:
        raise pytest.UsageError(
            f"graphir_max_snapshot_bytes = {limit} must be a positive number of bytes; "
            "fix the ini option"
        )
    ext.max_snapshot_bytes = limit
    type(ext).root = str(request.config.rootpath)
    ext.snapshot_name = AbstractSyrupyExtension.get_snapshot_name(test_location=test_location)
