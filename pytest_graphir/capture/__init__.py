"""Capture: run a model under global module hooks and a TorchFunctionMode.

Imports torch: only imported when a trace is made, never at plugin load.
"""

from .options import (
    FakeStatisticsWarning,
    OtherThreadWarning,
    UncapturedCallsWarning,
    UnseenWriteWarning,
)
from .tracer import trace

__all__ = [
    "FakeStatisticsWarning",
    "OtherThreadWarning",
    "UncapturedCallsWarning",
    "UnseenWriteWarning",
    "trace",
]
