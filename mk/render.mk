# Renderers: golden files, the render benchmark and the generated example of docs/engines.md.
.PHONY: golden render-bench docs-engines
golden: venv  ## rewrite tests/data/output from tests/data/input
	UPDATE_GOLDEN=1 $(PY) -m pytest -q tests/test_golden.py

render-bench: venv  ## time to render 1,000 InferenceBackends (target < 1 s)
	$(PY) -m bench.render_1000

docs-engines: venv  ## regenerate the side-by-side example in docs/engines.md from a golden file
	$(PY) hack/engines_doc_example.py vllm-gpu-draft
