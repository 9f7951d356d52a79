"""Build of the optional C extensions ``pytest_graphir.capture._moments`` (one-pass
statistics) and ``pytest_graphir.capture._record`` (the tracer's per-op callback).

Everything else is in ``pyproject.toml``. Both are optional: where they cannot be
compiled (no C compiler), the install goes on, the statistics are computed with
torch reductions instead (``pytest_graphir.capture.stats``, ``FUSED``) and every op is
recorded by the Python method (``pytest_graphir.capture.tracer``, ``FAST_RECORD``).
"""

import sys

from setuptools import Extension, setup

if sys.platform == "win32":
    flags = ["/O2", "/fp:precise"]
else:
    # no FMA contraction, no fast-math: the same bits on every machine
    flags = ["-O3", "-ffp-contract=off"]

setup(
    ext_modules=[
        Extension(
            "pytest_graphir.capture._moments",
            ["pytest_graphir/capture/_moments.c"],
            extra_compile_args=flags,
            optional=True,
        ),
        Extension(
            "pytest_graphir.capture._record",
            ["pytest_graphir/capture/_record.c"],
            extra_compile_args=flags,
            optional=True,
        ),
    ]
)
