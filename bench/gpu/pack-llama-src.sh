#!/usr/bin/env bash
# Pack the pinned llama.cpp source (the tree hack/build-llama-server unpacked) for the device machine, which has no
# network: .llama-src/llama.cpp.tar.gz, without what neither the CUDA build of llama-server/llama-bench nor
# convert_hf_to_gguf.py reads (models/ vocab files, docs, media, tests, benches, examples).
# Run it in the checkout the device tool sends; name .llama-src in the run's carry (docs/benchmarks-gpu.md).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
# shellcheck source=/dev/null
source "$root/hack/llama-cpp.version"
src="${IB_LLAMA_CPP_SRC:-${IB_CACHE:-$HOME/.cache/inference-backend}/llama.cpp/$LLAMA_CPP_PYTHON_VERSION/src/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp}"
[[ -f "$src/CMakeLists.txt" ]] || { echo "!! no llama.cpp source at $src: run hack/build-llama-server" >&2; exit 1; }
mkdir -p "$root/.llama-src"
exclude="$(git -C "$root" rev-parse --path-format=absolute --git-path info/exclude)"
grep -qx '/.llama-src/' "$exclude" 2>/dev/null || echo '/.llama-src/' >> "$exclude"
tar -czf "$root/.llama-src/llama.cpp.tar.gz" -C "$(dirname "$src")" \
  --exclude='llama.cpp/models' --exclude='llama.cpp/docs' --exclude='llama.cpp/media' --exclude='llama.cpp/tests' \
  --exclude='llama.cpp/benches' --exclude='llama.cpp/examples' \
  --exclude='llama.cpp/.devops' llama.cpp
ls -l "$root/.llama-src/llama.cpp.tar.gz"
