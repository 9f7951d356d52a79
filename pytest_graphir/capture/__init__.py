"""Capture: run a model under global module hooks and a TorchFunctionMode.

Imports torch: only imported when a trace is made, never at plugin load.
"""

from .tracer import OtherThreadWarning, UncapturedCallsWarning, UnseenWriteWarning, trace

__all__ = ["OtherThreadWarning", "UncapturedCallsWarning", "UnseenWriteWarning", "trace"]
