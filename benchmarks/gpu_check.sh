#!/usr/bin/env bash
# One short check of the statistics' device path on a GPU machine (about 5 minutes on
# an H100): the CUDA tests, benchmarks/bench_zoo.py on CUDA with few rounds (time
# ratios, extra peak memory, kernels per node, host synchronisations), a profile of
# a GPT-2 trace, and a breadth sample traced on CUDA against its CPU snapshot. Run
# from the repository root with a CUDA build of torch:
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

# the CUDA tests (their logic also runs on the CPU, forced): statistics, inductor, TF32
step timeout 150 "$PY" -m pytest -q -p no:cacheprovider -rs tests/test_stats.py -k cuda \
    tests/test_compiled_backends.py::test_inductor_on_cuda_matches_eager \
    tests/test_determinism.py::test_cuda_trace_matches_cpu_with_tf32_enabled_by_the_user

# the zoo on CUDA, 3 rounds: time ratios, extra peak memory, kernels per node, syncs
# (the ops/node column of the forced device path is measured where no GPU is)
step timeout 240 "$PY" benchmarks/bench_zoo.py --device cuda --rounds 3 --no-ops --floor \
    --models gpt2,bert,distilbert,llama,t5,vit,resnet50,mobilenetv2

# the 1.1B Llama at sequence 512: time ratios and extra peak memory
step timeout 120 "$PY" benchmarks/bench_zoo.py --device cuda --rounds 3 --models llama1b --no-ops

# where a GPT-2 trace's host time goes, with statistics and structure-only
step timeout 60 "$PY" benchmarks/profile_trace.py --model gpt2 --device cuda --top 20
step timeout 60 "$PY" benchmarks/profile_trace.py --model gpt2 --device cuda --top 12 --structure

# a sample of the breadth architectures, then zoo models (tensors of real sizes): CPU
# snapshot against CUDA traces
step timeout 150 "$PY" benchmarks/cuda_breadth.py --sample 48
step timeout 150 "$PY" benchmarks/cuda_breadth.py --zoo gpt2,bert,llama,t5,vit,resnet50,mobilenetv2

exit "$status"
