"""Side by side: this tree against another revision, on one machine, in alternating rounds.

``bench_zoo.py --against REV`` and ``bench_trace.py --against REV`` call :func:`run`:
REV is checked out into a temporary ``git worktree`` (removed after), its C kernel
built there (``python setup.py build_ext --inplace``), and one long-lived worker
process per side (this benchmark script with ``--worker``, its ``PYTHONPATH`` the
side's tree, so each side imports its own ``pytest_graphir``; the measuring code is
this tree's for both) is asked for one round of one model at a time, the side that
goes first alternating from round to round. Each worker answers with the seconds
(its thread's CPU time: the machine may be shared) of each variant in that round
(:func:`timing.interleaved`, one round, plain and traced runs in one process); the
ratios, their quotient (this tree / REV), medians and spreads (min-max over rounds)
are taken here.

Standard library only in this process; the workers import torch.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

HERE = Path(__file__).resolve().parent
TREE = HERE.parent
"""The tree these benchmarks belong to: the side called ``this``."""


@contextlib.contextmanager
def checkout(rev: str) -> Iterator[Path]:
    """``rev`` in a temporary worktree of this repository, its C kernel built in place;
    the worktree is removed on exit.

    Raises:
        subprocess.CalledProcessError: ``git worktree add`` or the build failed.
    """
    with tempfile.TemporaryDirectory(prefix="graphir-against-") as tmp:
        tree = Path(tmp) / "tree"
        git = ["git", "-C", str(TREE)]
        subprocess.run([*git, "worktree", "add", "--detach", str(tree), rev], check=True)
        try:
            subprocess.run(
                [sys.executable, "setup.py", "build_ext", "--inplace"],
                cwd=tree,
                check=True,
                stdout=subprocess.DEVNULL,
            )
            yield tree
        finally:
            subprocess.run([*git, "worktree", "remove", "--force", str(tree)], check=False)


class Worker:
    """One side: ``script --worker`` with ``PYTHONPATH=tree``, asked one JSON line at a
    time on its stdin, answering one JSON line on its stdout (:func:`serve`)."""

    def __init__(self, script: Path, tree: Path) -> None:
        env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1")
        self.proc = subprocess.Popen(
            [sys.executable, str(script), "--worker"],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.hello = self.ask({})  # which package it imported, and its C kernel

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        """Send ``request``, return the answer.

        Raises:
            RuntimeError: the worker exited (its error is on this process's stderr).
        """
        stdin, stdout = self.proc.stdin, self.proc.stdout
        assert stdin is not None and stdout is not None
        stdin.write(json.dumps(request) + "\n")
        stdin.flush()
        line = stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.proc.args} exited ({self.proc.wait()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait()


def serve(answer: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """The worker's loop: one JSON request per stdin line, ``answer(request)`` as one
    JSON line on the real stdout; anything else the process prints goes to stderr. An
    empty request is answered with the imported package's path and its C kernel."""
    out: IO[str] = sys.stdout
    sys.stdout = sys.stderr
    for line in sys.stdin:
        request = json.loads(line)
        if request:
            reply = answer(request)
        else:
            import pytest_graphir
            from pytest_graphir.capture.stats import FUSED

            reply = {"package": str(Path(pytest_graphir.__file__).parent), "fused": FUSED}
        out.write(json.dumps(reply) + "\n")
        out.flush()


Measure = tuple[str, Callable[[dict[str, dict[str, float]]], float]]
"""A printed row: its label, and its value from one round of one side
(``{model: {variant: seconds}}``)."""


def run(
    rev: str,
    script: Path,
    requests: list[dict[str, Any]],
    measures: list[Measure],
    rounds: int,
) -> None:
    """Measure ``requests`` (each answered by ``script``'s worker as ``{variant:
    seconds}`` for one round of its ``"model"``) on this tree and on ``rev`` in
    ``rounds`` alternating rounds, then print per measure: each side's median ratio
    and its min-max over rounds, and the quotient this / REV (median over rounds of
    the round's quotient, and its min-max)."""
    with checkout(rev) as tree:
        sides = {"this": Worker(script, TREE), rev: Worker(script, tree)}
        try:
            for name, worker in sides.items():
                print(f"{name}: {worker.hello['package']}, C kernel {worker.hello['fused']}")
            got: dict[str, list[dict[str, dict[str, float]]]] = {n: [] for n in sides}
            order = list(sides)
            for r in range(rounds):
                for n in order:
                    got[n].append({})
                for request in requests:
                    for n in order if r % 2 == 0 else order[::-1]:
                        got[n][r][request["model"]] = sides[n].ask({**request, "round": r})
                print(f"round {r + 1}/{rounds} done", file=sys.stderr, flush=True)
        finally:
            for worker in sides.values():
                worker.close()
    print(f"{rounds} alternating rounds; ratio: median (min-max over rounds)")
    print(f"{'measure':<58} {'this':>18} {rev[:12]:>18} {'this / ' + rev[:8]:>18}")
    for label, value in measures:
        mine = [value(g) for g in got["this"]]
        theirs = [value(g) for g in got[rev]]
        quotient = [a / b for a, b in zip(mine, theirs, strict=True)]
        row = [_spread(mine, "x"), _spread(theirs, "x"), _spread(quotient, "")]
        print(f"{label:<58} " + " ".join(f"{cell:>18}" for cell in row))


def _spread(values: list[float], unit: str) -> str:
    return f"{statistics.median(values):.3f}{unit} ({min(values):.2f}-{max(values):.2f})"
