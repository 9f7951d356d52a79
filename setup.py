"""Build of the optional C extension ``pytest_graphir.capture._moments`` (one-pass
statistics).

Everything else is in ``pyproject.toml``. It is optional: where it cannot be compiled
(no C compiler), the install goes on and the statistics are computed with torch
reductions instead (``pytest_graphir.capture.stats``, ``FUSED``).
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
    ]
)
