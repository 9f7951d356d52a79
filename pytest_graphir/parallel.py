"""Ranks launched from a test, and what their results are compared with.

* :func:`run_ranks`: ``fn(rank, world_size, *args)`` on every rank of a default
  process group (``"threaded"``, ``"gloo"`` or ``"fake"``), the results returned to the
  caller (the pytest process), which alone compares them and writes snapshots;
* :func:`assert_ranks_agree`: the ranks' traces equal in structure;
* :func:`assert_parallel_equals_serial`: outputs and gradients against the serial model;
* :func:`trace_schedule`: one rank's pipeline stage through a whole schedule step;
* :func:`writes_snapshots` (from :mod:`pytest_graphir.names`, which reads ``RANK``):
  False on a launcher's rank above 0 (``torchrun -m pytest``), where the snapshot
  extension writes nothing.

Loading this module imports neither torch nor the comparison code: each function
imports what it uses.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import os
import pickle
import re
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from .ir import STAT_KEYS_BOOL, STAT_KEYS_FLOAT, STAT_KEYS_INT, GraphIR
from .names import canonical_module_path, op_scope, ref
from .names import writes_snapshots as writes_snapshots  # public here before names.py had it

_STATS = frozenset(STAT_KEYS_FLOAT + STAT_KEYS_INT + STAT_KEYS_BOOL)
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line \d+ in (?P<name>\S+)')
_Outcome = tuple[dict[int, Any], dict[int, tuple[str, str]], dict[int, str]]
"""What a backend's runner returns: the results of the ranks that finished, the
failures (rank -> headline and text, :func:`_failure`, :func:`_died`) and the ranks
still running at the timeout (rank -> where, :func:`_where`)."""


class RankError(RuntimeError):
    """Ranks of :func:`run_ranks` failed: one raised, or some did not finish in time.

    Attributes:
        rank: the first rank that raised, else the first still running outside
            ``torch.distributed`` (in ``fn``'s own code), else the first still running.
        tracebacks: rank -> its formatted traceback (the child's, for ``gloo``).
        timed_out: True when ranks were still running at the timeout.
    """

    def __init__(self, message: str, rank: int, tracebacks: dict[int, str], timed_out: bool):
        super().__init__(message)
        self.rank, self.tracebacks, self.timed_out = rank, tracebacks, timed_out


def run_ranks(
    fn: Callable[..., Any],
    world_size: int = 2,
    backend: str = "threaded",
    timeout: float = 60.0,
    args: Sequence[Any] = (),
) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` on each rank and return the results, index = rank.

    Each call runs inside an initialised default process group (destroyed afterwards,
    also on error), with ``torch.set_num_threads(1)`` and ``torch.manual_seed(0)``
    before it. Backends:

    * ``"threaded"`` (the default, for CI): ranks as threads of this process, real
      numerics (torch's ``multi_threaded_pg``: ``_install_threaded_pg`` and thread
      isolation, both undone afterwards; its process group reports each collective
      to the trace's recorder, :func:`_threaded_pg`). One rank runs at a time, switching only
      while it waits in a collective or a store barrier, and each keeps its own
      state of the default CPU generator across switches: ranks draw the numbers
      separate processes would. The ranks share ``args``: copy before modifying.
      torch's threaded group has no timeout of its own (a collective waits for ever);
      ``timeout`` here ends it.
    * ``"gloo"``: one spawned process per rank (``torch.multiprocessing.start_processes``,
      which stops the other ranks as soon as one fails: only that first failure
      is reported, not the other ranks' collective errors about it), meeting
      through a file store in a temporary directory of this run (no port to pick:
      xdist workers do not collide), with the caller's
      ``TORCH_DISTRIBUTED_DEBUG``
      (``DETAIL`` makes mismatched collectives fail at once instead of hanging, but
      crashes ``DistributedDataParallel``'s constructor on gloo in torch itself: it
      is never set here). ``fn``, ``args`` and the results must be picklable (``fn``
      a module-level function). Mark such tests ``@pytest.mark.distributed``.
    * ``"fake"``: torch's fake backend (``FakeStore``): any world size, ranks one
      after another in this process; collectives do nothing, so numbers are
      meaningless and only structure counts. ``timeout`` does not apply.

    The caller's random generator state and thread count are left as they were.

    Raises:
        ValueError: an unknown backend or a world size below 1.
        TypeError: ``gloo`` with ``fn`` or ``args`` that cannot be pickled.
        RankError: a rank raised (its rank, the exception's type and the first line
            of its message head the error, its traceback follows; threaded ranks
            blocked in a collective are woken); a gloo rank died without a word (by
            the signal's name, ``killed by SIGSEGV``, with the stack
            :mod:`faulthandler` dumped, or by its exit code); or ranks were still
            running after ``timeout`` seconds: within a second they are ended
            (processes killed; threads blocked in a collective woken through
            ``ProcessLocalGroup.exception_handle``; a thread stuck in ``fn``'s own
            code, which Python cannot kill, left as a daemon thread named
            ``rank<r>`` that unwinds at its next Python bytecode, its run's process
            group and thread isolation removed at once so that the next run works)
            and the message names, per rank, whether it finished and, if not, the
            innermost ``torch.distributed`` function on its stack (else its
            innermost function), the ranks stuck in ``fn``'s own code first.
    """
    runners = {"threaded": _run_threaded, "gloo": _run_gloo, "fake": _run_fake}
    if backend not in runners:
        raise ValueError(f"backend={backend!r}: expected one of {', '.join(runners)}")
    if world_size < 1:
        raise ValueError(f"world_size={world_size}: expected at least 1")
    import torch

    threads = torch.get_num_threads()
    try:
        with torch.random.fork_rng(devices=[]):
            results, errors, stuck = runners[backend](_Job(fn, world_size, timeout, tuple(args)))
    finally:
        torch.set_num_threads(threads)
    if len(results) == world_size:
        return [results[rank] for rank in range(world_size)]
    # per rank what happened, the failing ranks first (those stuck in fn's own code
    # before those in torch.distributed), then the tracebacks
    in_user_code = sorted(stuck, key=lambda r: ("(torch/distributed/" in stuck[r], r))
    status = {r: f"rank {r} {head}" for r, (head, _) in errors.items()}
    status |= {r: f"rank {r} still in {stuck[r]} after {timeout:g} s" for r in in_user_code}
    status |= {r: f"rank {r} finished" for r in sorted(results) if r not in status}
    status |= {r: f"rank {r} stopped" for r in range(world_size) if r not in status}
    texts = "".join(f"\n--- rank {r} ---\n{tb}" for r, (_, tb) in sorted(errors.items()))
    unfinished = [r for r in range(world_size) if r not in results]
    raise RankError(
        f"run_ranks({backend!r}, world_size={world_size}): " + "; ".join(status.values()) + texts,
        min(errors) if errors else (in_user_code or unfinished)[0],
        {r: tb for r, (_, tb) in errors.items()},
        not errors,
    )


class _Job(NamedTuple):
    """A :func:`run_ranks` call, as each backend's runner gets it (picklable when ``fn``
    and ``args`` are: a gloo rank gets it too)."""

    fn: Callable[..., Any]
    world: int
    timeout: float
    args: tuple[Any, ...]

    def run(self, rank: int, backend: str, **init: Any) -> Any:
        """``fn`` on ``rank`` inside a default process group of ``backend`` made with
        ``init``."""
        import datetime

        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        torch.manual_seed(0)
        wait = datetime.timedelta(seconds=max(self.timeout, 1.0))
        dist.init_process_group(backend, rank=rank, world_size=self.world, timeout=wait, **init)
        try:
            return self.fn(rank, self.world, *self.args)
        finally:  # unless the run gave up on this rank: then the group is gone already
            if not (hasattr(_HOLDER, "abandoned") and _HOLDER.abandoned.is_set()):
                dist.destroy_process_group()


def _run_fake(job: _Job) -> _Outcome:
    from torch.testing._internal.distributed.fake_pg import FakeStore

    results: dict[int, Any] = {}
    for rank in range(job.world):
        try:
            results[rank] = job.run(rank, "fake", store=FakeStore())
        except Exception as exc:
            return results, {rank: _failure(exc)}, {}
    return results, {}, {}


PRIVATE = (
    "torch.testing._internal.distributed.fake_pg.FakeStore",
    "torch._C._distributed_c10d._set_thread_isolation_mode",
)
"""Private paths of the launcher besides torch's threaded process group
(:func:`_threaded_pg`), pinned by ``tests/test_torch_private_dist.py``: the ``fake``
backend's store (no public store that answers every key at once) and the switch that
gives each rank thread its own process-group registry (no public one)."""


_HOLDER = threading.local()
"""Per rank thread of :func:`run_ranks`: ``baton``, its run's lock (one threaded rank
runs at a time: a rank holds it while it runs and passes it only while it waits in a
collective or a store barrier, :func:`_passing`); ``held``, whether it holds it now;
``abandoned``, the run's event set when the run gave up on its ranks."""


class _Abandoned(BaseException):
    """Raised in a rank thread that :func:`run_ranks` gave up on, at its next Python
    bytecode: it unwinds without running more of ``fn`` (its ``finally`` blocks, a
    trace's clean-up among them, run)."""


def _passing(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``call(*args, **kwargs)``, the baton passed to the other ranks meanwhile, and this
    rank's state of the default CPU generator kept across; a plain call on a thread
    that holds no baton or has passed it already (``all_gather_single`` calls
    ``allgather``)."""
    if not getattr(_HOLDER, "held", False):
        return call(*args, **kwargs)
    import torch

    with torch.random.fork_rng(devices=[]):  # restored once the baton is back
        _HOLDER.held = False
        _HOLDER.baton.release()
        try:
            return call(*args, **kwargs)
        finally:
            _HOLDER.baton.acquire()
            _HOLDER.held = True


@functools.cache
def _threaded_pg() -> Any:
    """torch's threaded process-group module (``multi_threaded_pg``: no public
    in-process multi-rank group; pinned by ``tests/test_torch_private_dist.py``), its ``threaded``
    backend registered again, once, through the public
    ``torch.distributed.Backend.register_backend``: each group a subclass of its
    ``ProcessLocalGroup``, ``RecordedProcessLocalGroup``, whose collectives go to the
    trace's collective recorder (:func:`~pytest_graphir.capture.collectives.group_call`)
    and pass the baton while they wait, made after a store barrier that passes it too.
    A collective is a method ``ProcessLocalGroup`` defines with an ``opts`` parameter
    (``allreduce``, ``all_gather_single``, ``barrier``, ...; ``_allgather_base``,
    ``alltoall_base``, ``reduce_scatter_tensor_coalesced`` on torch 2.9), its
    bookkeeping (``__init__``, ``size``, ``getBackendName``, ``__repr__``) has none.

    The name stays ``threaded``: ``DeviceMesh`` tells the meshes of two rank threads
    apart only under that name (``get_backend() == "threaded"`` in
    ``torch/distributed/device_mesh.py``), and DTensor's redistribution plans are
    cached process-wide by mesh: under another name the ranks of a 2x2 mesh read
    each other's plans. Outside :func:`run_ranks` the group is torch's."""
    import importlib
    import inspect

    import torch.distributed as dist

    from .capture.collectives import group_call

    mt: Any = importlib.import_module("torch.testing._internal.distributed.multi_threaded_pg")

    def method(name: str) -> Callable[..., Any]:
        base = functools.partial(_passing, getattr(mt.ProcessLocalGroup, name))
        return lambda pg, *a, **k: group_call(pg, name, functools.partial(base, pg), *a, **k)

    methods = {
        name: method(name)
        for name, fn in vars(mt.ProcessLocalGroup).items()
        if inspect.isfunction(fn) and "opts" in inspect.signature(fn).parameters
    }
    group = type("RecordedProcessLocalGroup", (mt.ProcessLocalGroup,), methods)

    def create(store: Any, rank: int, size: int, timeout: Any) -> Any:
        if store.add("graphir-barrier", 1) == size:  # every rank has made its group
            store.set("graphir-barrier-done", "1")
        _passing(store.wait, ["graphir-barrier-done"], timeout)
        return group(rank, size)

    dist.Backend.register_backend("threaded", create, devices=["cpu", "cuda"])
    return mt


_ASYNC_EXC_SPINS = sys.version_info[:2] == (3, 11)
"""CPython 3.11 only: while an exception set by ``PyThreadState_SetAsyncExc`` waits
for a thread blocked in C (``time.sleep``, a lock), every thread running under a trace
function (coverage, a debugger) spins in the eval loop, holding the interpreter, until
that thread runs bytecode again: a rank asleep or stuck in C for ever would hang the
test session. 3.10, 3.12 and 3.13 do not."""


def _run_threaded(job: _Job) -> _Outcome:
    """The ranks as threads of this process, one running at a time (the baton). Ranks
    still alive at the timeout are ended as far as Python can: the ones blocked in a
    collective are woken (``exception_handle``), and each gets :class:`_Abandoned`
    raised at its next Python bytecode (``PyThreadState_SetAsyncExc``), which unwinds
    a loop in ``fn`` at once and a thread blocked in C (``time.sleep``) when that
    returns; they get half a second, then are left as daemon threads whose failure
    reports nothing. Not on CPython 3.11 while a trace function is set
    (:data:`_ASYNC_EXC_SPINS`): there the ranks are only woken and left."""
    import ctypes

    import torch

    from .capture.threads import separate_program

    mt = _threaded_pg()
    isolation: Any = torch._C._distributed_c10d._set_thread_isolation_mode  # type: ignore[attr-defined]
    group = mt.ProcessLocalGroup
    results: dict[int, Any] = {}
    errors: dict[int, tuple[str, str]] = {}
    baton, abandoned = threading.Lock(), threading.Event()
    store = torch.distributed.HashStore()  # type: ignore[attr-defined]

    def rank_thread(rank: int) -> None:
        with baton:
            _HOLDER.baton, _HOLDER.held, _HOLDER.abandoned = baton, True, abandoned
            try:
                results[rank] = job.run(rank, "threaded", store=store)
            except BaseException as exc:
                woken = isinstance(exc, SystemExit) and group._terminate.is_set()
                if not (abandoned.is_set() or woken):  # woken: another rank failed
                    errors[rank] = _failure(exc)
                    group.exception_handle(exc)  # wake the ranks blocked in a collective

    threads = [
        threading.Thread(target=rank_thread, args=(r,), name=f"rank{r}", daemon=True)
        for r in range(job.world)
    ]
    mt._install_threaded_pg()
    isolation(True)
    try:
        deadline = time.monotonic() + job.timeout
        with separate_program(*threads):  # a rank's trace does not count the others
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(max(0.0, deadline - time.monotonic()))
            alive = {r: t for r, t in enumerate(threads) if t.is_alive()}
            frames = sys._current_frames()
            stuck = {r: _where(_stack(frames.get(t.ident or 0))) for r, t in alive.items()}
            if alive:
                abandoned.set()
                group.exception_handle(TimeoutError())
                traced = sys.gettrace() is not None or threading.gettrace() is not None
                if not (_ASYNC_EXC_SPINS and traced):
                    for thread in alive.values():
                        wake = ctypes.c_ulong(thread.ident or 0), ctypes.py_object(_Abandoned)
                        ctypes.pythonapi.PyThreadState_SetAsyncExc(*wake)
                end = time.monotonic() + 0.5
                for thread in alive.values():
                    thread.join(max(0.0, end - time.monotonic()))
    finally:
        group.reset()
        mt._uninstall_threaded_pg()
        isolation(False)
    return results, errors, stuck


def _gloo_rank(rank: int, job: _Job, tmp: str) -> None:
    """A gloo rank, started by ``torch.multiprocessing.start_processes``: its stack goes
    to ``<tmp>/rank<r>`` (:mod:`faulthandler`) on ``SIGUSR1`` (sent at a timeout) and
    when a fatal signal kills it (``SIGSEGV``, ``SIGABRT``, ...); ``(None, its result)``,
    or ``(when fn raised, its exception's`` :func:`_failure` ``)``, pickled to
    ``<tmp>/rank<r>.out`` (tensors by value); an exception is raised on, so that
    torch stops the other ranks at once. The ranks meet through the file store
    ``<tmp>/store``. ``TORCH_DISTRIBUTED_DEBUG`` is the caller's, inherited."""
    import faulthandler
    import signal

    with open(f"{tmp}/rank{rank}", "w") as dump, open(f"{tmp}/rank{rank}.out", "wb") as out:
        faulthandler.enable(file=dump, all_threads=True)
        faulthandler.register(signal.SIGUSR1, file=dump, all_threads=True)
        raised = []

        def timed(*fn_args: Any) -> Any:  # when fn raised, before the group is destroyed
            try:
                return job.fn(*fn_args)
            except BaseException:
                raised.append(time.monotonic())  # one clock for all processes (Linux)
                raise

        try:
            result = job._replace(fn=timed).run(rank, "gloo", init_method=f"file://{tmp}/store")
            out.write(pickle.dumps((None, result)))  # plain pickle: tensors by value
        except BaseException as exc:
            out.write(pickle.dumps(((raised or [time.monotonic()])[0], _failure(exc))))
            raise


def _run_gloo(job: _Job) -> _Outcome:
    """The ranks as processes of ``torch.multiprocessing.start_processes``, which stops
    the others (``SIGTERM``, then ``SIGKILL``) as soon as one exits on an error: only
    the first failure is reported (a rank killed by a signal, else the rank whose
    ``fn`` raised first), not what the others' collectives then say about it."""
    import signal

    import torch.multiprocessing

    mp: Any = torch.multiprocessing  # its names are not re-exported for mypy
    try:
        pickle.dumps(job)
    except Exception as exc:  # PicklingError, AttributeError
        raise TypeError(
            "run_ranks(backend='gloo') runs each rank in a spawned process: fn "
            f"and args must be picklable (fn a module-level function): {exc}"
        ) from exc
    with tempfile.TemporaryDirectory(prefix="graphir-ranks-") as tmp:
        ranks = mp.start_processes(_gloo_rank, (job, tmp), job.world, join=False, daemon=True)
        deadline, first = time.monotonic() + job.timeout, None
        try:
            while not ranks.join(max(0.0, deadline - time.monotonic()), grace_period=0.0):
                if time.monotonic() >= deadline:
                    break
        except (mp.ProcessRaisedException, mp.ProcessExitedException) as exc:
            first = exc.error_index
        procs = ranks.processes
        try:
            running = [r for r, proc in enumerate(procs) if proc.is_alive()]
            for rank in running:
                os.kill(procs[rank].pid, signal.SIGUSR1)
            time.sleep(0.5 if running else 0.0)
            stacks = {r: _read(f"{tmp}/rank{r}").decode(errors="replace") for r in running}
            stuck = {r: _where(_FRAME.findall(text)) for r, text in stacks.items()}
        finally:
            for proc in procs:
                proc.kill()
                proc.join(5.0)
            for name in ranks.error_files:  # torch reads a raising rank's, and leaves it
                with contextlib.suppress(OSError):
                    os.unlink(name)
        outs = {r: pickle.loads(d) for r in range(job.world) if (d := _read(f"{tmp}/rank{r}.out"))}
        results = {r: value for r, (when, value) in outs.items() if when is None}
        raised = sorted((w, r, f) for r, (w, f) in outs.items() if w is not None)  # by when
        if first is not None and first not in {r for _, r, _ in raised}:  # died without a word
            return results, {first: _died(procs[first].exitcode, f"{tmp}/rank{first}")}, stuck
    # the first to raise; the others' errors follow from it
    return results, {rank: failure for _, rank, failure in raised[:1]}, stuck


def _failure(exc: BaseException) -> tuple[str, str]:
    """What a rank's exception reads as in a :class:`RankError`: its headline, the
    exception's type and the first line of its message (``raised AssertionError:
    Tensor-likes are not close!``: ``torch.testing.assert_close`` puts its numbers on
    later lines), and its formatted traceback. Called inside the ``except`` that
    caught ``exc``."""
    lines = "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()
    return f"raised {lines[0].strip() if lines else type(exc).__name__}", traceback.format_exc()


def _died(code: int | None, stacks: str) -> tuple[str, str]:
    """The headline and text of a gloo rank that exited without a word: killed by a
    signal (``killed by SIGSEGV``, a negative exit code), with the stack
    :mod:`faulthandler` wrote to ``stacks`` when it caught that signal, or its exit
    code."""
    import signal

    if code is None or code >= 0:
        return f"exited with code {code}", f"exited with code {code}"
    name = signal.Signals(-code).name  # torch's join has named it already
    dump = _read(stacks).decode(errors="replace").strip()
    return f"killed by {name}", dump or f"killed by {name} (no stack was written)"


def _read(path: str) -> bytes:
    """The bytes of the file at ``path``; none when it cannot be read (a rank that
    wrote nothing there)."""
    with contextlib.suppress(OSError), open(path, "rb") as file:
        return file.read()
    return b""


def _stack(frame: Any) -> list[tuple[str, str]]:
    """``(file, function)`` of ``frame`` and its callers, innermost first; none for
    ``None`` (a thread that ended meanwhile)."""
    stack = traceback.walk_stack(frame) if frame else ()
    return [(f.f_code.co_filename, f.f_code.co_name) for f, _ in stack]


def _where(frames: list[tuple[str, str]]) -> str:
    """``function (torch/distributed/file.py)`` of the innermost frame in
    ``torch.distributed`` among ``frames`` (``(file, function)``, innermost first),
    else of the innermost frame."""
    for file, name in frames:
        path = file.replace(os.sep, "/")
        if "/torch/distributed/" in path:
            return f"{name} (torch/distributed/{path.rsplit('/torch/distributed/', 1)[1]})"
    return f"{frames[0][1]} ({os.path.basename(frames[0][0])})" if frames else "an unknown place"


def _structure(ir: GraphIR | str) -> dict[str, Any]:
    """The snapshot document of ``ir`` (a trace or its text) without statistics."""
    from .serialize import dumps, loads

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            tensor = "dtype" in value and "shape" in value
            return {k: strip(v) for k, v in value.items() if not (tensor and k in _STATS)}
        return [strip(v) for v in value] if isinstance(value, list) else value

    return dict(strip(loads(ir if isinstance(ir, str) else dumps(ir))))


def assert_ranks_agree(irs: Sequence[GraphIR | str]) -> None:
    """Each rank's trace (or snapshot text) equal to rank 0's in structure: node names,
    ops and modules, arguments, shapes, dtypes; statistics are left out, since each
    rank holds other shards (:func:`pytest_graphir.compare.compare` on documents
    without them).

    Raises:
        AssertionError: names the first rank that differs from rank 0, then the
            comparison's lines (``-`` rank 0, ``+`` that rank).
    """
    from .compare import compare

    docs = [_structure(ir) for ir in irs]
    for rank, doc in enumerate(docs[1:], 1):
        if result := compare(docs[0], doc):
            head = f"rank 0 and rank {rank} differ in structure ('-' rank 0, '+' rank {rank}):"
            raise AssertionError("\n".join([head, *result.lines(0)]))


def assert_serial_structure(parallel: GraphIR | str, serial: GraphIR | str) -> None:
    """A rank's trace has the serial model's module tree and logical shapes, aligned by
    module scope rather than by ``op#k`` names: the same module nodes with the same
    classes (wrappers and ``fully_shard``'s class swap are already left out by the
    trace), the same parameters with the same shapes, module outputs of the same
    shapes, and within each module scope the serial model's ops in the parallel
    trace, of the same output shapes: the scope's op sequences aligned by op kind
    (``difflib.SequenceMatcher``, longest runs first), so ops a parallel style
    inserts before, between or after the model's own are skipped, whatever their
    kind. Tensors marked ``dist: local`` (this rank's part) and module
    outputs that are such a tensor are not compared by shape. Ops only the parallel
    trace has in a scope (collectives, the ``view``, ``cat`` or ``chunk`` of a
    redistribution) are set aside: not failures, listed in a failure's message.

    Raises:
        AssertionError: lists every difference (``module``, ``param``, ``op`` or
            ``shape`` with the node or parameter name, parallel -> serial), then the
            ops set aside.
    """
    from .compare.groups import by_key

    par, ser = _structure(parallel), _structure(serial)
    local = {  # a module's output entry refers to its producer, which says local
        text
        for name, node in par.get("nodes", {}).items()
        for i, out in enumerate(node.get("out", []))
        if isinstance(out, dict) and out.get("dist") == "local"
        for text in (ref(name), ref(name, i))
    }
    problems: list[str] = []

    def shapes(name: str, want: list[Any], got: list[Any]) -> None:  # may differ in length
        problems.extend(
            f"shape {name}: {g.get('shape')} -> {w.get('shape')}"
            for w, g in zip(want, got, strict=False)
            if isinstance(g, dict)
            and g.get("dist") != "local"
            and g.get("ref") not in local
            and w["shape"] != g["shape"]
        )

    for section in ("params", "nodes"):  # a parameter's entry is its one tensor
        for name, want in ser.get(section, {}).items():
            got = par.get(section, {}).get(name)
            if section == "nodes" and "module" not in want:
                continue
            if got is None:
                problems.append(f"{section} {name}: missing in the parallel trace")
            elif want.get("module") != got.get("module"):  # a parameter has none
                problems.append(f"module {name}: {got.get('module')} -> {want.get('module')}")
            elif section == "params":
                shapes(name, [want], [got])
            else:
                shapes(name, want.get("out", []), got.get("out", []))
    par_ops, ser_ops = (  # the op nodes by module scope, in trace order
        by_key((op_scope(n), (n, node)) for n, node in doc.get("nodes", {}).items() if "op" in node)
        for doc in (par, ser)
    )
    aside = []
    for scope in sorted(set(par_ops) | set(ser_ops)):
        theirs, mine = ser_ops.get(scope, []), par_ops.get(scope, [])
        kinds = [[str(node["op"]) for _, node in ops] for ops in (theirs, mine)]
        matcher = difflib.SequenceMatcher(None, kinds[0], kinds[1], autojunk=False)
        blocks = matcher.get_matching_blocks()
        pairs = [(theirs[a + k], mine[b + k]) for a, b, size in blocks for k in range(size)]
        for (name, want), (_, got) in pairs:
            shapes(name, want.get("out", []), got.get("out", []))
        found, kept = {s[0] for s, _ in pairs}, {p[0] for _, p in pairs}  # node names
        problems += [f"op {n}: missing in the parallel trace" for n, _ in theirs if n not in found]
        aside += [n for n, _ in mine if n not in kept]
    if problems:
        head = "parallel != serial in structure (parallel -> serial):"
        tail = [f"set aside, only in the parallel trace: {', '.join(aside)}"] if aside else []
        raise AssertionError("\n  ".join([head, *problems, *tail]))


def _full(value: Any) -> Any:
    """``value`` whole: a DTensor gathered (``full_tensor()``, a collective), a
    functional collective's ``AsyncCollectiveTensor`` waited for
    (:func:`~pytest_graphir.capture.dtensor.local_values`); anything else as it is."""
    from torch.distributed.tensor import DTensor

    from .capture.dtensor import local_values

    return value.full_tensor() if isinstance(value, DTensor) else local_values(value)


def assert_parallel_equals_serial(
    parallel_out: Any,
    serial_out: Any,
    *,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    parallel_grads: Mapping[str, Any] | None = None,
    serial_grads: Mapping[str, Any] | None = None,
) -> None:
    """The parallel model's outputs (and gradients) equal the serial model's, within
    ``torch.testing.assert_close(rtol, atol)``.

    Outputs may be nested (:func:`pytest_graphir.leaves.flatten`); gradients are
    dicts parameter name -> gradient, the names taken through
    :func:`canonical_module_path` on both sides. DTensors are gathered with
    ``full_tensor()`` (a collective: call this inside the ranks, every rank alike,
    while the group exists, or pass tensors the ranks gathered) before any is
    compared, so a mismatch on one rank cannot leave the others blocked.
    With the same input on every rank, FSDP2's reduce-scatter averages equal
    gradients, so its gradients equal the serial model's on that input.

    Raises:
        AssertionError: names the output path (``output.logits``) or the parameter,
            with ``assert_close``'s message; or the outputs or gradient names differ.
    """
    import torch

    from .leaves import flatten

    parallel, serial = [  # the parallel side gathered first, outputs before gradients
        {f"output {path}": _full(v) for path, v in flatten(out, "output")}
        | {f"gradient of {canonical_module_path(k)}": _full(v) for k, v in (grads or {}).items()}
        for out, grads in ((parallel_out, parallel_grads), (serial_out, serial_grads))
    ]
    if parallel.keys() != serial.keys():
        raise AssertionError(
            f"parallel and serial differ: only parallel {sorted(parallel.keys() - serial.keys())}"
            f", only serial {sorted(serial.keys() - parallel.keys())}"
        )
    for what, value in parallel.items():
        try:
            torch.testing.assert_close(value, serial[what], rtol=rtol, atol=atol)
        except AssertionError as exc:
            raise AssertionError(f"parallel != serial: {what}: {exc}") from None


def trace_schedule(
    schedule: Any,
    stage: Any,
    *args: Any,
    target: Any = None,
    losses: list[Any] | None = None,
    returned: list[Any] | None = None,
    step_kwargs: dict[str, Any] | None = None,
    **options: Any,
) -> GraphIR:
    """Trace one ``schedule.step(*args, target=target, losses=losses, **step_kwargs)``
    of a pipeline on this rank: every microbatch through ``stage``, the
    ``torch.distributed.pipelining`` stage this rank runs (or the stages, in a
    schedule of several stages per rank).

    The traced model is ``stage.submod``: its modules are module nodes by their
    paths, each microbatch a call of its own (``0``, ``0@1``, ... for the second).
    Several stages are traced as one ``nn.ModuleDict`` of their ``submod`` by
    ``stage<index>`` (its inputs named after the first stage's forward): each
    stage's calls are module nodes ``stage<index>``, ``stage<index>@1``, ... The
    schedule's own code (splitting the batch, buffers, merging the outputs, the
    loss and backward of a schedule with a ``loss_fn``) adds no node, its transfers
    do: each ``send`` of a stage's output and each ``recv`` of a stage's input is an
    op node whose ``peer`` is the stage it talks to, ``next`` or ``prev``, never a
    rank. With a ``loss_fn``, each gradient the step sends to ``prev`` or receives
    from ``next`` (a floating-point transfer against the activations' flow) is a
    ``backward`` entry of the ``collectives`` section instead (no statistics).
    The first stage's microbatches are inputs, ``microbatch<i>.<parameter>``; a
    later stage's calls read the ``recv`` nodes' outputs. ``outputs`` is what the
    step returned: the merged output on the last stage, ``None`` elsewhere. The
    ``plan`` section's ``<root>`` entry is ``{"pipeline": {"schedule": <class>,
    "microbatches": n, "stages": n}}``: the same on every rank.

    Args:
        schedule: a schedule of ``torch.distributed.pipelining``: single-stage
            (``ScheduleGPipe``, ``Schedule1F1B``) or of several stages per rank
            (``ScheduleInterleaved1F1B``).
        stage: its stage (``PipelineStage``), whose ``submod`` is traced; for a
            schedule of several stages per rank, the list of this rank's stages.
        *args: the step's positional arguments (the whole batch, on the first
            stage; none on the others).
        target: the step's ``target``, for a schedule with a ``loss_fn``.
        losses: the step's ``losses`` list, filled by the step.
        returned: a list the step's return value is appended to (the merged
            output on the last stage, to compare with the serial model's).
        step_kwargs: the step's keyword arguments (the model's).
        **options: :func:`~pytest_graphir.trace`'s options (``stats``, ``hooks``,
            ``blackbox``, ``depth``, ``view``, ``interceptor``,
            ``float32_precision``, ``dist_stats``).

    Returns:
        The stage's :class:`GraphIR`.

    Raises:
        TypeError: ``schedule`` is no pipeline schedule; ``stage`` is no pipeline
            stage, or a list of several for a single-stage schedule; an unknown
            option (as :func:`~pytest_graphir.trace`).
        ValueError: ``backward`` among ``options``: the schedule runs its own
            backward, with its ``loss_fn``; as :func:`~pytest_graphir.trace`.
        Exception: whatever the step raises, unchanged.
    """
    from torch import nn
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import (
        PipelineScheduleMulti,
        PipelineScheduleSingle,
    )

    from .capture.options import checked_call
    from .capture.tracer import Run, trace, trace_run

    single = isinstance(schedule, PipelineScheduleSingle)
    if not single and not isinstance(schedule, PipelineScheduleMulti):
        raise TypeError(
            f"trace_schedule: {type(schedule).__name__} is not a pipeline schedule "
            "(ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B)"
        )
    stages = list(stage) if isinstance(stage, (list, tuple)) else [stage]
    several = len(stages) > 1
    if not stages or (single and several) or not all(isinstance(s, PipelineStage) for s in stages):
        raise TypeError(
            f"trace_schedule: stage must be a PipelineStage (a list of this rank's stages "
            f"for a schedule of several stages per rank), got {type(stage).__name__}"
        )
    if "backward" in options:
        raise ValueError(
            "trace_schedule(backward=...): the schedule runs its own backward (its loss_fn)"
        )
    submods = [s.submod for s in stages]
    model, called = submods[0], []  # one stage: its module, the one the step calls
    if several:  # never called: named after the first stage's forward
        model, called = nn.ModuleDict({f"stage{s.stage_index}": s.submod for s in stages}), submods
        model.forward = submods[0].forward
    kwargs = dict(step_kwargs or {})
    root, kwargs = checked_call(model, kwargs, None, options.get("view", "ops"), trace)

    def step() -> Any:
        out = schedule.step(*args, target=target, losses=losses, **kwargs)
        if returned is not None:
            returned.append(out)
        return out

    chunk = type(stages[0]).forward_one_chunk.__code__

    def counts() -> bool:  # a microbatch: the stage runs it; else its shape inference
        return any(f.f_code is chunk for f, _ in traceback.walk_stack(sys._getframe(1)))

    kind, num = type(schedule).__name__, stages[0].num_stages

    def plan(calls: int) -> dict[str, Any]:
        return {"pipeline": {"schedule": kind, "microbatches": calls, "stages": num}}

    return trace_run(root, args, kwargs, Run(step, called, counts, plan), **options)
