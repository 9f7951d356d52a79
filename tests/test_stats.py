"""Tests of per-tensor statistics (``capture.stats``) and how ``trace`` records them.

Expected values are computed independently in float64 with plain torch calls.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import models
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pytest_graphir import TensorMeta, trace
from pytest_graphir.capture import stats
from pytest_graphir.capture.stats import FUSED, StatsBatch
from pytest_graphir.ir import STAT_KEYS_BOOL, STAT_KEYS_FLOAT, STAT_KEYS_INT

_LIB = torch.library.Library("graphir_test", "DEF")  # a custom op that writes its input
_LIB.define("scale(Tensor(a!) x) -> ()")


def _scale(x: torch.Tensor) -> None:
    x.mul_(100)


_LIB.impl("scale", _scale, "CPU")


_FUSED = pytest.mark.skipif(
    not FUSED,
    reason="the C extension pytest_graphir.capture._moments is not built here "
    "(no C compiler when the package was installed)",
)


@pytest.fixture(params=[pytest.param("fused", marks=_FUSED), "device"])
def reductions(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each CPU path in turn: the C kernel (fused) and the device path (device, what
    every CPU tensor takes where the extension is not built)."""
    from pytest_graphir.capture import stats as stats_module

    if request.param == "device":
        monkeypatch.setattr(stats_module, "_moments", None)
    return str(request.param)


@pytest.fixture
def torch_reductions(monkeypatch: pytest.MonkeyPatch) -> None:
    """Statistics without the C kernel: the device path, as where the extension is
    not built."""
    from pytest_graphir.capture import stats as stats_module

    monkeypatch.setattr(stats_module, "_moments", None)


def _stats(t: torch.Tensor, batched: bool | None = None) -> dict[str, float | int]:
    """Statistics of ``t`` as the tracer computes them (``batched``: see StatsBatch)."""
    meta = TensorMeta(list(t.shape), str(t.dtype))
    batch = StatsBatch(batched=batched)
    batch.add(t, meta)
    batch.finish()
    return meta.stats


def _reference(t: torch.Tensor) -> dict[str, float | int]:
    """The float64 reference every path is checked against."""
    from pytest_graphir.capture.stats import reference_stats

    return reference_stats(t)


def _close(a: float, b: float, rel: float = 1e-5) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=0.0)


@pytest.mark.parametrize(
    "make",
    [
        lambda g: torch.randn(1000, generator=g) * 2.0 + 3.0,
        lambda g: torch.rand(7, 13, generator=g) + 0.5,
        lambda g: torch.randn(4096, generator=g, dtype=torch.float64) - 10.0,
        lambda g: torch.randn(2000, generator=g) * 0.01 + 1000.0,  # |mean| >> std
    ],
    ids=["randn", "rand2d", "float64", "offset"],
)
def test_float_stats_match_float64_reference(make, reductions: str) -> None:  # type: ignore[no-untyped-def]
    """mean, population std, min and max agree with the float64 reference to 1e-5
    (relative; the device path's std to 1e-4 where |mean| > 1000 std: it reduces
    float32 rows)."""
    g = torch.Generator().manual_seed(0)
    t = make(g)
    got = _stats(t)
    ref = _reference(t)
    assert list(got) == list(STAT_KEYS_FLOAT)
    # the device path's float32 rows: a std much smaller than |mean| to 1e-4
    rel = 1e-4 if reductions == "device" and abs(ref["mean"]) > 1e3 * ref["std"] else 1e-5
    for key in ("mean", "std", "min", "max"):
        assert _close(got[key], ref[key], rel), (key, got[key], ref[key])
    assert got["nan"] == 0 and got["inf"] == 0


@pytest.mark.usefixtures("reductions")
def test_std_is_population_not_sample() -> None:
    """std of [1, 3] is 1 (population), not sqrt(2) (sample); within float32 rounding
    (the variance is E[x^2] - mean^2 from a float32 norm)."""
    got = _stats(torch.tensor([1.0, 3.0]))
    assert got["mean"] == 2.0
    assert got["std"] == pytest.approx(1.0, rel=1e-6)


@pytest.mark.usefixtures("reductions")
def test_nan_and_inf_counts_exact() -> None:
    """NaN and +/-Inf are counted exactly; NaN propagates into mean."""
    t = torch.tensor(
        [1.0, float("nan"), float("inf"), -float("inf"), float("nan"), 2.0, float("nan")]
    )
    got = _stats(t)
    assert got["nan"] == 3
    assert got["inf"] == 2
    assert math.isnan(got["mean"])


@pytest.mark.usefixtures("reductions")
@pytest.mark.parametrize("value", [float("inf"), -float("inf")])
def test_inf_only_counted(value: float) -> None:
    """A single Inf of either sign (no NaN) gives inf=1, nan=0."""
    got = _stats(torch.tensor([0.5, value, 1.5]))
    assert got["inf"] == 1
    assert got["nan"] == 0


def test_float16_large_values_do_not_overflow() -> None:
    """Values ~300 in float16 (squares overflow float16) still give finite, accurate stats."""
    g = torch.Generator().manual_seed(1)
    t = (300.0 + torch.randn(4096, generator=g) * 20.0).to(torch.float16)
    assert torch.isinf(torch.dot(t, t)).item()  # setup check: a float16 sum of squares overflows
    got = _stats(t)
    ref = _reference(t)
    for key in ("mean", "std", "min", "max"):
        assert math.isfinite(got[key]), key
        assert _close(got[key], ref[key]), (key, got[key], ref[key])
    assert got["inf"] == 0


@pytest.mark.usefixtures("reductions")
def test_bfloat16_stats_accurate() -> None:
    """bfloat16 (8-bit mantissa) stats are accumulated in higher precision."""
    g = torch.Generator().manual_seed(2)
    t = (1000.0 + torch.randn(8192, generator=g) * 50.0).to(torch.bfloat16)
    got = _stats(t)
    ref = _reference(t)
    for key in ("mean", "std", "min", "max"):
        assert math.isfinite(got[key]), key
        assert _close(got[key], ref[key]), (key, got[key], ref[key])


def test_int_stats() -> None:
    """Integer tensors get exact min, max and sum as Python ints."""
    t = torch.tensor([[5, -7, 12], [0, 3, 100]], dtype=torch.int32)
    got = _stats(t)
    assert got == {"min": -7, "max": 100, "sum": 113}
    assert list(got) == list(STAT_KEYS_INT)
    assert all(type(v) is int for v in got.values())


def test_bool_stats() -> None:
    """Bool tensors get the number of True elements."""
    t = torch.tensor([True, False, True, True, False])
    got = _stats(t)
    assert got == {"true": 3}
    assert list(got) == list(STAT_KEYS_BOOL)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_empty_tensor_has_no_stats(dtype: torch.dtype) -> None:
    """Empty tensors get no statistics (and no crash)."""
    assert _stats(torch.empty(0, 3, dtype=dtype)) == {}


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning")
@pytest.mark.parametrize(
    "dtype", [torch.quint8, torch.qint8, torch.qint32, torch.quint4x2, torch.quint2x4]
)
def test_a_quantized_tensor_has_no_stats(dtype: torch.dtype) -> None:
    """Every quantized dtype, the packed ``quint4x2`` and ``quint2x4`` included, is
    described by shape and dtype alone, as the module docstring promises."""
    q = torch.quantize_per_tensor(torch.rand(8), 0.1, 0, dtype)
    assert q.dtype == dtype and q.is_quantized
    assert _stats(q) == {}


@pytest.mark.usefixtures("reductions")
def test_many_tensors_in_one_batch_keep_their_own_stats() -> None:
    """One host copy for many tensors: each meta gets its own values and counts."""
    tensors = [
        torch.tensor([1.0, float("nan")]),
        torch.tensor([2.0, 4.0]),
        torch.tensor([3, 4, 5]),
        torch.tensor([float("inf"), 0.0, float("inf")]),
        torch.tensor([True, True]),
        torch.tensor([-1.0, 1.0]),
    ]
    metas = [TensorMeta(list(t.shape), str(t.dtype)) for t in tensors]
    batch = StatsBatch()
    for t, m in zip(tensors, metas, strict=True):
        batch.add(t, m)
    batch.finish()
    assert metas[0].stats["nan"] == 1 and metas[0].stats["inf"] == 0
    # std within float32 rounding: E[x^2] - mean^2 from a float32 norm
    assert metas[1].stats == {
        "mean": 3.0,
        "std": pytest.approx(1.0, rel=1e-6),
        "min": 2.0,
        "max": 4.0,
        "nan": 0,
        "inf": 0,
    }
    assert metas[2].stats == {"min": 3, "max": 5, "sum": 12}
    assert metas[3].stats["inf"] == 2 and metas[3].stats["nan"] == 0
    assert metas[4].stats == {"true": 2}
    assert metas[5].stats == {
        "mean": pytest.approx(0.0, abs=1e-12),
        "std": pytest.approx(1.0, rel=1e-6),
        "min": -1.0,
        "max": 1.0,
        "nan": 0,
        "inf": 0,
    }


# -- through trace() -------------------------------------------------------------------


def test_traced_stats_match_reference() -> None:
    """Stats of every node output in an MLP trace agree with a float64 recomputation."""
    torch.manual_seed(0)
    model, (x,) = models.mlp()
    g = trace(model, x)
    with torch.no_grad():
        h1 = model.fc1(x)
        expected = {
            "fc1/linear#0": h1,
            "act/relu#0": torch.relu(h1),
            "fc2/linear#0": model.fc2(torch.relu(h1)),
        }
    expected["$x"] = x
    for name, t in expected.items():
        stats = g.inputs["x"].stats if name == "$x" else g.node(name).outputs[0].stats
        ref = _reference(t)
        # float32 sums: 1e-5 relative, or 1e-6 of the tensor's range for a mean near 0
        scale = max(abs(ref["min"]), abs(ref["max"]))
        for key in ("mean", "std", "min", "max"):
            assert math.isclose(stats[key], ref[key], rel_tol=1e-5, abs_tol=1e-6 * scale), (
                name,
                key,
                stats[key],
                ref[key],
            )


def test_stats_not_recorded_as_ops() -> None:
    """Taking statistics adds no nodes: the same node names with and without stats."""
    torch.manual_seed(0)
    model, inputs = models.tiny_transformer()
    with_stats = trace(model, *inputs)
    without = trace(model, *inputs, stats=False)
    assert [n.name for n in with_stats.nodes] == [n.name for n in without.nodes]
    assert [n.args for n in with_stats.nodes] == [n.args for n in without.nodes]
    mlp, (x,) = models.mlp()
    assert trace(mlp, x).ops() == ["linear", "relu", "linear"]


def test_structure_only_trace_has_empty_stats() -> None:
    """``stats=False``: shapes and dtypes only, no statistic anywhere."""
    torch.manual_seed(0)
    model, inputs = models.tiny_transformer()
    g = trace(model, *inputs, stats=False)
    assert g.meta["stats"] is False
    assert all(m.stats == {} for m in g.inputs.values() if isinstance(m, TensorMeta))
    metas = [o for n in g.nodes for o in n.outputs if isinstance(o, TensorMeta)]
    assert metas and all(m.stats == {} for m in metas)
    assert all(m.shape for m in metas)


def test_traced_nan_inf_counts() -> None:
    """NaN/Inf produced inside a forward are counted on the producing node."""

    class Div(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x / torch.zeros_like(x)

    x = torch.tensor([1.0, -2.0, 0.0, 0.0, 3.0])
    g = trace(Div(), x)
    stats = g.node("div#0").outputs[0].stats
    assert stats["nan"] == 2  # 0/0
    assert stats["inf"] == 3  # +-x/0


def test_int64_min_max_exact_beyond_float64_precision() -> None:
    """int64 min/max are exact even above 2**53 (e.g. nanosecond timestamps)."""
    lo, hi = 2**53 + 1, 1_700_000_000_123_456_789
    t = torch.tensor([hi, lo, hi - 1], dtype=torch.int64)
    got = _stats(t)
    assert got["min"] == lo
    assert got["max"] == hi


def test_view_ops_on_parameters_and_buffers_have_stats() -> None:
    """``w.T``, ``w.view``, ``b.reshape`` of a parameter/buffer get the elements' stats."""

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.tensor([[1.0, 2.0], [3.0, 6.0]]))
            self.register_buffer("b", torch.tensor([-1.0, 1.0]))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x @ self.w.T + self.w.view(4)[:2] + self.b.reshape(1, 2)

    g = trace(M(), torch.ones(2, 2))
    w_stats = {"mean": 3.0, "std": math.sqrt(3.5), "min": 1.0, "max": 6.0, "nan": 0, "inf": 0}
    b_stats = {"mean": 0.0, "std": 1.0, "min": -1.0, "max": 1.0, "nan": 0, "inf": 0}
    for name, expected in (("t#0", w_stats), ("view#0", w_stats), ("reshape#0", b_stats)):
        got = g.node(name).outputs[0].stats
        assert set(got) == set(expected), (name, got)
        for key, value in expected.items():
            assert got[key] == pytest.approx(value, rel=1e-6), (name, key)


def test_trace_pauses_the_garbage_collector_and_restores_it() -> None:
    """The collector is off during the forward (its full collections walk every node
    kept so far) and back in its previous state afterwards, also when the model raises."""
    import gc

    seen: list[bool] = []

    class Probe(torch.nn.Module):
        def __init__(self, fail: bool) -> None:
            super().__init__()
            self.fail = fail

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(gc.isenabled())
            if self.fail:
                raise RuntimeError("boom")
            return x + 1

    assert gc.isenabled()
    trace(Probe(False), torch.ones(2))
    assert seen == [False] and gc.isenabled()
    with pytest.raises(RuntimeError, match="boom"):
        trace(Probe(True), torch.ones(2))
    assert seen == [False, False] and gc.isenabled()
    gc.disable()
    try:
        trace(Probe(False), torch.ones(2))
        assert not gc.isenabled()  # a caller's own choice is kept
    finally:
        gc.enable()


def _batched_cases() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    x = torch.randn(3, 70, 33, generator=g) * 4 + 2
    return [
        x,
        x.transpose(0, 2),  # non-contiguous: copied flat
        x.double(),
        x.half(),
        torch.randn(1, generator=g),
        torch.full((5,), 1e4) + torch.randn(5, generator=g) * 1e-2,  # |mean| >> std
        torch.tensor([1.0, float("nan"), float("inf"), -2.0]),
        torch.tensor([float("-inf"), 3.0]),
    ]


@pytest.mark.parametrize("batched", [None, True], ids=["fused-or-device", "device"])
def test_both_paths_match_the_reference_within_tolerance(batched: bool | None) -> None:
    """The device path (what CUDA tensors take; run here on CPU tensors) and the C
    kernel (with the device path for what it declines) give the float64 reference's
    numbers within the default tolerance, NaN and Inf counts exactly."""
    import math

    from pytest_graphir.capture.stats import StatsBatch
    from pytest_graphir.compare.tolerance import Tolerance

    g = torch.Generator().manual_seed(3)
    cases = [
        *_batched_cases(),
        torch.randint(-5, 9, (40, 3), generator=g),
        torch.randn(3, 70, 33, generator=g) > 0.5,
        torch.randn(3, 70, 33, generator=g).to(torch.bfloat16),
        torch.tensor([7, 9], dtype=torch.int64).to(torch.uint32),
    ]
    batch = StatsBatch(batched=batched)
    metas = [TensorMeta(list(t.shape), str(t.dtype)) for t in cases]
    for t, meta in zip(cases, metas, strict=True):
        batch.add(t, meta)
    if batched:
        assert all(m.stats == {} for m in metas)  # queued, nothing computed yet
    batch.finish()
    tol = Tolerance()
    for t, meta in zip(cases, metas, strict=True):
        ref = _reference(t)
        got = meta.stats
        assert set(got) == set(ref), t.dtype
        if not t.is_floating_point():
            assert got == ref, t.dtype
            continue
        assert (got["nan"], got["inf"]) == (ref["nan"], ref["inf"]), t
        scale = max(abs(ref["min"]), abs(ref["max"]), ref["std"])
        for key in ("mean", "std", "min", "max"):
            a, b = got[key], ref[key]
            if isinstance(a, float) and math.isnan(a):
                assert math.isnan(b), (key, t)
                continue
            assert a == b or abs(a - b) <= tol.atol + tol.rtol * scale, (key, a, b, t.dtype)


def test_batched_statistics_keep_the_values_at_record_time() -> None:
    """A held device tensor keeps the statistics it had when :meth:`flush` runs before
    the in-place write (as the interceptors do); a write before any flush is counted
    as stale (the tracer's UnseenWriteWarning)."""
    from pytest_graphir.capture.stats import StatsBatch

    t, u = torch.ones(10), torch.ones(10)
    seen, unseen = TensorMeta([10], "float32"), TensorMeta([10], "float32")
    batch = StatsBatch(batched=True)
    batch.add(t, seen)
    batch.flush()
    t.mul_(5)
    batch.add(u, unseen)
    u.mul_(5)
    batch.finish()
    assert seen.stats["mean"] == 1.0 and seen.stats["max"] == 1.0
    assert batch.stale == 1 and unseen.stats["mean"] == 5.0


def test_device_bucket_falls_back_to_each_tensor_when_cat_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """When the held tensors cannot be copied into rows (a tensor subclass that
    ``torch.cat`` refuses), each is reduced on its own: same numbers, nothing lost."""
    from pytest_graphir.capture import stats as stats_module

    cases = _row_cases()
    reference = stats_module.StatsBatch(batched=True)
    expected = [TensorMeta(list(t.shape), str(t.dtype)) for t in cases]
    for t, meta in zip(cases, expected, strict=True):
        reference.add(t, meta)
    reference.finish()

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise TypeError("cat refused")

    monkeypatch.setattr(stats_module.device.RowBucket, "_reduce", refuse)
    batch = stats_module.StatsBatch(batched=True)
    metas = [TensorMeta(list(t.shape), str(t.dtype)) for t in cases]
    for t, meta in zip(cases, metas, strict=True):
        batch.add(t, meta)
    batch.finish()
    for t, got, ref in zip(cases, metas, expected, strict=True):
        assert _close_to_scale(got.stats, _reference_counted(t)), (t, got.stats)
        assert got.stats.keys() == ref.stats.keys()


def test_dense_flat_reads_dense_layouts_in_place_and_refuses_the_others() -> None:
    """channels_last and transposed tensors are viewed flat in memory order (same
    elements, no copy); expanded and strided slices are not dense."""
    from pytest_graphir.capture.stats import dense_flat

    x = torch.randn(2, 3, 4, 5)
    for dense in (x, x.to(memory_format=torch.channels_last), x.transpose(1, 3), x[1]):
        flat = dense_flat(dense)
        assert flat is not None and flat.data_ptr() == dense.data_ptr()
        assert sorted(flat.tolist()) == sorted(dense.reshape(-1).tolist())
    assert dense_flat(torch.randn(3, 1).expand(3, 4)) is None
    assert dense_flat(x[:, :, ::2]) is None


def test_device_bucket_counts_sibling_views_of_one_base_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Chunks of one tensor (``qkv.chunk(3)``) keep one base alive: it is counted once,
    so the bucket does not flush for each chunk."""
    from pytest_graphir.capture import stats as stats_module

    monkeypatch.setattr(stats_module.device, "FLUSH_BYTES", 3000)
    batch = stats_module.StatsBatch(batched=True)
    a, b = torch.randn(2, 128).chunk(2)  # base 1024 bytes, each view 512
    batch.add(a, TensorMeta([1, 128], "float32"))
    batch.add(b, TensorMeta([1, 128], "float32"))
    bucket = next(iter(batch._buckets.values()))
    assert sum(map(len, bucket.held.values())) == 2
    assert bucket.held_bytes == 512 + 1024 + 512
    batch.finish()


def test_device_bucket_counts_the_base_a_held_view_keeps_alive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A small view of a large tensor keeps the large one alive while held: it counts
    towards FLUSH_BYTES with its base's size, so the bucket flushes at once."""
    from pytest_graphir.capture import stats as stats_module

    monkeypatch.setattr(stats_module.device, "FLUSH_BYTES", 1000)
    batch = stats_module.StatsBatch(batched=True)
    base = torch.randn(100, 10)  # 4000 bytes
    batch.add(base[:2], TensorMeta([2, 10], "float32"))  # 80 bytes of its own
    bucket = next(iter(batch._buckets.values()))
    assert bucket.held == {} and len(bucket.tables) == 1  # flushed: base counted
    batch.finish()


class _AtenOps(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the aten ops run under it, by name."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


def _joined_cases(k: int) -> list[torch.Tensor]:
    """``k`` tensors whose counts are whole multiples of the row classes: contiguous,
    transposed, channels_last and a sliced (not dense) view, 64 to 16K elements."""
    g = torch.Generator().manual_seed(k)
    out: list[torch.Tensor] = []
    for i in range(k):
        x = torch.randn(4, 16, 8, 8, generator=g) * (i + 1) + i
        out.append(
            [
                x,
                x.transpose(1, 3),
                x.contiguous(memory_format=torch.channels_last),
                x[:, ::2],
                x[0, 0],
            ][i % 5]
        )
    return out


@pytest.mark.parametrize("writes", [False, True])
def test_device_joins_cost_no_op_per_tensor(writes: bool) -> None:
    """Held tensors whose counts the row classes divide are joined by one
    ``torch._chunk_cat`` per class, copies before in-place writes included: the aten
    ops of a trace's statistics do not grow with the number of tensors, and every
    tensor's numbers match its float64 reference."""
    from pytest_graphir.capture.stats import StatsBatch

    ops = []
    for k in (10, 40):
        cases = _joined_cases(k)
        metas = [TensorMeta(list(t.shape), str(t.dtype)) for t in cases]
        batch = StatsBatch(batched=True)
        with _AtenOps() as counter:
            for i, (t, meta) in enumerate(zip(cases, metas, strict=True)):
                batch.add(t, meta)
                if writes and (i + 1) % (k // 2) == 0:
                    batch.flush()  # before a write: copied, not reduced
            batch.flush()  # the end of the forward
            batch.flush(final=True)  # what finish reduces before its copy
        ops.append(counter.names)
        batch.finish()
        for t, meta in zip(cases, metas, strict=True):
            assert _close_to_scale(meta.stats, _reference_counted(t)), (t.shape, meta.stats)
    few, many = ops
    assert few == many
    assert "aten._chunk_cat.default" in few
    assert not {"aten.slice.Tensor", "aten.as_strided.default", "aten.clone.default"} & set(few)


def test_device_snapshot_before_a_write_keeps_the_values_at_record_time() -> None:
    """A flush before an in-place write copies the held tensors of every row class;
    the write then changes none of their statistics, and tensors held after it join
    the same reduction."""
    from pytest_graphir.capture.stats import StatsBatch

    batch = StatsBatch(batched=True)
    early = [torch.ones(4096), torch.ones(256), torch.ones(64), torch.ones(3)]
    late = torch.full((4096,), 2.0)
    metas = [TensorMeta([t.numel()], "float32") for t in [*early, late]]
    for t, meta in zip(early, metas[:4], strict=True):
        batch.add(t, meta)
    batch.flush()
    for t in early:
        t.mul_(7)
    batch.add(late, metas[-1])
    batch.finish()
    assert batch.stale == 0
    assert [m.stats["mean"] for m in metas] == [1.0, 1.0, 1.0, 1.0, 2.0]
    assert [m.stats["max"] for m in metas] == [1.0, 1.0, 1.0, 1.0, 2.0]


def test_device_join_that_fails_reduces_copies_and_tensors_apart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """When the join of a class's copies and held tensors fails (a tensor subclass
    ``torch._chunk_cat`` refuses), the copies are reduced as they are and each held
    tensor on its own: same numbers."""
    from pytest_graphir.capture import stats as stats_module

    cases = _joined_cases(6)
    metas = [TensorMeta(list(t.shape), str(t.dtype)) for t in cases]
    batch = stats_module.StatsBatch(batched=True)
    for t, meta in zip(cases[:3], metas[:3], strict=True):
        batch.add(t, meta)
    batch.flush()  # copies of the first three
    for t, meta in zip(cases[3:], metas[3:], strict=True):
        batch.add(t, meta)

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise TypeError("join refused")

    monkeypatch.setattr(stats_module.device.RowBucket, "_reduce", refuse)
    batch.finish()
    for t, meta in zip(cases, metas, strict=True):
        assert _close_to_scale(meta.stats, _reference_counted(t)), (t.shape, meta.stats)


def test_settled_large_tensors_count_nan_and_inf_only_where_they_show(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A large tensor added while ``settled`` (the parameters after the forward) is
    reduced without its NaN/Inf counts; they are counted at the end only where its
    min, max or mean is not finite, and match the reference either way."""
    from pytest_graphir.capture import stats as stats_module

    monkeypatch.setattr(stats_module.device, "DIRECT_FROM", 100)
    clean = torch.randn(300)
    dirty = torch.randn(300)
    dirty[[5, 70]] = float("nan")
    dirty[9] = float("inf")
    metas = [TensorMeta([300], "float32") for _ in range(2)]
    batch = stats_module.StatsBatch(batched=True)
    batch.settled = True
    with _AtenOps() as counter:
        batch.add(clean, metas[0])
    assert not any("isnan" in n or "isinf" in n for n in counter.names)
    batch.add(dirty, metas[1])
    batch.finish()
    for t, meta in zip((clean, dirty), metas, strict=True):
        assert _close_to_scale(meta.stats, _reference_counted(t)), meta.stats
    assert (metas[1].stats["nan"], metas[1].stats["inf"]) == (2, 1)


def test_device_odd_counts_join_as_copies_of_themselves() -> None:
    """Small float and bool tensors whose count no row class divides (odd lengths,
    0-d, a NaN/Inf row) join the shortest class as copies of themselves: no row is
    cut from them, and every statistic, counts included, is that of one copy.
    Integers are never repeated (their int64 sums could wrap): they are cut."""
    from pytest_graphir.capture.stats import StatsBatch

    g = torch.Generator().manual_seed(3)
    floats = [
        torch.randn(7, 3, generator=g),
        torch.tensor(2.5),
        torch.tensor([1.0, float("nan"), float("inf"), -3.0, float("inf")]),
        torch.randn(33, generator=g).double(),
    ]
    bools = [torch.rand(5, 9, generator=g) > 0.5]
    ints = [torch.randint(-9, 9, (11,), generator=g)]
    cases = floats + bools + ints
    metas = [TensorMeta(list(t.shape), str(t.dtype)) for t in cases]
    batch = StatsBatch(batched=True)
    for t, meta in zip(cases, metas, strict=True):
        batch.add(t, meta)
    repeated = sum(len(b.copies) for b in batch._buckets.values())
    assert repeated == len(floats) + len(bools)
    assert any(0 in b.held for b in batch._buckets.values() if b.kind == "int")
    with _AtenOps() as counter:
        batch.finish()
    assert "aten.slice.Tensor" not in counter.names[: counter.names.index("aten.stack.default")]
    for t, meta in zip(floats, metas[: len(floats)], strict=True):
        assert _close_to_scale(meta.stats, _reference_counted(t)), (t, meta.stats)
    assert metas[len(floats)].stats == {"true": int(bools[0].sum())}
    (x,) = ints
    assert metas[-1].stats == {"min": int(x.min()), "max": int(x.max()), "sum": int(x.sum())}


def test_batched_statistics_after_the_forward_are_taken_at_once() -> None:
    """With ``defer`` off (after the forward: gradients, which autograd may write in
    place unseen) a device-bucket tensor is reduced when added, not held."""
    from pytest_graphir.capture.stats import StatsBatch

    t = torch.ones(10)
    meta = TensorMeta([10], "float32")
    batch = StatsBatch(batched=True)
    batch.defer = False
    batch.add(t, meta)
    t.mul_(5)  # no flush in between
    batch.finish()
    assert meta.stats["mean"] == 1.0 and batch.stale == 0


def _reference_counted(t: torch.Tensor) -> dict[str, float]:
    """:func:`_reference` (NaN/Inf propagate through it) with the NaN and Inf counts."""
    nan, inf = int(torch.isnan(t).sum()), int(torch.isinf(t).sum())
    return {**_reference(t), "nan": nan, "inf": inf}


def _close_to_scale(got: dict[str, Any], ref: dict[str, float]) -> bool:
    """Equal counts; each float within 1e-6 of the tensor's scale (max of |min|, |max|
    and std, as :class:`~pytest_graphir.compare.tolerance.Tolerance` scales): float32
    data cannot give its std more exactly than its values' rounding when |mean| >> std."""
    finite = [abs(ref[k]) for k in ("min", "max", "std") if math.isfinite(ref[k])]
    scale = max(finite, default=1.0)
    for key, b in ref.items():
        a = got[key]
        if isinstance(b, float) and math.isnan(b):
            if not math.isnan(a):
                return False
        elif a != b and not abs(a - b) <= 1e-6 * scale:
            return False
    return True


def _row_cases() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(11)
    big = torch.randn(7, 9, generator=g) * 3 - 1
    return [
        torch.tensor([1.0, float("nan"), 2.0, float("inf"), -float("inf")]),  # garbage later
        torch.randn(3, generator=g),  # shorter than a row
        torch.randn(16, generator=g) + 100,  # two whole rows, |mean| >> std
        big,  # 63 elements: reduced where it lies
        big.t(),  # the same, non-contiguous
        torch.randn(21, generator=g, dtype=torch.float64),  # its own (float64) bucket
        torch.randn(13, generator=g).half(),  # widened to float32 by the copy
        torch.randn(40, generator=g).half(),  # large, half: widened in chunks of 24
        torch.randn(5, 5, generator=g).t(),  # held, not contiguous (read in memory order)
        torch.randn(2, 3, 2, 2, generator=g).to(memory_format=torch.channels_last),
        torch.randn(3, 1, generator=g).expand(3, 4),  # zero stride: copied
        torch.randn(4, 6, generator=g)[:, ::2],  # strided slice: copied
        torch.tensor([5.0, float("inf"), 1.0, 2.0, 3.0, 4.0, 6.0, 7.0, 8.0]),
        torch.full((11,), 1e4) + torch.randn(11, generator=g) * 1e-2,
        torch.randn(50, generator=g)
        .index_fill(0, torch.tensor([20]), math.inf)
        .index_fill(0, torch.tensor([45, 47]), math.nan),  # direct, counted in chunks
    ]


_CUDA = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device: the same path on CUDA tensors"
)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=_CUDA)])
def test_device_buckets_match_float64_at_every_row_boundary(
    monkeypatch: pytest.MonkeyPatch, device: str
) -> None:
    """The device path with rows of 8 elements and flushes at 96 bytes: tensors shorter
    than a row, of whole rows and partial ones, reduced where they lie (contiguous or
    not), half and double, NaN and Inf in whole and partial rows. Every number matches
    a float64 reference within 1e-6 of the tensor's scale; rows padded after a
    NaN/Inf tensor never leak into the next tensor's numbers."""
    from pytest_graphir.capture import stats as stats_module

    monkeypatch.setattr(stats_module.device, "ROW_LENGTH", 8)
    monkeypatch.setattr(stats_module.device, "ROW_CLASSES", (8,))
    monkeypatch.setattr(stats_module.device, "REPEAT_UP_TO", 0)  # cut into rows
    monkeypatch.setattr(stats_module.device, "FLUSH_BYTES", 3 * 8 * 4)
    monkeypatch.setattr(stats_module.device, "DIRECT_FROM", 30)
    monkeypatch.setattr(stats_module.device, "COUNT_CHUNK", 16)
    batch = stats_module.StatsBatch(batched=True)
    cases = [t.to(device) for t in _row_cases()]
    metas = [TensorMeta(list(t.shape), str(t.dtype)) for t in cases]
    for t, meta in zip(cases, metas, strict=True):
        batch.add(t, meta)
        bucket = batch._buckets[(t.device, t.dtype)]
        assert bucket.held_bytes < 3 * 8 * 4  # bounded: flushed when full
    assert len(bucket.tables) >= 3 and len(bucket.direct) == 3
    # keyed by the tensors' own device: ``cuda:0``, not the ``cuda`` asked for
    (half_device,) = {t.device for t in cases if t.dtype == torch.float16}
    half = batch._buckets[(half_device, torch.float16)]
    assert [t.numel() for t, _, _ in half.held[0]] == [13]  # small: held
    layout = [(runs, row) for _, runs, row in half.tables]
    assert layout == [([(1, 3)], 8), ([(1, 2)], 8)]  # 40 elements: 24 + 16, no hold
    assert all(m.stats == {} for m in metas)  # nothing reached the host yet
    batch.finish()
    for t, meta in zip(cases, metas, strict=True):
        assert _close_to_scale(meta.stats, _reference_counted(t)), (t, meta.stats)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=_CUDA)])
def test_device_buckets_overflow_as_the_cpu_path_does(
    monkeypatch: pytest.MonkeyPatch, device: str
) -> None:
    """Attention masks filled with finfo(float32).min (T5, Llama): the CPU path's
    float32 sum overflows, so its mean is -Inf and its std Inf; the device path's
    row-wise Welford mean would stay finite. Both give the CPU path's numbers, or a
    snapshot written on one device fails on the other (found on T5)."""
    from pytest_graphir.capture import stats as stats_module

    monkeypatch.setattr(stats_module.device, "ROW_LENGTH", 8)
    monkeypatch.setattr(stats_module.device, "DIRECT_FROM", 40)
    low = torch.finfo(torch.float32).min
    mask = torch.triu(torch.full((7, 7), low), diagonal=1)  # 21 of 49 at min
    cases = [mask, torch.full((3, 5), low), torch.full((9, 9), low).triu(1), -mask]
    cases.append(torch.full((4,), low / 2))  # the sum overflows, the values do not
    batch, cpu = stats_module.StatsBatch(batched=True), stats_module.StatsBatch()
    pairs = []
    for t in cases:
        got, ref = TensorMeta(list(t.shape), "float32"), TensorMeta(list(t.shape), "float32")
        batch.add(t.to(device), got)
        cpu.add(t, ref)
        pairs.append((got, ref))
    batch.finish()
    cpu.finish()
    for got, ref in pairs:
        assert got.stats == ref.stats or _close_to_scale(got.stats, ref.stats), (got, ref)
        assert math.isinf(ref.stats["mean"]) == math.isinf(got.stats["mean"])


def test_device_bucket_statistics_do_not_depend_on_their_neighbours(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A tensor's numbers are the same bits whether it is alone in the bucket or
    recorded after others (each tensor starts on a row of its own)."""
    from pytest_graphir.capture import stats as stats_module

    monkeypatch.setattr(stats_module.device, "ROW_LENGTH", 8)
    monkeypatch.setattr(stats_module.device, "ROW_CLASSES", (8,))
    monkeypatch.setattr(stats_module.device, "REPEAT_UP_TO", 0)  # cut into rows
    monkeypatch.setattr(stats_module.device, "FLUSH_BYTES", 3 * 8 * 4)
    target = torch.randn(19, generator=torch.Generator().manual_seed(3)) * 7
    alone = TensorMeta([19], "float32")
    batch = stats_module.StatsBatch(batched=True)
    batch.add(target, alone)
    batch.finish()
    after = TensorMeta([19], "float32")
    batch = stats_module.StatsBatch(batched=True)
    for case in _row_cases()[:3]:
        batch.add(case, TensorMeta(list(case.shape), str(case.dtype)))
    batch.add(target, after)
    batch.finish()
    assert after.stats == alone.stats and alone.stats["std"] > 0


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_trace_with_batched_statistics_compares_equal(
    monkeypatch: pytest.MonkeyPatch, backward: bool
) -> None:
    """A whole trace with every float tensor batched (the CUDA path, here on the CPU)
    compares equal to the per-tensor trace: the two paths give one snapshot, gradients
    included (computed at once: autograd accumulates them in place, unseen)."""
    import functools

    from pytest_graphir.capture import stats as stats_module
    from pytest_graphir.capture import tracer
    from pytest_graphir.compare import compare
    from pytest_graphir.serialize import dumps, loads

    torch.manual_seed(0)
    model, (x,) = models.tiny_transformer()
    plain = loads(dumps(trace(model, x, backward=backward)))
    monkeypatch.setattr(
        tracer, "StatsBatch", functools.partial(stats_module.StatsBatch, batched=True)
    )
    batched = loads(dumps(trace(model, x, backward=backward)))
    result = compare(plain, batched)
    assert not result, "\n".join(result.lines())
    means = [
        o["mean"]
        for n in batched["nodes"].values()
        for o in n["out"]
        if isinstance(o, dict) and "mean" in o
    ]
    assert len(means) > 10  # the batched path filled the statistics


@pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs a CUDA device: the batched statistics path runs on CUDA tensors",
)
def test_cpu_and_cuda_traces_give_one_snapshot() -> None:
    from pytest_graphir.compare import compare
    from pytest_graphir.serialize import dumps, loads

    torch.manual_seed(0)
    model, (x,) = models.tiny_transformer()
    on_cpu = loads(dumps(trace(model, x)))
    on_cuda = loads(dumps(trace(model.cuda(), x.cuda())))
    result = compare(on_cpu, on_cuda)
    assert not result, "\n".join(result.lines())


# -- held (batched) statistics of small CPU tensors ----------------------------------


@pytest.mark.usefixtures("torch_reductions")
def test_held_statistics_do_not_depend_on_their_batch() -> None:
    """A tensor's statistics are the same numbers, bit for bit, whether it is computed
    alone, with others of its shape, or at once (held back or not): a model change
    elsewhere cannot move them."""
    g = torch.Generator().manual_seed(7)
    target = torch.randn(64, 64, generator=g) * 3 + 0.5
    others = [torch.randn(64, 64, generator=g) for _ in range(9)]

    def held(tensors: list[torch.Tensor], at: int) -> dict[str, float | int]:
        metas = [TensorMeta([64, 64], "float32") for _ in tensors]
        batch = StatsBatch()
        for t, m in zip(tensors, metas, strict=True):
            batch.add(t, m)
        assert all(m.stats == {} for m in metas)  # held, not computed yet
        batch.finish()
        return metas[at].stats

    alone = held([target], 0)
    assert held([*others[:4], target, *others[4:]], 4) == alone
    assert held([target.t().contiguous().t()], 0) == alone  # non-contiguous: the same
    ref = _reference(target)
    for key in ("mean", "std", "min", "max"):
        assert _close(alone[key], ref[key]), (key, alone[key], ref[key])


class _WritesAfterRecording(nn.Module):
    """Each output below is recorded, then written in place by a different kind of
    call; each node must keep the statistics of the value its op returned."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = x * 2  # mul#0: 2x
        a.add_(100)  # method ending in _
        b = x + 1  # add#0: x + 1
        b[0] = 1000  # __setitem__
        c = x - 1  # sub#0: x - 1
        F.relu(c, True)  # inplace flag passed positionally
        d = x * 3  # mul#1: 3x
        torch.mul(x, 10, out=d)  # out=
        e = x / 2  # div#0: x / 2
        e += 50  # __iadd__
        f = x.abs()  # abs#0: |x|
        f.data.mul_(0)  # writes through .data, which does not bump _version
        return a + b + c + d + e + f


class Hidden(nn.Module):
    """Writes its intermediate where no interceptor sees it (under
    DisableTorchFunction, as a C++ extension might) after the op that made it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        with torch._C.DisableTorchFunction():
            y.add_(1)
        return y + 0


_HELD_PATHS = ["cpu", "buckets", pytest.param("cuda", marks=_CUDA)]
"""Where held statistics live: small CPU tensors with torch reductions (cpu: no C
extension), the device buckets run on CPU tensors (buckets), or on CUDA tensors (cuda)."""

_PATHS = [*_HELD_PATHS[:1], pytest.param("fused", marks=_FUSED), *_HELD_PATHS[1:]]
"""Those, and CPU tensors computed at once by the C extension (fused)."""


def _on_path(path: str, monkeypatch: pytest.MonkeyPatch, x: torch.Tensor) -> torch.Tensor:
    import functools

    from pytest_graphir.capture import stats as stats_module
    from pytest_graphir.capture import tracer

    if path == "buckets":
        batched = functools.partial(stats_module.StatsBatch, batched=True)
        monkeypatch.setattr(tracer, "StatsBatch", batched)
    if path == "cpu":
        monkeypatch.setattr(stats_module, "_moments", None)
    return x.cuda() if path == "cuda" else x


@pytest.mark.parametrize("path", _PATHS)
@pytest.mark.parametrize("interceptor", ["mode", "patch"])
def test_statistics_are_taken_before_later_in_place_writes(
    interceptor: Any, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small tensors' statistics are held back; every kind of in-place write that
    follows (method, __setitem__, inplace=, out=, +=, .data) first computes them, so each
    node shows what its op returned, as an eager recomputation says."""
    x = _on_path(path, monkeypatch, torch.linspace(-2, 7, 24).reshape(4, 6))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no UnseenWriteWarning: every write was seen
        g = trace(_WritesAfterRecording(), x, interceptor=interceptor)
    expected = {"mul#0": x * 2, "add#0": x + 1, "sub#0": x - 1, "mul#1": x * 3}
    expected.update({"div#0": x / 2, "abs#0": x.abs()})
    for name, value in expected.items():
        got = g.node(name).outputs[0].stats
        ref = _reference(value)
        for key in ("mean", "std", "min", "max"):
            assert _close(got[key], ref[key]), (name, key, got[key], ref[key])


@pytest.mark.parametrize("path", ["cpu", "buckets"])
@pytest.mark.parametrize("expose", ["numpy", "data_ptr", "untyped_storage"])
@pytest.mark.parametrize("interceptor", ["mode", "patch"])
def test_writes_through_exposed_memory_flush_held_statistics(
    interceptor: Any, expose: str, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Code that takes a tensor's memory (``numpy()``, ``data_ptr()`` as a Triton or
    ctypes kernel does, ``untyped_storage()``) may write it without a torch op and
    without bumping ``_version``: both interceptors compute held statistics first."""
    import ctypes

    def write(h: torch.Tensor) -> None:
        if expose == "numpy":
            h.numpy()[...] = 7.0
        elif expose == "data_ptr":
            ctypes.memset(h.data_ptr(), 0, h.numel() * h.element_size())
        else:
            storage = h.untyped_storage()
            ctypes.memset(storage.data_ptr(), 0, storage.nbytes())

    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = x * 1.0  # mul#0, held, then written through its memory
            write(h)
            return h + 0

    x = _on_path(path, monkeypatch, torch.linspace(1, 3, 24).reshape(4, 6))
    got = trace(M(), x, interceptor=interceptor).node("mul#0").outputs[0].stats
    ref = _reference(x)
    for key in ("mean", "std", "min", "max"):
        assert _close(got[key], ref[key]), (key, got[key], ref[key])


@pytest.mark.parametrize("path", _HELD_PATHS)
def test_unseen_in_place_write_is_warned(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write no interceptor sees (here: under DisableTorchFunction, as a C++ extension
    might write) after a tensor was recorded is reported, naming the model and a fix."""
    from pytest_graphir.capture import UnseenWriteWarning

    x = _on_path(path, monkeypatch, torch.ones(3))
    with pytest.warns(UnseenWriteWarning, match=r"1 tensor\(s\) of Hidden .* stats=False"):
        trace(Hidden(), x)


def test_may_write_classifies_in_place_calls() -> None:
    """The calls that trigger computing held statistics, and some that do not."""
    from pytest_graphir.capture.writes import may_write

    x = torch.ones(2)
    data_getter: Any = torch.Tensor.data
    shape_getter: Any = torch.Tensor.shape
    writes: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = [
        (torch.Tensor.add_, (x, 1), {}),
        (torch.relu_, (x,), {}),
        (torch.Tensor.__setitem__, (x, 0, 1.0), {}),
        (torch.Tensor.__iadd__, (x, 1), {}),
        (torch.add, (x, 1), {"out": x}),
        (F.relu, (x,), {"inplace": True}),
        (F.relu, (x, True), {}),
        (F.dropout, (x, 0.5, True, True), {}),
        (data_getter.__get__, (x,), {}),
        (torch.Tensor.numpy, (x,), {}),
        (torch.ops.aten.add.out, (x, x), {"out": x}),
        (torch.ops.aten.add_.Tensor, (x, x), {}),
    ]
    reads: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = [
        (torch.add, (x, 1), {}),
        (torch.Tensor.add, (x, 1), {}),
        (F.relu, (x,), {}),
        (F.relu, (x, False), {}),
        (F.dropout, (x, 0.5, False, False), {}),
        (shape_getter.__get__, (x,), {}),
        (torch.Tensor.__getitem__, (x, 0), {}),
        (torch.Tensor.__add__, (x, 1), {}),
        (torch.ops.aten.add.Tensor, (x, x), {}),
    ]
    assert [may_write(f, a, k) for f, a, k in writes] == [True] * len(writes)
    assert [may_write(f, a, k) for f, a, k in reads] == [False] * len(reads)


def test_first_trace_in_a_process_writes_the_same_snapshot_as_later_ones() -> None:
    """The statistics path a tensor takes never depends on what the process saw
    before (per-dtype caches are filled before they are read): a fresh interpreter's
    first trace and its second give the same text, byte for byte."""
    import os
    import pathlib
    import subprocess
    import sys

    script = (
        "import torch\n"
        "from pytest_graphir import trace\n"
        "from pytest_graphir.serialize import dumps\n"
        "import models\n"
        "torch.manual_seed(0)\n"
        "model, (x,) = models.tiny_transformer()\n"
        "def raw(g):  # unrounded: the snapshot text rounds to 6 digits\n"
        "    return repr([o.stats for n in g.nodes for o in n.outputs if hasattr(o, 'stats')])\n"
        "g1, g2 = trace(model, x), trace(model, x)\n"
        "assert dumps(g1) == dumps(g2), 'first and second snapshot text differ'\n"
        "assert raw(g1) == raw(g2), 'first and second trace differ'\n"
        "a = dumps(g1)\n"
        "print('same', a.count('mean'))\n"
    )
    fixtures = pathlib.Path(__file__).parent.parent / "fixtures"
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(fixtures)},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("same") and int(out.stdout.split()[1]) > 5


@pytest.mark.usefixtures("reductions")
@pytest.mark.parametrize(
    "n",
    [40_000, 2**15 * 3, 300_007],  # a row length dividing n, a power-of-two one, a remainder
)
@pytest.mark.parametrize("offset", [0.5, 1e4], ids=["one-pass", "two-pass"])
def test_large_tensor_statistics_match_float64(n: int, offset: float) -> None:
    """Large contiguous tensors: the one-pass variance where it is accurate, two passes
    where the mean dwarfs the spread; both within 1e-6 of a float64 reference (std)."""
    g = torch.Generator().manual_seed(n)
    t = torch.randn(n, generator=g) * 3 + offset
    t[n // 3] = -40 + offset  # min and max away from the row boundaries
    t[n - 1] = 50 + offset  # in the remainder, when there is one
    got, ref = _stats(t), _reference(t)
    assert got["min"] == ref["min"] and got["max"] == ref["max"]
    assert _close(got["mean"], ref["mean"], 1e-6)
    assert _close(got["std"], ref["std"], 1e-6 if offset < 1 else 1e-4), (got["std"], ref["std"])


@pytest.mark.usefixtures("reductions")
@pytest.mark.parametrize("where", [0, 50_000, 99_999], ids=["first", "middle", "remainder"])
def test_large_tensor_nan_and_inf_are_counted_wherever_they_are(where: int) -> None:
    """One NaN (or Inf) in a large tensor, in a full row or in the remainder: NaN
    min/max/mean/std (Inf: that extreme), and the counts exact."""
    t = torch.linspace(-1, 1, 100_000)
    t[where] = float("nan")
    got = _stats(t)
    assert math.isnan(got["min"]) and math.isnan(got["max"]) and math.isnan(got["std"])
    assert (got["nan"], got["inf"]) == (1, 0)
    t[where] = -float("inf")
    got = _stats(t)
    assert got["min"] == -math.inf and got["max"] == t[torch.isfinite(t)].max().item()
    assert math.isnan(got["std"]) and (got["nan"], got["inf"]) == (0, 1)


@pytest.mark.usefixtures("reductions")
def test_large_permuted_tensor_statistics_match_float64() -> None:
    """A large non-contiguous tensor takes the two-pass path, with the same accuracy."""
    g = torch.Generator().manual_seed(11)
    t = (torch.randn(64, 300, 20, generator=g) * 2 - 1).transpose(0, 2)
    assert not t.is_contiguous() and t.numel() > 2**15
    got, ref = _stats(t), _reference(t)
    for key in ("mean", "std", "min", "max"):
        assert _close(got[key], ref[key], 1e-6), (key, got[key], ref[key])


def test_trace_leaves_no_reference_cycle_holding_the_model() -> None:
    """Once trace() returns and the caller drops the model, reference counting frees
    it (and every tensor the trace held for its statistics): no cycle waits for the
    garbage collector, which a test suite loading a model per test would feel as
    memory (or GPU memory) piling up."""
    import gc
    import weakref

    model, (x,) = models.tiny_transformer()
    alive = weakref.ref(model)
    gc.disable()  # only reference counting may free it
    try:
        graph = trace(model, x, hooks=True)
        del model
        assert alive() is None, "the model outlived trace() in a reference cycle"
        assert graph.nodes
    finally:
        gc.enable()


@pytest.mark.parametrize(
    "write",
    [
        lambda h: F.batch_norm(h, h[0], torch.ones(6), training=True, momentum=1.0),
        lambda h: F.embedding(torch.tensor([0, 1]), h, max_norm=0.5),
        lambda h: F.hardtanh(h, 0.0, 2.0, inplace=1),  # type: ignore[arg-type]  # truthy, not True
        lambda h: torch.ops.graphir_test.scale(h),  # a custom op's OpOverloadPacket
    ],
    ids=["batch_norm-running-stats", "embedding-max_norm", "inplace-1", "ops-packet"],
)
def test_conditional_and_op_writes_flush_held_statistics(write: Any) -> None:
    """Calls whose write depends on another argument, or that reach the mode as an
    OpOverloadPacket, compute held statistics first: the producing node keeps the
    value its op returned."""

    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = x * 1.0  # mul#0, held, then written (in place) by `write`
            write(h)
            return h + 0

    x = torch.linspace(1, 3, 24).reshape(4, 6)
    g = trace(M(), x)
    got, ref = g.node("mul#0").outputs[0].stats, _reference(x)
    for key in ("mean", "std", "min", "max"):
        assert _close(got[key], ref[key]), (key, got[key], ref[key])


def test_read_only_calls_do_not_flush() -> None:
    """out=None (F.normalize passes it through) and inplace=False are reads; so is an
    aten packet whose only written arguments are out= ones."""
    from pytest_graphir.capture.writes import may_write

    x = torch.ones(2)
    assert not may_write(torch.nn.functional.normalize, (x,), {"out": None})
    assert not may_write(F.batch_norm, (x, None, None), {"training": False})
    assert not may_write(F.embedding, (x, x), {"max_norm": None})
    assert not may_write(torch.ops.aten.add, (x, x), {})
    assert may_write(torch.ops.aten.add, (x, x), {"out": x})
    assert may_write(F.batch_norm, (x, None, None), {"training": True})
    assert may_write(torch.ops.graphir_test.scale, (x,), {})


@pytest.mark.parametrize("interceptor", ["mode", "patch"])
def test_data_assignment_flushes_held_statistics(interceptor: Any) -> None:
    """`h.data = other` replaces h's memory without bumping its version; both
    interceptors compute h's held statistics first."""

    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = x + 0.0
            h.data = torch.full_like(h, 7.0)
            return h * 1

    x = torch.linspace(1, 3, 24).reshape(4, 6)
    got, ref = trace(M(), x, interceptor=interceptor).node("add#0").outputs[0].stats, _reference(x)
    assert (got["min"], got["max"]) == (ref["min"], ref["max"])


def test_write_classes_are_cached_with_a_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """Callables made per call (a fresh partial each time) do not pile up in the cache;
    an unhashable callable is classified without it."""
    import functools

    from pytest_graphir.capture import mode, writes

    monkeypatch.setattr(mode, "MAX_CACHED", 4)
    monkeypatch.setattr(mode, "_OPS", {})
    for _ in range(10):
        assert mode.op_info(functools.partial(torch.add, alpha=1))[2] == writes.NEVER
        assert len(mode._OPS) <= 4

    class Unhashable:
        __hash__ = None  # type: ignore[assignment]

        def add_(self) -> None: ...

    assert mode.op_info(Unhashable().add_)[2] == writes.classify(Unhashable().add_)


def test_distributed_calls_count_as_writes() -> None:
    """Collectives write their tensors in place (a gloo all_reduce without a version
    bump): classified as writes without running one."""
    from pytest_graphir.capture.writes import ALWAYS, classify

    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available():
        pytest.skip("this torch build has no torch.distributed")
    assert classify(dist.all_reduce) == ALWAYS
    assert classify(dist.broadcast) == ALWAYS


def test_trace_keeps_the_processes_own_frozen_objects_frozen() -> None:
    """trace() moves its objects to the oldest generation with gc.freeze() +
    gc.unfreeze() only when nothing else is frozen: a process that froze objects
    itself (a pre-fork server) finds them frozen afterwards, also after an error.
    (Frozen objects are absent from ``gc.get_objects()``; the freeze count itself can
    drop while a trace runs, as frozen objects are freed by reference counting.)"""
    import gc

    class Marker:
        pass

    def frozen(obj: object) -> bool:
        return not any(o is obj for o in gc.get_objects())

    model, (x,) = models.tiny_transformer()
    marker = Marker()
    assert not frozen(marker)
    gc.freeze()
    try:
        assert frozen(marker)
        trace(model, x)
        assert frozen(marker)
        with pytest.raises(TypeError):
            trace(model, "not a tensor")  # type: ignore[arg-type]
        assert frozen(marker)
    finally:
        gc.unfreeze()


# -- the C extension (fused) -------------------------------------------------------------


def _layouts(t: torch.Tensor) -> list[torch.Tensor]:
    """``t`` (n elements) contiguous, and as dense non-contiguous tensors when n allows."""
    out = [t]
    n = t.numel()
    if n % 4 == 0 and n >= 8:
        out.append(t.reshape(4, n // 4).t())  # transposed
    if n % 6 == 0 and n >= 12:
        c = t.reshape(1, 3, 2, n // 6).to(memory_format=torch.channels_last)
        out.append(c)
    return out


@_FUSED
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("n", [1, 15, 16, 17, 48, 4099, 300_000])
@pytest.mark.parametrize("offset", [0.5, 1e4], ids=["one-pass", "two-pass"])
def test_fused_statistics_match_float64(dtype: torch.dtype, n: int, offset: float) -> None:
    """One pass of the C extension, at and around its 16-lane boundaries, contiguous or
    read in memory order: min and max exact, mean and std within 1e-9 of a float64
    computation over the same values (its sums are float64 lanes; |mean| >> std takes
    the second pass)."""
    g = torch.Generator().manual_seed(n)
    base = (torch.randn(n, generator=g, dtype=torch.float64) * 3 + offset).to(dtype)
    if n > 2:
        base[n // 2] = offset - 40  # min and max away from lane 0
        base[n - 1] = offset + 50  # in the tail, when there is one
    for t in _layouts(base):
        got = stats.fused_stats(t)
        assert got is not None, t.shape
        ref = _reference(t)
        assert (got["min"], got["max"]) == (ref["min"], ref["max"])
        assert math.isclose(got["mean"], ref["mean"], rel_tol=1e-9), (got, ref)
        assert math.isclose(got["std"], ref["std"], rel_tol=1e-9, abs_tol=1e-12), (got, ref)
        assert (got["nan"], got["inf"]) == (0, 0)


@_FUSED
def test_fused_declines_what_it_cannot_read_and_torch_takes_over() -> None:
    """float16, broadcast and sliced memory, a negative view, NaN and Inf are left to
    torch's reductions (fused_stats gives None); the tracer's numbers for them are still
    exact: counts, NaN propagation, values of the view rather than of its memory."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(6, 8, generator=g)
    cases = {
        "float16": x.half(),
        "expanded": torch.randn(3, 1, generator=g).expand(3, 5),
        "sliced": x[:, ::2],
        "negative view": torch._neg_view(x),
        "nan": torch.tensor([1.0, float("nan"), 3.0]),
        "inf": torch.tensor([1.0, float("inf"), 3.0]),
        "-inf in the tail": torch.cat([torch.ones(16), torch.tensor([-float("inf")])]),
    }
    for name, t in cases.items():
        assert stats.fused_stats(t) is None, name
        got = _stats(t)
        finite = t.isfinite().all()
        assert (got["nan"], got["inf"]) == (int(t.isnan().sum()), int(t.isinf().sum())), name
        if finite:
            ref = _reference(t)
            assert _close(got["mean"], ref["mean"]) and (got["min"], got["max"]) == (
                ref["min"],
                ref["max"],
            ), name
    assert _stats(cases["negative view"])["max"] == float(-x.min())
    assert math.isnan(_stats(cases["nan"])["mean"])


@_FUSED
def test_views_the_kernel_cannot_read_in_place_take_it_from_a_copy() -> None:
    """A plain float CPU tensor that is not dense (GPT-2's ``split`` of ``c_attn``, an
    expanded view) gets the C kernel's numbers for a contiguous copy of itself, never
    the device path's; a wrapper subclass, a contiguous tensor and NaN are not copied.
    Longer than the kernel's prefetch distance (2,048 elements), the last elements
    included in min and max."""
    g = torch.Generator().manual_seed(5)
    qkv = torch.randn(64, 3 * 768, generator=g)
    qkv[-1, 767] = 9.0  # the last element of the first slice, far past the prefetch
    cases = [qkv.split(768, 1)[0], torch.randn(5, 1, generator=g).expand(5, 3000)]
    for t in cases:
        got = stats.cpu.copied_stats(t)
        assert got == stats.fused_stats(t.contiguous()) and got is not None
        assert got["max"] == _reference(t)["max"] and _close(got["std"], _reference(t)["std"])
    assert stats.cpu.copied_stats(qkv) is None  # contiguous: fused_stats' own answer
    assert stats.cpu.copied_stats(torch.tensor([1.0, 0.0, math.nan, 2.0])[::2]) is None


@_FUSED
def test_fused_statistics_overflow_as_torch_float32_reductions_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """float32 masks filled with finfo(float32).min: the fused path's float64 sums do
    not overflow, but it reports what torch's float32 reductions give (mean -Inf and
    std Inf when the sum leaves float32's range, std Inf when the squared deviations
    do), so a snapshot does not depend on whether the extension was built."""
    from pytest_graphir.capture import stats as stats_module

    low = torch.finfo(torch.float32).min
    cases = [
        torch.triu(torch.full((7, 7), low), diagonal=1),  # the sum overflows
        torch.tensor([low, 0.0, 0.0, 0.0]),  # the sum does not, the deviations do
        torch.full((4,), low / 2),  # the values do not overflow, their sum does
        torch.tensor([low, 0.0], dtype=torch.float64),  # float64: nothing overflows
        torch.full((182, 182), low).triu(1),  # 33k elements: torch's one-pass way
        torch.full((40_000,), low),  # the same, every value at min
        torch.tensor([low, -1e30]),  # beyond FLT_MAX, but a float32 sum stays finite
    ]
    fused = [_stats(t) for t in cases]
    monkeypatch.setattr(stats_module, "_moments", None)
    by_torch = [_stats(t) for t in cases]
    for t, a, b in zip(cases, fused, by_torch, strict=True):
        assert (a["mean"], a["std"], a["min"], a["max"]) == pytest.approx(
            (b["mean"], b["std"], b["min"], b["max"]), rel=1e-6
        ), (t, a, b)
    assert fused[0]["mean"] == -math.inf and fused[0]["std"] == math.inf
    assert math.isfinite(fused[1]["mean"]) and fused[1]["std"] == math.inf
    assert math.isfinite(fused[3]["std"])
    for big in (cases[4], cases[5]):  # as Tensor.mean and Tensor.std give them
        assert float(big.mean()) == -math.inf and float(big.std(unbiased=False)) == math.inf
    assert [s["std"] for s in fused[4:6]] == [math.inf, math.inf]
    assert math.isfinite(float(cases[6].sum())) and math.isfinite(fused[6]["mean"])


@_FUSED
def test_fused_statistics_are_taken_when_the_op_returns() -> None:
    """With the C extension a CPU tensor's statistics are computed when its op returns:
    a later write no interceptor sees cannot change them, and nothing is warned."""

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = trace(Hidden(), torch.ones(3))
    assert g.node("mul#0").outputs[0].stats["mean"] == 2.0
    assert g.node("add#0").outputs[0].stats["mean"] == 3.0


def test_the_extension_is_built_where_ci_requires_it() -> None:
    """.ci/run sets GRAPHIR_REQUIRE_FUSED=1 where a C compiler is found: there a failed
    build of the optional C extension (setup.py, optional=True, which only warns)
    fails the run instead of silently falling back to the slower torch reductions."""
    import os

    if not os.environ.get("GRAPHIR_REQUIRE_FUSED"):
        pytest.skip("GRAPHIR_REQUIRE_FUSED is not set: the extensions are optional here")
    assert FUSED, "pytest_graphir.capture._moments did not build: see the pip install log"


@_FUSED
def test_fused_statistics_record_nothing_under_the_patch_interceptor() -> None:
    """The fused path's own tensor queries (the data pointer, and reading a transposed or
    channels_last tensor in memory order) never reach the patch interceptor's wrappers:
    nothing is recorded and nothing flushes, even called where a model's own call would
    be recorded (depth 0)."""
    from pytest_graphir.capture.patch import PatchInterceptor

    x = torch.randn(2, 3, 4, 5)
    tensors = [x, x.transpose(1, 3), x.contiguous(memory_format=torch.channels_last)]
    events: list[str] = []
    flushes: list[int] = []

    def record(name: str, *rest: Any) -> None:
        events.append(name)

    with PatchInterceptor(record, before_write=lambda: flushes.append(1)):
        got = [stats.fused_stats(t) for t in tensors]
    assert all(g is not None for g in got)
    assert (events, flushes) == ([], [])


_FLOAT32_MAX = float(torch.finfo(torch.float32).max)


def _near_limit_cases() -> dict[str, torch.Tensor]:
    low = torch.finfo(torch.float32).min
    return {
        "constant -1e30 (RWKV's masks)": torch.full((32,), -1e30),
        "constant -1e30, large": torch.full((40_000,), -1e30),
        "constant 3e37": torch.full((3,), 3e37),
        "+-1e20": torch.tensor([1e20, -1e20]).repeat(16),
        "spread 3e19": torch.linspace(-3e19, 3e19, 32),
        "spread 2e17, large": torch.linspace(-2e17, 2e17, 40_000),
        "spread 1e17, large": torch.linspace(-1e17, 1e17, 40_000),
        "one finfo.min among zeros": torch.zeros(64).index_fill(0, torch.tensor([5]), low),
        "finfo.min/2 four times": torch.full((4,), low / 2),
    }


@pytest.mark.parametrize("case", list(_near_limit_cases()))
def test_every_statistics_path_agrees_near_float32s_limits(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finite float32 values whose sum or squared deviations reach float32's limit.
    The rule (stats.cpu._float32_ssd): the mean is Inf where the exact sum is beyond
    float32's range, the std where that is so or where the exact sum of squared
    deviations is. Every path gives it: the C extension, torch reductions (held or at
    once), a strided view of the same values (never the fused pass), and the device
    path. A float32 second pass about the float32-rounded mean once made RWKV's constant
    -1e30 mask's std Inf on the CPU (0 on the device), and ``linspace(-2e17, 2e17,
    40000)``'s finite in one pass of rows (Inf in C): a snapshot then failed on the
    other device or install."""
    t = _near_limit_cases()[case]
    x = t.double()
    mean, ssd = x.mean().item(), ((x - x.mean()) ** 2).sum().item()
    mean_inf = abs(x.sum().item()) > stats.kinds.FLOAT32_OVERFLOW
    std_inf = mean_inf or ssd > _FLOAT32_MAX
    strided = torch.stack([t, t], -1)[..., 0]  # the same values, not dense

    def run(x: torch.Tensor, batched: bool | None, fused: bool) -> dict[str, float | int]:
        if not fused:
            monkeypatch.setattr(stats, "_moments", None)
        result = _stats(x, batched)
        monkeypatch.undo()
        return result

    got = {
        "torch": run(t, None, False),
        "torch, strided": run(strided, None, False),
        "strided, C extension built": run(strided, None, True),
        "device path": run(t, True, False),
    }
    if FUSED:
        got["C extension"] = run(t, None, True)
    scale = x.abs().max().item()
    for path, s in got.items():
        assert math.isinf(s["mean"]) == mean_inf, (path, s, mean)
        assert math.isinf(s["std"]) == std_inf, (path, s, math.sqrt(ssd / x.numel()))
        if not std_inf:
            assert abs(s["std"] - math.sqrt(ssd / x.numel())) <= 1e-5 * scale, (path, s)
        if not mean_inf:
            assert abs(s["mean"] - mean) <= 1e-5 * scale, (path, s)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_misaligned_tensor_statistics_are_taken_the_torch_way(dtype: torch.dtype) -> None:
    """``torch.frombuffer`` at an odd byte offset gives a tensor whose elements are not
    aligned to their size; reading them as float or double in C is undefined behaviour,
    so the C extension declines them and torch's reductions give the statistics."""
    values = torch.linspace(-3.0, 5.0, 5000, dtype=dtype)
    raw = values.view(torch.uint8).numpy().tobytes()
    t = torch.frombuffer(bytearray(b"\0" + raw), dtype=dtype, offset=1, count=5000)
    assert t.data_ptr() % t.element_size() != 0 and torch.equal(t, values)
    if FUSED:
        assert stats.fused_stats(t) is None
        assert stats.fused_stats(values) is not None  # the aligned copy: read in C
    got, ref = _stats(t), _reference(values)
    for key in ("mean", "std", "min", "max"):
        assert math.isclose(got[key], ref[key], rel_tol=1e-5, abs_tol=1e-6), (key, got, ref)


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool], ids=["int64", "bool"])
def test_settled_integer_tensors_take_the_integer_path(dtype: torch.dtype) -> None:
    """A settled (parameter-like) integer or bool tensor large enough for the settled
    shortcut is reduced as integers, like the same tensor unsettled and like the CPU
    path: the shortcut is for floats only (``var_mean`` takes no integers)."""
    from pytest_graphir.capture.stats import device as device_module

    n = max(device_module.SETTLED_FROM, 1) + 3
    t = (torch.arange(n) % 7).to(dtype)
    got, ref = TensorMeta([n], str(dtype)), TensorMeta([n], str(dtype))
    batch = StatsBatch(batched=True)
    batch.settled = True
    batch.add(t, got)
    batch.finish()
    cpu = StatsBatch()
    cpu.add(t, ref)
    cpu.finish()
    expected = {"true": n - (n + 6) // 7} if dtype == torch.bool else {"max": 6}
    assert got.stats == ref.stats and expected.items() <= ref.stats.items()
