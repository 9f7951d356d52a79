"""Float32 math while tracing: full precision (TF32 off), the user's settings restored.

On GPUs with TensorFloat-32 (Ampere and later) PyTorch may run float32 matmuls and
cuDNN convolutions in TF32 (10-bit mantissa): cuDNN convolutions do by default, and
``torch.set_float32_matmul_precision("high")`` turns it on for matmuls. A snapshot
written on CPU then drifts on such a GPU (``docs/capture.md``, *Float32 math*). So
:func:`float32_math` runs the trace with ``"ieee"`` float32 math for every backend
(``torch.backends.cuda.matmul``, ``torch.backends.cudnn.conv`` / ``.rnn``,
``torch.backends.mkldnn.matmul`` / ``.conv``, and the legacy
``torch.set_float32_matmul_precision("highest")`` / ``cudnn.allow_tf32 = False``),
and puts every one of these settings back afterwards, also when the model raises.

PyTorch keeps the legacy flags and the ``fp32_precision`` strings of 2.9+ as two
linked states and raises when code reads one after the other was set inconsistently
(``"you have used mix of the legacy and new APIs"``); both are saved and restored
here, legacy first, so the pair ends exactly as the user left it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

FULL = "highest"
"""``trace(float32_precision=...)`` default: TF32 off everywhere while tracing."""
MODEL = "model"
"""``trace(float32_precision="model")``: leave the user's float32 settings alone."""

_LEAVES = {
    "cuda.matmul": torch.backends.cuda.matmul,
    "cudnn.conv": torch.backends.cudnn.conv,  # type: ignore[attr-defined]
    "cudnn.rnn": torch.backends.cudnn.rnn,
    "mkldnn.matmul": torch.backends.mkldnn.matmul,  # type: ignore[attr-defined]
    "mkldnn.conv": torch.backends.mkldnn.conv,  # type: ignore[attr-defined]
}
"""The ``torch.backends.<backend>.<op>.fp32_precision`` settings (PyTorch 2.9+, the
floor), by name: each object reads and writes torch's global setting."""


def _save() -> dict[str, Any]:
    saved: dict[str, Any] = {}
    with contextlib.suppress(RuntimeError):
        saved["matmul_precision"] = torch.get_float32_matmul_precision()
    with contextlib.suppress(RuntimeError, AttributeError):
        saved["cudnn_allow_tf32"] = torch._C._get_cudnn_allow_tf32()
    return saved | {name: leaf.fp32_precision for name, leaf in _LEAVES.items()}


def _restore(saved: dict[str, Any]) -> None:
    if "matmul_precision" in saved:
        torch.set_float32_matmul_precision(saved["matmul_precision"])
    if "cudnn_allow_tf32" in saved:
        torch._C._set_cudnn_allow_tf32(saved["cudnn_allow_tf32"])
    for name, leaf in _LEAVES.items():
        leaf.fp32_precision = saved[name]


def effective_mode() -> str:
    """The float32 math the current settings give: ``"highest"`` (IEEE float32
    everywhere) or, otherwise, the non-IEEE settings, e.g. ``"cuda.matmul=tf32"``."""
    saved = _save()
    loose = [f"{k}={v}" for k, v in saved.items() if "." in k and v not in ("ieee", "none")]
    if saved.get("matmul_precision", FULL) != FULL:
        loose.insert(0, f"matmul_precision={saved['matmul_precision']}")
    return ", ".join(loose) if loose else FULL


@contextlib.contextmanager
def _full_precision() -> Iterator[None]:
    """IEEE float32 math inside, the saved settings restored on exit."""
    saved = _save()
    try:
        # "ieee" for each fp32_precision this torch has, and the legacy pair, as _restore
        # sets them: legacy first
        _restore({k: "ieee" for k in saved} | {"matmul_precision": FULL, "cudnn_allow_tf32": False})
        yield
    finally:
        _restore(saved)


def float32_math(choice: str) -> contextlib.AbstractContextManager[None]:
    """Return a context manager that runs its body with the float32 math ``choice`` asks for.

    Args:
        choice: :data:`FULL` (``"highest"``): IEEE float32 for matmul, cuDNN and
            oneDNN, the previous settings restored on exit (normal or exception);
            :data:`MODEL` (``"model"``): change nothing.

    Raises:
        ValueError: ``choice`` is neither (raised here, before anything runs).
    """
    if choice not in (FULL, MODEL):
        raise ValueError(
            f"trace(float32_precision={choice!r}): use 'highest' (the default: "
            "TF32 off while tracing) or 'model' (keep the current settings)"
        )
    return contextlib.nullcontext() if choice == MODEL else _full_precision()
