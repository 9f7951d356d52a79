"""The symbol-patch op interceptor (FlexTorchIR-style): ``trace(..., interceptor="patch")``.

While its ``with`` block runs, :class:`PatchInterceptor` replaces the op callables of
``torch.nn.functional``, ``torch``, ``torch._C._nn`` and ``torch.Tensor`` with
wrapper closures that record the call, and puts every original back on the way out.
It builds the same IR as the default TorchFunctionMode interceptor
(:class:`~pytest_graphir.capture.mode.RecordingMode`): same canonical op names,
same arguments, same nested calls hidden. How each part mirrors the mode:

* **C++ builtins** (``torch.add``, ``F.linear``, ``torch._C._nn.gelu``,
  ``Tensor.view``, ``Tensor.__add__``): C++ hands ``__torch_function__`` the caller's
  own arguments, so a wrapper that records ``(args, kwargs)`` sees exactly what the
  mode sees. Tensor methods get ``self`` as the first argument, as in the mode.
  Operators work because setting ``Tensor.__add__`` on the Python class
  ``torch.Tensor`` updates its type slot (``x + y`` calls the wrapper).
* **Python functions** (``F.relu``, ``F.layer_norm``, ``torch.split``,
  ``Tensor.__rsub__``, ``Tensor.__iter__``) reach ``__torch_function__`` only through
  their own ``if has_torch_function...(...): return handle_torch_function(public_api,
  relevant_args, *args, **kwargs)``, and that call decides what the mode sees:
  ``F.layer_norm(x, (8,), w, b)`` arrives as ``args=(x, (8,))``,
  ``kwargs={weight, bias, eps}``, and ``F.max_pool2d`` arrives under its public name.
  A wrapper around the function sees the caller's arguments instead, so the IR would
  differ. So Python functions are not wrapped: the four dispatch helpers
  (:data:`.targets.DISPATCH_HELPERS`) are patched instead, in ``torch.overrides``
  and in every loaded module that imported them by name. With a trace active they answer like
  they do under a mode (``has_torch_function*`` is true, ``handle_torch_function``
  records ``(public_api, args, kwargs)`` and runs the function), which also
  captures ``from torch.nn.functional import relu`` aliases and hides what metadata
  helpers such as ``Tensor.__repr__`` or ``Tensor.__iter__`` run inside.
* **Nested calls are recorded once.** A thread-local depth counter plays the part
  of the mode being popped while its handler runs: the outermost recorded call sets
  it, and every wrapper or helper reached below (``F.relu`` -> ``torch.relu``, the
  tracer's own statistics) passes straight through.
* **Not patched:** metadata queries (canonical name ``None``: ``size``, ``dim``,
  ``numel``; the mode records them as nothing, so a wrapper would only cost time);
  object-protocol dunders (:data:`.targets.OBJECT_PROTOCOL`); builtins of
  ``torch._C`` itself and pybind11 functions (``torch.get_num_threads``,
  ``torch.fork``), which never reach ``__torch_function__``; classes, modules,
  ``staticmethod``s and ``classmethod``s; and the names in
  :data:`.targets.DEFAULT_SKIP` or the ``skip`` argument.

Known limits, handled:

* **Import-time aliases.** A reference to a C++ builtin taken before the patch
  (transformers' ``GELUActivation`` stores ``nn.functional.gelu`` in ``__init__``)
  would call the original. With ``model=`` (``trace()`` passes it), the references
  the model's code can reach are found by :func:`.aliases.find_aliases` and patched
  in place too (module attributes, list/dict items, partials, class attributes,
  module globals, closure cells, default arguments), then restored by identity; they
  are listed in :attr:`PatchInterceptor.aliased`. What can not be patched in place
  (an element of a tuple) is listed in :attr:`PatchInterceptor.uncaptured`.
* **Property getters** (``x.T``, ``x.mT``, ``x.H``, ``x.mH``, ``x.data``, ``x.real``,
  ``x.imag``) are getset descriptors of ``torch._C.TensorBase``, whose ``__get__`` is
  read-only: a recording ``property`` on ``torch.Tensor`` shadows each one while
  patched (deleted again on exit), so they are recorded as under the mode.
* **Ctrl-C.** SIGINT waits while symbols are patched or restored, and a
  ``KeyboardInterrupt`` anywhere else in the block restores every symbol before it
  leaves the signal handler (:mod:`pytest_graphir.capture.interrupts`). Any other
  exception raised inside ``__enter__`` (a SIGALRM handler's) releases what was
  taken; one raised inside ``__exit__`` is caught up by :meth:`PatchInterceptor.release`,
  which the tracer runs again after the block.
* **torch.compile / Dynamo.** Every wrapper and helper first asks
  ``torch.compiler.is_compiling()`` and, if so, calls the original without touching
  the recorder: while Dynamo traces, it inlines the wrapper into a plain call of the
  original (no guard on recorder state, so no "Guard failed on the same frame it
  was created"); during the rest of a compile session (fake-tensor propagation,
  the backend) nothing is recorded either. Code that a compiled graph runs later
  is recorded when it calls a patched symbol (FX code calls ``torch._C._nn.gelu``
  by attribute). Dynamo's tables of torch functions are built when
  ``torch._dynamo`` is first imported; the interceptor imports it before patching
  (once per process), so a compile inside the patched region can not capture
  wrappers into them. Dynamo's own work while it compiles a frame (converting
  tensors to fake ones asks ``is_conj``, ``is_neg``, ...) runs while
  ``torch._guards.CompileContext`` is set, and is not recorded either.
* **TorchScript.** ``torch.jit.script`` resolves ``torch.relu`` through the
  Python module and looks the object up in its builtin-op table (keyed by
  ``id``). While patched, every wrapper and helper is entered into that table
  under its original's op (and removed on exit), so scripting inside the patched
  region compiles the same aten ops.
* **Caches.** ``torch.overrides`` (``resolve_name``, ``get_overridable_functions``,
  ``get_ignored_functions``, ``get_testing_overrides``), TorchScript's builtin
  table and this package's name cache are filled before patching, from the
  originals; a cache first filled while patched would keep the wrappers forever.
  Modules first imported inside the patched region that bound a wrapper by name
  (``from torch import relu``) are repaired on exit (:attr:`PatchInterceptor.repaired`).
* **One at a time.** Patches are process-wide, so a second interceptor entered
  while one is active (nested, or on another thread) raises ``RuntimeError``.
  Recording is per thread, like the mode stack: only the thread that entered
  records; other threads run the originals through the wrappers.

The package: :mod:`.targets` (what is patched), :mod:`.wrappers` (the replacements),
:mod:`.aliases` (the model's import-time aliases), :mod:`.interceptor`
(:class:`PatchInterceptor`, which runs them).
"""

from __future__ import annotations

from .interceptor import ACTIVE, PatchInterceptor
from .targets import DEFAULT_SKIP, jit_builtin_table, warm_caches
from .wrappers import STATE

__all__ = [
    "ACTIVE",
    "DEFAULT_SKIP",
    "STATE",
    "PatchInterceptor",
    "jit_builtin_table",
    "warm_caches",
]
