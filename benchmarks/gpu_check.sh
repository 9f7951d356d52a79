#!/usr/bin/env bash
# One short check of the statistics' device path on a GPU machine (about 5 minutes on
# an H200): the CUDA-marked tests of tests/test_stats.py, then benchmarks/bench_zoo.py
# on CUDA with few rounds (time ratios, extra peak memory, and the aten ops per node
# of the forced device path). Run from the repository root with a CUDA build of torch:
#
#     bash benchmarks/gpu_check.sh                 # python from $PYTHON, else python3
#     PYTHON=.venv/bin/python bash benchmarks/gpu_check.sh
#
# The tests and the tracer import syrupy, deepdiff, PyYAML and rich (pyproject.toml's
# dependencies): the third step says which are missing; carry their wheels where the
# machine cannot fetch them. The C extensions need not be built there (the Python paths
# run without them).
#
# Each step has its own timeout and the script goes on after a failing step; the exit
# status is that of the first failure. Output is meant to be pasted into
# benchmarks/README.md and docs/capture.md ("Cost").
set -u
set -x

PY="${PYTHON:-python3}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
status=0
step() { "$@" || { rc=$?; echo "step failed (rc=$rc): $*"; [ "$status" -ne 0 ] || status=$rc; }; }

step timeout 60 "$PY" -c "import torch; print(torch.__version__, torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else '-')"
step timeout 60 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
step timeout 60 "$PY" -c "import importlib.util as u; print({m: bool(u.find_spec(m)) for m in ('syrupy', 'deepdiff', 'yaml', 'rich', 'transformers', 'xdist')})"
step timeout 60 "$PY" -c "import pytest_graphir.capture.stats as s, transformers; print(s.__file__, s.FUSED, transformers.__version__)"

# the CUDA-marked statistics tests (their logic also runs on the CPU, forced)
step timeout 300 "$PY" -m pytest tests/test_stats.py -q -p no:cacheprovider -k cuda -rs

# the zoo on CUDA, 3 rounds; the ops/node column is measured on the CPU (forced path)
step timeout 420 "$PY" benchmarks/bench_zoo.py --device cuda --rounds 3 \
    --models gpt2,bert,distilbert,llama,t5,vit,resnet50,mobilenetv2

# the 1.1B Llama at sequence 512: time ratios and extra peak memory (no CPU op count)
step timeout 240 "$PY" benchmarks/bench_zoo.py --device cuda --rounds 3 --models llama1b --no-ops

exit "$status"
