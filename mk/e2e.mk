# Local Kubernetes control plane (e2e/): binaries built into $(IB_CACHE)/bin, a cluster on 127.0.0.1
# whose state lives in $(E2E_DIR) (default /tmp/ib-e2e), and the end-to-end tests that run on it.
TEST_TARGETS += e2e
# Real CPU nodes beside KWOK's in the clusters of e2e/run-tests (e2e/real-nodes.sh): one by default, so that the
# engines that run on a CPU are served for real under a kubelet in `make test`; E2E_REAL_NODES=0 keeps KWOK only
# (then the real-node tests skip, saying so).
export E2E_REAL_NODES ?= 1

.PHONY: e2e-binaries cluster-up cluster-down e2e-smoke e2e

e2e-binaries:
	e2e/build-binaries

# Leaves the cluster running, with the fake node sets applied: export KUBECONFIG=$${E2E_DIR:-/tmp/ib-e2e}/kubeconfig
cluster-up: e2e-binaries
	e2e/up --nodes

cluster-down:
	e2e/down

# Builds, starts a fresh cluster, runs e2e/test_cluster.py, stops the cluster (also on failure).
e2e-smoke: venv
	E2E_PYTHON=$(PY) e2e/run-tests e2e/test_cluster.py

# All end-to-end tests under e2e/ (with real nodes: llama-server first, for its image).
e2e: venv $(if $(filter-out 0,$(E2E_REAL_NODES)),llama-server)
	E2E_PYTHON=$(PY) e2e/run-tests

# The operator at scale on a fresh local cluster (figures printed and written as JSON + PNG, nothing asserted).
# Nodes are added in ascending counts to one cluster; each point gets a fresh operator and namespace. KWOK's node
# Leases last 20 min (renewed every 5 min: 5,000 nodes at the default 40 s would be 500 Lease writes/s on 2 cores).
# Holds /tmp/ib-bench.lock so that no other benchmark runs beside it. RATE: InferenceBackends created per second;
# at 2/s the 2 cores (control plane, 5,000 KWOK kubelets and the operator together) keep spare CPU, at 5/s they
# saturate (bench/results/operator-tail/README.md; RATE=5 SCALE_ARGS=--diagonal gave operator-scale-5ps.json).
BACKENDS ?= 100,500,1000
NODES ?= 100,1000,5000
RATE ?= 2
SCALE_ARGS ?=
SCALE_OUT ?= bench/results/operator-scale.json
bench-operator: venv e2e-binaries
	flock /tmp/ib-bench.lock sh -c 'E2E_NODE_LEASE_SECONDS=1200 E2E_NODE_GRACE=1500s E2E_AUDIT_READS=1 e2e/up --fresh && \
	  KUBECONFIG=$${E2E_DIR:-/tmp/ib-e2e}/kubeconfig $(PY) -m bench.operator_scale --backends $(BACKENDS) \
	    --nodes $(NODES) --rate $(RATE) --out $(SCALE_OUT) $(SCALE_ARGS) && \
	  $(PY) -m bench.plot_operator_scale $(SCALE_OUT); rc=$$?; e2e/down; exit $$rc'
