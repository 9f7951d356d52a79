"""Options, the ``graphir`` marker and the ``graphir_snapshot`` fixture.

The fixture builds syrupy's snapshot assertion with the graphir extension, handing
it one frozen settings object of this test's options (tolerance, diff length, size
limit, where received files and reports go).
Loading this module imports neither torch nor the comparison code: the fixture
imports them when a test first uses it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import pytest
from syrupy.assertion import SnapshotAssertion

from ..defaults import MARKER_OPTIONS, OPTIONS
from ..extension.received import add_received_options, received_target, report_dir
from .summary import FAILURES


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--graphir-update``, ``--graphir-report``, ``--graphir-received`` and the
    ini options.

    Implements https://docs.pytest.org/en/stable/reference/reference.html#pytest.hookspec.pytest_addoption
    """
    group = parser.getgroup("graphir", "graph snapshots of PyTorch models (pytest-graphir)")
    group.addoption(
        "--graphir-update",
        action="store_true",
        help="rewrite graphir snapshots that differ or are missing; other syrupy "
        "snapshots are left alone (syrupy's --snapshot-update rewrites all)",
    )
    for name, option in OPTIONS.items():
        kind: Literal["float", "int"] = "float" if isinstance(option.default, float) else "int"
        parser.addini(f"graphir_{name}", option.help, type=kind, default=option.default)
    add_received_options(parser, group)


def usage_error(message: str) -> BaseException:
    """The failure of a mistake in the test's options, to raise (``from None``): pytest
    shows ``message`` alone, no traceback through the plugin, and the test errors at
    set-up (``pytest.fail(..., pytrace=False)``)."""
    return pytest.fail.Exception(f"graphir: {message}", pytrace=False)


def ini_option(config: pytest.Config, name: str) -> Any:
    """Ini option ``graphir_<name>`` (ini file, ``pyproject.toml`` or ``-o``), checked
    by its :data:`~pytest_graphir.defaults.OPTIONS` entry.

    Raises:
        pytest.UsageError: one line naming the option, its value and what it should be.
    """
    try:
        value = config.getini(f"graphir_{name}")
    except (pytest.UsageError, ValueError, TypeError) as exc:  # pytest's own conversion
        raise pytest.UsageError(f"ini option graphir_{name}: {exc}") from None
    try:
        return OPTIONS[name].check(value)
    except ValueError as exc:
        raise pytest.UsageError(f"ini option graphir_{name} = {value!r}: {exc}") from None


def _option(request: pytest.FixtureRequest, given: dict[str, Any], name: str) -> Any:
    """Option ``name`` of this test: the marker's value (in ``given``, its keywords),
    else the ini option's, checked by its :data:`~pytest_graphir.defaults.OPTIONS`
    entry; a bad marker value fails the test naming it (:func:`usage_error`)."""
    value = given.get(name)
    if value is None:
        return ini_option(request.config, name)
    try:
        return OPTIONS[name].check(value)
    except ValueError as exc:
        raise usage_error(
            f"@pytest.mark.graphir({name}={value!r}) on {request.node.nodeid}: {exc}"
        ) from None


MARKER_LINE = (
    f"graphir({', '.join(f'{name}=None' for name in MARKER_OPTIONS)}): per-test options "
    "of graphir_snapshot, overriding the graphir_* ini options"
)
"""The ``graphir`` marker as ``pytest --markers`` lists it."""


@pytest.fixture
def graphir_snapshot(snapshot: Any, request: pytest.FixtureRequest) -> Any:
    """A syrupy snapshot of a model's graph IR, stored as ``__snapshots__/<module>/<test>.graphir``.

    Example::

        from pytest_graphir import init_by_name, trace

        def test_gpt2(graphir_snapshot):
            ids = torch.randint(0, 50257, (1, 16), generator=torch.Generator().manual_seed(0))
            model = init_by_name(GPT2LMHeadModel(GPT2Config(n_layer=2)).eval())
            assert trace(model, ids) == graphir_snapshot

    The first run fails (no snapshot); ``pytest --graphir-update`` writes it; later
    runs fail when a node is added, removed or changed, or when a statistic drifts
    beyond ``|a - b| <= atol + rtol * max(|min|, |max|, std)``.

    Before the test body runs, ``torch.manual_seed(graphir_seed)`` is called so the
    random weights a test builds are the same on every run. Per test, override the
    ini options with ``@pytest.mark.graphir(rtol=1e-2, atol=1e-4, seed=1)``; per node-name
    pattern, ``tolerances={"lm_head/*": {"rtol": 1e-2}}``, and nodes left out of the
    comparison, ``ignore=["*.dropout/*"]`` (:func:`fnmatch.fnmatchcase` on node names).

    It is syrupy's ``snapshot`` fixture with ``GraphIRExtension``, built as a
    :class:`~pytest_graphir.extension.syrupy_extension.GraphIRSnapshotAssertion` from this test's
    :class:`~pytest_graphir.extension.syrupy_extension.GraphIRSettings`; under
    ``--graphir-update`` its ``update_snapshots`` flag is set, so only graphir
    snapshots are rewritten.

    On a failed comparison the snapshot this run produced is kept as
    ``<snapshot>.graphir.received`` (``--graphir-report=DIR`` /
    ``--graphir-received=beside``); a later passing run or update removes it. An
    update also removes the temporary files a killed update left beside the snapshot
    (:func:`~pytest_graphir.extension.files.remove_stale_temporaries`).

    A ``graphir`` marker with a positional or unknown argument, or a value that is
    not of its kind (a tolerance not a number from 0 to 1, a seed outside
    ``0 .. 2**64 - 1``, ``ignore`` not patterns), errors the test with one message
    naming it (:func:`usage_error`); bad ini options stop pytest at start-up
    (:func:`ini_option`, from ``pytest_configure``); a pattern that matches no node,
    or ignore patterns that match every node, fail the comparison naming them
    (:meth:`~pytest_graphir.compare.Tolerance.check_patterns`).
    """
    import difflib

    from ..compare import Tolerance
    from ..compare.message import MARKER_MORE_HINT, MORE_HINT
    from ..extension.syrupy_extension import (
        GraphIRExtension,
        GraphIRSettings,
        GraphIRSnapshotAssertion,
    )

    node, config = request.node, request.config
    # positional or unknown marker arguments are refused, naming the argument, the
    # valid ones and a close match (``rtoll`` -> ``rtol``)
    valid = ", ".join(MARKER_OPTIONS)
    for marker in node.iter_markers("graphir"):
        if marker.args:
            raise usage_error(
                f"@pytest.mark.graphir{marker.args!r} on {node.nodeid}: positional "
                f"argument(s) are not accepted; valid: {valid} (as keywords, e.g. "
                "@pytest.mark.graphir(rtol=1e-2))"
            )
        for key in marker.kwargs:
            if key not in MARKER_OPTIONS:
                close = difflib.get_close_matches(key, MARKER_OPTIONS, n=1)
                hint = f"; did you mean {close[0]}=?" if close else ""
                raise usage_error(
                    f"@pytest.mark.graphir on {node.nodeid}: unknown argument {key}; "
                    f"valid: {valid}{hint}"
                )
    marker = node.get_closest_marker("graphir")
    given = marker.kwargs if marker is not None else {}
    try:
        tolerance = Tolerance.build(
            rtol=_option(request, given, "rtol"),
            atol=_option(request, given, "atol"),
            tolerances=given.get("tolerances"),
            ignore=given.get("ignore"),
        )
    except ValueError as exc:
        raise usage_error(f"@pytest.mark.graphir on {node.nodeid}: {exc}") from None
    update = snapshot.update_snapshots or bool(config.getoption("graphir_update"))
    settings = GraphIRSettings(
        tolerance=tolerance,
        max_diff_lines=_option(request, given, "max_diff_lines"),
        # the marker's limit wins over the ini option: its message says so
        more_hint=MORE_HINT if given.get("max_diff_lines") is None else MARKER_MORE_HINT,
        max_snapshot_bytes=_option(request, given, "max_snapshot_bytes"),
        updating=update or snapshot.update_new_snapshots_only,
        test_id=node.nodeid,
        received=received_target(config),
        report_dir=report_dir(config),
        rootdir=config.rootpath,
        failures=node.stash.setdefault(FAILURES, []),
    )
    import torch

    torch.manual_seed(_option(request, given, "seed"))
    # the arguments of syrupy's assertion (a dataclass, as the subclass is), but two
    fields = dataclasses.fields(SnapshotAssertion)
    args = {f.name: getattr(snapshot, f.name) for f in fields if f.init}
    args.update(extension_class=GraphIRExtension, update_snapshots=update)
    return GraphIRSnapshotAssertion(**args, settings=settings)
