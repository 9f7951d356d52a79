"""``torchrun -m pytest`` and other launchers: every rank runs the whole session.

A launcher (``torchrun``, ``torch.distributed.run``, any that sets ``WORLD_SIZE``,
``MASTER_ADDR`` and ``MASTER_PORT`` and the rank) starts one pytest session per rank.
Every rank compares its snapshots; who writes what is decided here:

* a rank-agnostic snapshot (the default name, or any name but ``rank<r>``) is
  written by rank 0 alone, and under an update only once every rank published the
  same text through the launcher's store (:func:`agree`);
* a per-rank snapshot, ``<test>[rank<r>].graphir`` (``graphir_snapshot.rank(r)``),
  is written by rank ``r``, the process that asserts it (rank 0 writes those of ranks
  the launcher does not have);
* rank 0 alone looks for unused snapshots, and never counts another rank's
  ``[rank<r>]`` files among them.

Whether ranks' texts agree (:func:`disagreement`) and the failure when they do not
(:class:`RanksDisagree`) serve the ranks of one process too
(``assert irs == graphir_snapshot.ranks()``).

The launcher's environment is read here (the rank through
:func:`pytest_graphir.names.launcher_rank`); torch is imported only when ranks
agree through the store, under an update.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from ..names import launcher_rank, plural, writes_snapshots
from .files import SnapshotLocationError

PREFIX = "graphir/"
"""The keys of the launcher's store that graphir uses (``torch.distributed.PrefixStore``)."""
TIMEOUT_VARIABLE = "GRAPHIR_LAUNCHER_TIMEOUT"
"""Environment variable: seconds a rank waits for the others' snapshot text or rank
0's verdict (default :data:`DEFAULT_TIMEOUT`)."""
DEFAULT_TIMEOUT = 120.0
ACCEPT = "rerun the same torchrun command with --graphir-update"
"""How to accept a change under a launcher: every rank must run for rank 0 to write."""
_PER_RANK = re.compile(r"\[rank(\d+)\]$")


def world_size() -> int:
    """The launcher's ``WORLD_SIZE``; 1 when it is not set (no launcher)."""
    value = os.environ.get("WORLD_SIZE", "").strip()
    return int(value) if value.isdecimal() else 1


def launched() -> bool:
    """True under a launcher with more than one rank (``WORLD_SIZE`` > 1)."""
    return world_size() > 1


def snapshot_rank(location: str) -> int | None:
    """The rank of a per-rank snapshot file (``<test>[rank<r>].graphir``), else None."""
    return (m := _PER_RANK.search(Path(location).stem)) and int(m[1])


def owner(location: str) -> int:
    """The rank that accounts for the snapshot at ``location`` under a launcher: ``r``
    for a ``[rank<r>]`` file of a rank the launcher has, else 0."""
    rank = snapshot_rank(location)
    return 0 if rank is None or rank >= world_size() else rank


def writes(location: str) -> bool:
    """Whether this process writes the snapshot at ``location``: everywhere without a
    launcher; under one, rank ``r`` its own ``[rank<r>]`` files and rank 0 the rest.
    A rank set without ``WORLD_SIZE`` (:func:`~pytest_graphir.names.writes_snapshots`)
    leaves writing to rank 0."""
    return owner(location) == launcher_rank() if launched() else writes_snapshots()


def discovers(location: str) -> bool:
    """Whether this process's unused-snapshot detection may count the file at
    ``location``: not on a launcher's rank above 0 (rank 0 reports and deletes, once),
    and on rank 0 not another rank's ``[rank<r>]`` file (that rank asserts it)."""
    return launcher_rank() == 0 == owner(location) if launched() else True


def discovered(found: Any, keep: Callable[[str], bool] = discovers) -> Any:
    """syrupy's discovered snapshot collections ``found`` (a copy) whose location
    ``keep`` accepts; by default without those :func:`discovers` leaves to another rank
    (all of them without a launcher)."""
    kept = type(found)()
    for collection in found:
        if keep(collection.location):
            kept.update(collection)
    return kept


class RankDiscovery:
    """Mixed into a syrupy extension: its ``discover_snapshots`` (syrupy's
    unused-snapshot detection lists the files of the test's module) leaves out those
    another rank of a launcher accounts for (:func:`discovered`): a rank above 0
    reports no unused snapshot, and rank 0 none of another rank's ``[rank<r>]``
    files."""

    def discover_snapshots(self, *, test_location: Any, ignore_extensions: Any = None) -> Any:
        found = super().discover_snapshots(  # type: ignore[misc]
            test_location=test_location, ignore_extensions=ignore_extensions
        )
        return discovered(found)


def accept_advice(default: str) -> str:
    """How to accept a change: ``default`` without a launcher, :data:`ACCEPT` under one."""
    return ACCEPT if launched() else default


def header_line() -> str:
    """The header line of an update under a launcher: who writes what."""
    rank, size = launcher_rank(), world_size()
    own = f"[rank{rank}] snapshots (graphir_snapshot.rank({rank}))"
    shared = "the shared snapshots once every rank's trace agrees"
    if rank:
        return f"graphir: rank {rank} of {size}: writes only its own {own}; rank 0 writes {shared}"
    return f"graphir: rank 0 of {size}: writes {shared}, and its own {own}"


def summary_line(compared: int, written: int) -> str:
    """The terminal summary's line on a launcher's rank above 0: what it did."""
    rank = launcher_rank()
    wrote = f"; wrote {written} of its own ([rank{rank}])" if written else ""
    return (
        f"graphir: rank {rank} compared {plural(compared, 'snapshot')} against rank 0's "
        f"files{wrote}; rank 0 writes the shared ones and finds obsolete ones"
    )


class RanksDisagree(SnapshotLocationError):
    """The ranks' texts of a snapshot shared by all ranks differ (or some rank never
    sent one): nothing was written.

    Raised under a launcher's update, where rank 0 wrote nothing (:func:`agree`), and
    for the ranks of one process asserted against one snapshot
    (``assert irs == graphir_snapshot.ranks()``, ``in_process``), whether or not
    updating.

    Attributes:
        differing: the ranks whose text differs from rank 0's.
        missing: the ranks that sent no text in time.
        detail: the first differing line, rank 0's and the differing rank's
            (:func:`first_difference`).
    """

    def __init__(
        self,
        location: str,
        differing: list[int],
        missing: list[int],
        detail: list[str],
        *,
        in_process: bool = False,
    ) -> None:
        self.differing, self.missing, self.detail = differing, missing, detail
        parts = [f"the trace of {_ranks(differing)} differs from rank 0's"] * bool(differing)
        if missing:
            waited = f"{timeout():g} s ({TIMEOUT_VARIABLE})"
            parts.append(f"{_ranks(missing)} sent no snapshot within {waited}")
        own = "for r, ir in enumerate(irs): " if in_process else ""
        own += f"assert ir == graphir_snapshot.rank({'r' if in_process else 'rank'})"
        shared = "the ranks cannot share one snapshot (nothing written)"
        reason = "; ".join(parts) + ", so " + (shared if in_process else "no rank wrote it")
        fix = (
            f"give each rank its own snapshot: `{own}` (<test>[rank<r>].graphir), or make the "
            "trace the same on every rank"
            if differing
            else "make every rank run the test and assert the snapshot, then " + ACCEPT
        )
        super().__init__(location, reason, fix, verb="use" if in_process else "write")

    def lines(self) -> list[str]:
        """The failure message: what differs where, the first differing line, the fix."""
        first, *rest = super().lines()
        return [first, *(f"  {line}" for line in self.detail), *rest]


def _ranks(ranks: list[int]) -> str:
    """``rank 2``, ``ranks 1, 3``."""
    return f"rank{'s' * (len(ranks) > 1)} " + ", ".join(map(str, ranks))


def timeout() -> float:
    """Seconds to wait for the other ranks (``GRAPHIR_LAUNCHER_TIMEOUT``, default
    :data:`DEFAULT_TIMEOUT`)."""
    try:
        return max(float(os.environ.get(TIMEOUT_VARIABLE, "")), 0.1)
    except ValueError:
        return DEFAULT_TIMEOUT


LINE_SHOWN = 157
"""Characters of a differing line kept in a message, before ``...`` (160 in all)."""


def first_difference(reference: str, other: str, rank: int) -> list[str]:
    """The first line where ``other`` (rank ``rank``'s text) differs from rank 0's
    ``reference``: its number, then rank 0's line and that rank's, each escaped and
    shortened to :data:`LINE_SHOWN` (:func:`pytest_graphir.serialize.checks._shown`)."""
    from ..serialize.checks import _shown  # loads yaml: not when the plugin starts

    a, b = reference.splitlines(), other.splitlines()
    n = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    left, right = (_shown(t[n], LINE_SHOWN) if n < len(t) else "(end of text)" for t in (a, b))
    return [f"first differing line {n + 1}:", f"- rank 0: {left}", f"+ rank {rank}: {right}"]


def disagreement(
    reference: str, others: Mapping[int, str], same: Callable[[str, str], bool]
) -> tuple[list[int], dict[str, list[str]]]:
    """Which ranks' texts of one snapshot differ from rank 0's ``reference``.

    Args:
        reference: rank 0's text.
        others: the other ranks' texts, by rank.
        same: whether two texts agree though not identical (equal within the
            tolerance); called only for texts that are not identical.

    Returns:
        The differing ranks in ascending order, and per differing rank (its number as
        a string, as a verdict in JSON keys it) the first differing line
        (:func:`first_difference`).
    """
    detail = {
        str(rank): first_difference(reference, other, rank)
        for rank, other in sorted(others.items())
        if other != reference and not same(reference, other)
    }
    return list(map(int, detail)), detail


@functools.lru_cache(maxsize=1)
def _store() -> Any:
    """The launcher's store under :data:`PREFIX` and this launch's restart (a restarted
    worker group must not read the last attempt's keys).

    Raises:
        RuntimeError: the store at ``MASTER_ADDR``:``MASTER_PORT`` cannot be reached.
    """
    import torch.distributed as dist

    addr, port = os.environ.get("MASTER_ADDR", ""), os.environ.get("MASTER_PORT", "")
    run = os.environ.get("TORCHELASTIC_RUN_ID", "none")
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    try:
        store = dist.TCPStore(  # type: ignore[attr-defined]
            addr, int(port), is_master=False, timeout=timedelta(seconds=timeout())
        )
    except (RuntimeError, ValueError, OSError) as exc:
        raise RuntimeError(
            f"graphir: cannot reach the launcher's store at MASTER_ADDR={addr!r} "
            f"MASTER_PORT={port!r} (WORLD_SIZE={world_size()}): {exc}; under "
            "--graphir-update the ranks agree through it: run pytest under torchrun, "
            "or unset WORLD_SIZE to run one process"
        ) from None
    return dist.PrefixStore(f"{PREFIX}{run}/{attempt}/", store)  # type: ignore[attr-defined]


_occurrences: dict[str, int] = {}


def agree(location: str, rootdir: Path, text: str, same: Callable[[str, str], bool]) -> None:
    """Under an update, make every rank's text of the rank-agnostic snapshot at
    ``location`` agree before rank 0 writes it.

    Each rank publishes ``text`` to the launcher's store, keyed by the snapshot's
    path below ``rootdir`` and how often this process asserted it; rank 0 waits for
    every rank's text, compares each with its own (``same``: identical, or equal within
    the tolerance) and publishes its verdict, which the other ranks wait for.

    Raises:
        RanksDisagree: on rank 0, when any rank differs or sent nothing in time; on
            another rank, when it differs or rank 0 found a rank missing.
        RuntimeError: the store cannot be reached, or rank 0 gave no verdict in time.
    """
    path, root = Path(location).resolve(), rootdir.resolve()
    name = str(path.relative_to(root) if path.is_relative_to(root) else path)
    seen = _occurrences[name] = _occurrences.get(name, 0) + 1
    key = f"{name}#{seen}"
    store, rank, size = _store(), launcher_rank(), world_size()
    store.set(f"text/{key}/{rank}", text)
    if rank == 0:  # the verdict: who differs (disagreement), who sent nothing in time
        deadline = time.monotonic() + timeout()
        others: dict[int, str] = {}
        for other in range(1, size):
            wanted = f"text/{key}/{other}"
            with contextlib.suppress(RuntimeError):  # else missing: sent nothing in time
                store.wait([wanted], timedelta(seconds=max(deadline - time.monotonic(), 0.01)))
                others[other] = store.get(wanted).decode("utf-8")
        missing = [other for other in range(1, size) if other not in others]
        differing, per_rank = disagreement(text, others, same)
        verdict: dict[str, Any] = {"differing": differing, "missing": missing, "detail": per_rank}
        store.set(f"verdict/{key}", json.dumps(verdict))
    else:
        try:
            store.wait([f"verdict/{key}"], timedelta(seconds=timeout()))
        except RuntimeError:
            raise RuntimeError(
                f"graphir: rank {rank}: rank 0 gave no verdict on {name} within "
                f"{timeout():g} s ({TIMEOUT_VARIABLE}): did rank 0 run this test?"
            ) from None
        verdict = json.loads(store.get(f"verdict/{key}"))
    differing, missing = verdict["differing"], verdict["missing"]
    if (rank == 0 and (differing or missing)) or rank in differing or (rank and missing):
        details: dict[str, list[str]] = verdict["detail"]
        detail = details.get(str(rank)) or next(iter(details.values()), [])
        raise RanksDisagree(location, differing, missing, detail)
