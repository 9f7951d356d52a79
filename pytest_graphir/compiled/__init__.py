"""Compiled versus eager: what ``torch.compile`` captured, and where it departs from eager.

Floor 3 of the package: imports torch (on first import of this package, never at
plugin load), and :mod:`pytest_graphir.ir`, :mod:`~pytest_graphir.capture`,
:mod:`~pytest_graphir.compare`; nothing below imports it.

* :mod:`.backend`: the recording Dynamo backends (:class:`GraphRecorder`,
  :class:`AotGraphRecorder`), registered as ``"graphir"`` and ``"graphir_aot"``, and the
  canonical op names and scopes of Dynamo FX nodes.
* :mod:`.check`: :func:`compare_compiled`, returning a :class:`CompiledReport`
  (:mod:`.compiled_report`), hook events under compile, and :func:`compare_aten`
  (AOT Autograd's ATen graphs against eager's); the eager/compiled op alignment,
  folded ops, library compile paths; outputs, the backward pass and gradients, one
  starting state for both runs.
* :mod:`.records`: plain records of graphs, graph runs and ops; :mod:`.watch`:
  compile ids, graph breaks, module paths of frames.
* :mod:`.dynamo_state`: Dynamo reset, its logs, and every private torch name used here.

Importing this package registers the two backends with Dynamo.
"""

from .backend import AotGraphRecorder, GraphRecorder, recording
from .check import AtenComparison, compare_aten, compare_compiled
from .compiled_report import CompiledReport
from .dynamo_state import reset_dynamo

__all__ = [
    "AotGraphRecorder",
    "AtenComparison",
    "CompiledReport",
    "GraphRecorder",
    "compare_aten",
    "compare_compiled",
    "recording",
    "reset_dynamo",
]
