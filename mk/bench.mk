# Engine profiles (bench/engine_profiles/, docs/benchmarks-gpu.md): ONE random-weight Llama model as safetensors,
# ONNX and GGUF, served by the PyTorch runner, the ONNX Runtime server and llama-server with the args the operator
# renders, loaded by `inference-backend bench`. Heavy deps: the runners venv (mk/runners.mk) and llama-server
# (mk/engines.mk). Measurements hold $(BENCH_LOCK) so that no two benchmarks share the cores.
.PHONY: bench-engines bench-gpu-reduced

BENCH_LOCK ?= /tmp/ib-bench.lock
# The CPU profile of this machine: 4 concurrencies x 32 requests of 128 prompt / 64 output tokens per engine.
BENCH_ENGINES_ARGS ?= --preset cpu --label cpu --concurrency 1,2,4,8 --requests 32 --out bench/results
# A runners venv to use as is (hack/runners-venv re-points its editable install at this clone when it differs).
RUNNERS_VENV ?=

# bench/results/cpu-profiles.{json,png} and bench/results/cpu/*.json
bench-engines: llama-server
	@venv="$${RUNNERS_VENV:-$$($(RUNNERS_VENV_SCRIPT))}"; \
	echo ">> bench-engines with $$venv (waiting for $(BENCH_LOCK) if another benchmark holds it)"; \
	flock $(BENCH_LOCK) env PYTHONPATH=$(RUNNERS_PYTHONPATH) "$$venv/bin/python" -m bench.engine_profiles $(BENCH_ENGINES_ARGS)

# bench/gpu/h200.sh --reduced: the GPU script end to end on CPU (tiny model, CPU providers, CPU llama.cpp build).
bench-gpu-reduced: llama-server
	@venv="$${RUNNERS_VENV:-$$($(RUNNERS_VENV_SCRIPT))}"; \
	flock $(BENCH_LOCK) env PYTHON="$$venv/bin/python" OUT="$${OUT:-$(CURDIR)/gpu-results}" bench/gpu/h200.sh --reduced

# tests/runners/test_engine_profiles.py boots llama-server (GGUF = safetensors, greedy tokens).
runners-test: llama-server

# operator/inference_backend/profiles_measured.py from bench/results/cpu-profiles.json (the catalog's CPU rows,
# scaled to 7B by the rules in bench/profiles.py); tests/test_profiles.py checks that it is current.
.PHONY: profiles
profiles: venv
	$(PY) -m bench.profiles

# The workload model against the calibration set (tests/data/perf-calibration/): per-engine median and worst
# |log2(estimate / measured)|, held-out rows apart, % within 2x, whether engines and GPUs rank as measured, and
# bench/results/perf-model.png (docs/engine-profiles.md). `make bench-model-fit` prints the factors that fit.
.PHONY: bench-model bench-model-fit perf-tables aiconfigurator-venv
bench-model: venv
	$(PY) -m bench.perf_model report

bench-model-fit: venv
	$(PY) -m bench.perf_model fit

# The aiconfigurator venv ($(IB_CACHE)/venv-aiconfigurator-0.12.0, built when absent) and the tables generated from
# it (bench/results/aiconfigurator.json -> operator/inference_backend/selection/perf_tables.py; resumable).
aiconfigurator-venv:
	hack/aiconfigurator-venv

perf-tables: venv aiconfigurator-venv
	nice -n 10 $(IB_CACHE)/venv-aiconfigurator-0.12.0/bin/python hack/perf_tables.py generate
	$(PY) hack/perf_tables.py write
