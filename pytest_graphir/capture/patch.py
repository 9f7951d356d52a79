"""The symbol-patch op interceptor (FlexTorchIR-style). Not built yet."""

from __future__ import annotations

from typing import Any


class PatchInterceptor:
    """Placeholder: ``trace(..., interceptor="patch")`` is not available yet."""

    def __init__(self, record: Any) -> None:
        self.record = record
        self.active = True

    def __enter__(self) -> PatchInterceptor:
        raise NotImplementedError(
            "trace(interceptor='patch') is not implemented yet; use the default "
            "interceptor='mode'")

    def __exit__(self, *exc: object) -> None:
        return None
