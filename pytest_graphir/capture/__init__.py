"""Capture: run a model under global module hooks and a TorchFunctionMode.

Imports torch: only imported when a trace is made, never at plugin load.
"""

from .tracer import UncapturedCallsWarning, UnseenWriteWarning, trace

__all__ = ["UncapturedCallsWarning", "UnseenWriteWarning", "trace"]
