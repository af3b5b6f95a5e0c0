#!/usr/bin/env bash
# What a CUDA machine adds to the CPU runs, in one go (an installed environment, the embedded model's
# package among it, and no network needed):
#   tests   the engine's lossless tests with their tiny models on the GPU (greedy equality, the
#           sampling distribution, batched rows, cache rollback, the suffix drafter)
#   demo    the README's demo, which picks the GPU by itself
#   corpus  the public corpus's test split against transformers' own generate(), as on CPU
#           (no int8: PyTorch's dynamic quantization has no CUDA kernels)
# Usage: benchmarks/gpu_check.sh OUT_DIR [tests|demo|corpus ...]   (default: all three)
# Writes OUT_DIR/{cuda_tests.log,cuda_tests.xml,demo.log,corpus_test_cuda.json,corpus.log,env.txt}.
set -uo pipefail
out=${1:?usage: benchmarks/gpu_check.sh OUT_DIR [tests|demo|corpus ...]}
shift
parts=${*:-tests demo corpus}
mkdir -p "$out"
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'" || exit 2
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
} > "$out/env.txt" 2>&1
export PYTHONUNBUFFERED=1
status=0
for part in $parts; do
  case $part in
    tests)
      workers=$(python3 -c "import xdist" 2>/dev/null && echo "-n 6")  # tiny models: one GPU serves several
      ADAPTIVE_SPEC_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider $workers --junitxml "$out/cuda_tests.xml" \
        tests/test_engine_greedy.py tests/test_engine_sampling.py tests/test_batching.py \
        tests/test_batching_prefill.py tests/test_suffix.py 2>&1 | tee "$out/cuda_tests.log" || status=1 ;;
    demo)
      python3 -m adaptive_spec.cli demo --telemetry off 2>&1 | tee "$out/demo.log" || status=1 ;;
    corpus)
      python3 -m adaptive_spec.cli bench --prompts benchmarks/corpus/corpus.jsonl --split test --max-new-tokens 96 \
        --steps --telemetry off --out "$out/corpus_test_cuda.json" \
        --configs plain,static:ngram:8,adaptive,hf-plain,hf-prompt-lookup \
        2>&1 | tee "$out/corpus.log" || status=1 ;;
    *) echo "unknown part: $part (expected tests, demo or corpus)" >&2; exit 2 ;;
  esac
done
exit $status
