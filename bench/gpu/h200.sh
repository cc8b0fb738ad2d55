#!/usr/bin/env bash
# Engine profiles on one GPU (an H200 lent by the device tool; docs/benchmarks-gpu.md): a random-weight model with
# Llama-2-7B's architecture in bf16, made on the spot (no download), served with the operator's rendered args by the
# PyTorch runner, the ONNX Runtime server (CUDA execution provider) and llama-server (CUDA build of the pinned
# llama.cpp, sm_90, built here in the background), measured with `inference-backend bench`; plus the copy bandwidth
# of the device and the batch-1 decode bound it implies. Every step has a time budget; a step that cannot run is
# skipped with its reason in the results. Results (JSON, PNG, log) go to $OUT (default ./gpu-results).
#
#   bench/gpu/h200.sh             the full run (budget BUDGET_S=480 s for the harness, ~9 min in all, then the
#                                 calibration rows of vLLM, SGLang, our runners and llama.cpp at 1, 4, 16)
#   bench/gpu/h200.sh --reduced   the same harness end to end on CPU: the tiny bench model, CPU providers, the
#                                 CPU llama.cpp build of hack/build-llama-server (make bench-gpu-reduced)
#
# Environment: PYTHON (default python3), OUT, WORK (models and logs, default /tmp/ib-gpu-bench), BUDGET_S,
# IB_BENCH_PYTHONPATH (where `inference_backend.bench` lives, until the bench CLI is on this branch),
# IB_LLAMA_CPP_SRC (the llama.cpp source; default: .llama-src/llama.cpp.tar.gz unpacked, else the local cache).
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
mode=full
case "${1:-}" in
  --reduced) mode=reduced ;;
  "") ;;
  *) echo "usage: $0 [--reduced]" >&2; exit 2 ;;
esac
OUT="${OUT:-./gpu-results}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
# The device machine has no install of this repository: the product and the testkit (ib_testkit) come from the
# checkout; bench/ is a package of the checkout's root, the working directory of every `python -m bench.X` here.
export PYTHONPATH="$root/operator:$root/testkit${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
label=h200
[[ $mode == reduced ]] && label=reduced
log="$OUT/$label.log"
exec > >(tee "$log") 2>&1
echo ">> bench/gpu/h200.sh $mode, $(date -u +%FT%TZ), $(nproc) cores, python: $(command -v "$PY")"

if [[ $mode == full ]]; then
  # Python packages the device image lacks travel as wheels in .whl (docs/benchmarks-gpu.md).
  if compgen -G ".whl/*.whl" >/dev/null; then
    echo ">> installing $(ls .whl/*.whl | wc -l) carried wheels into /tmp/site"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      && export PYTHONPATH="/tmp/site:$PYTHONPATH"
  fi
  # The llama.cpp source travels as .llama-src/llama.cpp.tar.gz (bench/gpu/pack-llama-src.sh).
  if [[ -z "${IB_LLAMA_CPP_SRC:-}" && -f .llama-src/llama.cpp.tar.gz ]]; then
    mkdir -p /tmp/llama-src && tar -xzf .llama-src/llama.cpp.tar.gz -C /tmp/llama-src \
      && export IB_LLAMA_CPP_SRC=/tmp/llama-src/llama.cpp
  fi
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
fi

# 1. prerequisites: print precisely what is missing (the harness checks again and skips what cannot run)
"$PY" -m bench.gpu.prereqs --device "$([[ $mode == full ]] && echo cuda || echo cpu)" \
  ${IB_LLAMA_CPP_SRC:+--llama-src "$IB_LLAMA_CPP_SRC"} || echo "!! prerequisite check failed to run"

# 2. the harness (bench/engine_profiles/), one budget for all its steps
if [[ $mode == full ]]; then
  budget="${BUDGET_S:-480}"
  args=(--preset llama2-7b --device cuda --label h200 --build-llama-cuda
        --concurrency 1,4,16 --prompt-tokens 512 --output-tokens 128 --seconds 15 --bandwidth-gib 4)
  work="${WORK:-/tmp/ib-gpu-bench}"
else
  budget="${BUDGET_S:-300}"
  args=(--preset tiny --device cpu --label reduced
        --concurrency 1,2 --prompt-tokens 64 --output-tokens 16 --requests 4 --bandwidth-gib 0.25)
  work="${WORK:-/tmp/ib-gpu-bench-reduced}"
fi
mkdir -p "$work"
timeout -k 15 $((budget + 60)) "$PY" -m bench.engine_profiles "${args[@]}" --out "$OUT" --work "$work" \
  --budget-s "$budget"
rc=$?

# 3. calibration rows (bench/gpu/calibration_rows.py): vLLM and SGLang served on the same bf16 checkpoint where their
#    packages are installed, measured at concurrency 1, 4 and 16, plus the harness's rows of our runners and
#    llama-server; copy $OUT/measured-gpu.csv to tests/data/perf-calibration/ and run `make bench-model-fit`
#    (measured rows are preferred to published ones for their engine and vendor).
model_dir="$(find "$work" -maxdepth 3 -name config.json -path '*llama2-7b*' -printf '%h\n' 2>/dev/null | head -1)"
if [[ $mode == full && -n "$model_dir" ]]; then
  timeout -k 15 "${CALIBRATION_BUDGET_S:-1200}" "$PY" -m bench.gpu.calibration_rows --results "$OUT/$label.json" \
    --model "$model_dir" --out "$OUT/measured-gpu.csv" || echo "!! calibration rows failed ($?)"
elif [[ $mode == reduced ]]; then
  "$PY" -m bench.gpu.calibration_rows --results "$OUT/$label.json" --model "${model_dir:-/nonexistent}" \
    --engines "" --gpu cpu --out "$OUT/measured-gpu.csv" || echo "!! calibration rows failed ($?)"
fi
echo ">> bench/gpu/h200.sh $mode finished with $rc at $(date -u +%FT%TZ); results in $OUT: $(ls "$OUT" | tr '\n' ' ')"
exit $rc
