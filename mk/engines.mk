# Engine contract tests: rendered args are checked against the REAL engines at the pinned versions.
# Heavy prerequisites live in $(IB_CACHE) (outside the clone), keyed by version, built only when absent:
#   llama-server/llama-bench  $(IB_CACHE)/llama.cpp/<llama-cpp-python version>/bin  (hack/build-llama-server)
#   vLLM venv                 $(IB_CACHE)/venv-vllm-<version>                        (hack/vllm-venv)
#   SGLang venv               $(IB_CACHE)/venv-sglang-<version>                      (hack/sglang-venv)
# `make contracts` creates them, then runs tests/contracts with IB_REQUIRE_CONTRACTS=1 so that a
# missing prerequisite fails the run instead of skipping.

VLLM_VERSION ?= 0.33.0
export VLLM_VERSION
SGLANG_VERSION ?= 0.5.23
export SGLANG_VERSION

.PHONY: contracts llama-server vllm-venv sglang-venv engine-flags

TEST_TARGETS += contracts

llama-server:
	hack/build-llama-server

vllm-venv:
	hack/vllm-venv

sglang-venv:
	hack/sglang-venv

contracts: venv llama-server vllm-venv sglang-venv
	IB_REQUIRE_CONTRACTS=1 $(VENV)/bin/pytest -q tests/contracts

# Regenerate the committed flag tables (TGI from its saved doc; llama-server from the built binary).
engine-flags: venv llama-server
	$(PY) hack/tgi_flags_from_source.py
	$(PY) hack/llama_server_flags.py
