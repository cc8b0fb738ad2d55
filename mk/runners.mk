# Runners (PyTorch eager runner, ONNX Runtime server): heavy deps live in a cached venv outside the clone,
# keyed by a hash of hack/runners-requirements.txt (created on first use by hack/runners-venv).
.PHONY: runners-venv runners-test runners-lint runners-bench runners-peers
TEST_TARGETS += runners-test

RUNNERS_VENV_SCRIPT := hack/runners-venv
# The runners venv is shared by every clone on the machine, and its editable installs point at the clone that ran
# hack/runners-venv last: the targets that use it put this clone's sources first.
RUNNERS_PYTHONPATH := $(CURDIR)/operator:$(CURDIR)/testkit

runners-venv:
	@$(RUNNERS_VENV_SCRIPT) >/dev/null

runners-test:
	@venv="$$($(RUNNERS_VENV_SCRIPT))"; \
	echo ">> runners-test with $$venv"; \
	IB_REQUIRE_RUNNERS=1 PYTHONPATH=$(RUNNERS_PYTHONPATH) "$$venv/bin/python" -m pytest -q -p no:cacheprovider tests/runners

runners-lint:
	@venv="$$($(RUNNERS_VENV_SCRIPT))"; \
	"$$venv/bin/ruff" check operator/inference_backend/runners tests/runners bench testkit; \
	"$$venv/bin/ruff" format --check operator/inference_backend/runners tests/runners bench testkit; \
	"$$venv/bin/mypy" operator/inference_backend/runners

runners-bench:
	@venv="$$($(RUNNERS_VENV_SCRIPT))"; PYTHONPATH=$(RUNNERS_PYTHONPATH) "$$venv/bin/python" -m bench.runners

# Issue 16 item 6: both runners against their peers in one run (bench/peers.py; prints figures, asserts nothing).
runners-peers:
	@venv="$$($(RUNNERS_VENV_SCRIPT))"; PYTHONPATH=$(RUNNERS_PYTHONPATH) "$$venv/bin/python" -m bench.peers
