# shellcheck shell=bash
# Real CPU nodes for the local cluster: sourced by e2e/up (real_nodes_up) and e2e/down (real_nodes_down), never run.
#
# Each node is a kubelet (cgroupfs driver, cgroup v1: failCgroupV1 false) with its own containerd v2 (CRI, runc,
# overlayfs), on this machine. Around them, once per cluster: a Linux bridge with the pods' subnet (the CNI plugins
# bridge + host-local + loopback + portmap put each pod in its own network namespace on it), kube-proxy in nftables
# mode (Service ClusterIPs, in the host's network namespace), and CoreDNS (host process on the bridge's address:
# cluster.local names; every other name gets NXDOMAIN, so no pod query leaves the machine). A forward rule in an
# nftables table of our own drops whatever a pod sends to an address outside the pods' subnet: pods reach each other,
# Services and this host's bridge address (the local S3/Hub servers of the tests), nothing else.
#
# Everything is started and recorded under $E2E_DIR (pids/, logs/, real/<node>/) and $E2E_RUN (sockets, the
# pods' network namespaces); real_nodes_down stops it and removes what it made: pods' processes (by their cgroups),
# mounts, network namespaces, the bridge, the nftables tables, the cgroups, and puts back the sysctls the kubelet and
# we changed (recorded in $E2E_DIR/real/sysctl.saved).
#
# The nodes are labelled and tainted inference-backend.dev/e2e-real-node=true (NoSchedule): only what tolerates it
# runs there (ib_testkit.real_nodes.real_hardware), so the KWOK tests' selections do not change beside a real node.
#
# Env: E2E_REAL_NODES (how many, default 0), E2E_NODE_SUBNET (default 10.252.<apiserver port % 250>.0/24: the bridge
#   has .1, node i hands out .(16+40i) to .(55+40i)), E2E_KUBELET_PORT (node i listens on +i, default 20250, on the
#   bridge address), E2E_REAL_NODE_PREFIX (default real-cpu: nodes real-cpu-0, real-cpu-1, ...), E2E_NODE_IMAGES
#   (the e2e/build-images names to import, space-separated; default all).

E2E_REAL_NODES=${E2E_REAL_NODES:-0}
E2E_NODE_SUBNET=${E2E_NODE_SUBNET:-10.252.$((E2E_APISERVER_PORT % 250)).0/24}
E2E_KUBELET_PORT=${E2E_KUBELET_PORT:-20250}
E2E_REAL_NODE_PREFIX=${E2E_REAL_NODE_PREFIX:-real-cpu}
E2E_BRIDGE=ib$E2E_APISERVER_PORT
E2E_NODE_GW=${E2E_NODE_SUBNET%.*/*}.1
E2E_RUN=/run/ib-e2e-$E2E_APISERVER_PORT # sockets: a unix socket path must stay under 108 bytes
E2E_CGROUP=ib-e2e-$E2E_APISERVER_PORT   # every real node's processes live under this cgroup, in each hierarchy
E2E_NFT_TABLE=ib_e2e_$E2E_APISERVER_PORT
REAL_DIR=$E2E_DIR/real
RUNC=${RUNC:-$(binpath runc)}

real_node_name() { echo "$E2E_REAL_NODE_PREFIX-$1"; }
# real_node_store I: node I's containerd root, kept across e2e/up --fresh (its imported images: importing the runner
# images again takes minutes) in $IB_CACHE, one per cluster (bridge name) and node; e2e/down --purge keeps it too
# (`rm -rf $IB_CACHE/nodes` frees it).
real_node_store() { echo "$IB_CACHE/nodes/$E2E_BRIDGE-$1"; }

# The cgroup v1 hierarchies mounted here (each /sys/fs/cgroup/<name> with a cgroup.procs), cgroup2's unified one aside.
cgroup_hierarchies() {
  local d
  for d in /sys/fs/cgroup/*/; do
    d=${d%/}
    [[ -f $d/cgroup.procs && $(stat -fc %T "$d") == cgroupfs ]] && echo "$d"
  done
}

# cgroup_make PATH: creates it in every v1 hierarchy (cpuset's cpus and mems copied from the root, as a new cpuset
# cgroup starts empty).
cgroup_make() {
  local h
  for h in $(cgroup_hierarchies); do
    mkdir -p "$h/$1"
    if [[ -f $h/cpuset.cpus ]]; then
      local p=$h part
      for part in ${1//\// }; do
        p=$p/$part
        [[ -s $p/cpuset.cpus ]] || cat "$h/cpuset.cpus" >"$p/cpuset.cpus"
        [[ -s $p/cpuset.mems ]] || cat "$h/cpuset.mems" >"$p/cpuset.mems"
      done
    fi
  done
}

# The pids in cgroup PATH and below, in the memory hierarchy (every process of ours is there).
cgroup_pids() {
  local m=/sys/fs/cgroup/memory/$1
  [[ -d $m ]] || return 0
  find "$m" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u
}

# start_in_cgroup LABEL CGROUP BIN ARGS...: like e2e/up's start, but the process (and what it forks: containerd's
# shims and the containers' runc) starts in CGROUP; pid in $PIDS/LABEL.pid, log in $LOGS/LABEL.log.
start_in_cgroup() {
  local label=$1 cg=$2 bin=$3
  shift 3
  log "starting $label ($(basename "$bin"))"
  cgroup_make "$cg"
  # shellcheck disable=SC2016
  setsid bash -c 'pidfile=$1 cg=$2; shift 2
    for h in /sys/fs/cgroup/*/; do
      [[ -f $h/$cg/cgroup.procs ]] && echo $$ >"$h/$cg/cgroup.procs"
    done
    echo $$ >"$pidfile"; exec "$@"' _ "$PIDS/$label.pid" "$cg" "$bin" "$@" \
    </dev/null >>"$LOGS/$label.log" 2>&1 8>&- 9>&- &
  for _ in $(seq 50); do [[ -s $PIDS/$label.pid ]] && return 0; sleep 0.1; done
  die "$label did not start; see $LOGS/$label.log"
}

# ---------------------------------------------------------------- what the kernel must allow
real_nodes_check() {
  local problems=() t
  [[ $(id -u) == 0 ]] || problems+=("real nodes need root (kubelet, containerd, network namespaces)")
  grep -qw overlay /proc/filesystems || problems+=("no overlayfs in /proc/filesystems (containerd's snapshotter)")
  for t in cpu cpuacct cpuset memory pids devices freezer; do
    [[ -f /sys/fs/cgroup/$t/cgroup.procs ]] || problems+=("cgroup v1 controller $t is not mounted at /sys/fs/cgroup/$t")
  done
  command -v nft >/dev/null || problems+=("no nft (Debian's nftables: e2e/node-prereqs installs it)")
  [[ -x $RUNC ]] || problems+=("no runc at $RUNC (e2e/build-binaries runc)")
  if [[ ${#problems[@]} -eq 0 ]]; then
    local err
    err=$(ip link add "ibchk$$" type veth peer name "ibchk$$p" 2>&1) || problems+=("veth: ip link add failed: $err")
    ip link del "ibchk$$" 2>/dev/null || true
    err=$(nft -c add table ip ibchk 2>&1) || problems+=("nf_tables: nft -c add table failed: $err")
  fi
  if [[ ${#problems[@]} -gt 0 ]]; then
    printf '!! %s\n' "${problems[@]}" >&2
    die "this machine cannot run real nodes (E2E_REAL_NODES=$E2E_REAL_NODES)"
  fi
}

# ---------------------------------------------------------------- PKI and kubeconfigs (e2e/up's cert and kubeconfig)
real_nodes_pki() {
  local i name
  cert kube-proxy system:kube-proxy
  cert coredns ib-e2e-coredns
  kubeconfig "$E2E_DIR/kube-proxy.kubeconfig" kube-proxy
  kubeconfig "$E2E_DIR/coredns.kubeconfig" coredns
  for ((i = 0; i < E2E_REAL_NODES; i++)); do
    name=$(real_node_name "$i")
    cert "kubelet-$name" "system:node:$name" system:nodes
    cert "kubelet-$name-serving" "system:node:$name" system:nodes "IP:$E2E_NODE_GW,IP:127.0.0.1,DNS:$name"
    kubeconfig "$E2E_DIR/kubelet-$name.kubeconfig" "kubelet-$name"
  done
  chmod 600 "$PKI"/*.key
}

# ---------------------------------------------------------------- the network: bridge, forward rule, sysctls
sysctl_set() { # sysctl_set KEY VALUE: records the old value once (real_nodes_down puts it back)
  local key=$1 old
  old=$(sysctl -n "$key")
  grep -q "^$key=" "$REAL_DIR/sysctl.saved" 2>/dev/null || echo "$key=$old" >>"$REAL_DIR/sysctl.saved"
  [[ $old == "$2" ]] || sysctl -qw "$key=$2"
}

real_nodes_network() {
  # The kubelet sets these itself (pkg/kubelet/cm: setupKernelTunables); recorded first so that down restores them.
  local k
  for k in vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys \
    kernel.keys.root_maxbytes; do
    grep -q "^$k=" "$REAL_DIR/sysctl.saved" 2>/dev/null || echo "$k=$(sysctl -n "$k")" >>"$REAL_DIR/sysctl.saved"
  done
  # The nftables tables there before: down removes those the kubelet (its iptables-nft canaries and KUBE-FIREWALL,
  # when Debian's iptables is installed), kube-proxy and the CNI plugins add.
  [[ -f $REAL_DIR/nft-tables.before ]] || nft list tables >"$REAL_DIR/nft-tables.before"
  # A Service's ClusterIP is DNATed on this host to a pod on the bridge: routed, so forwarding must be on.
  sysctl_set net.ipv4.ip_forward 1
  if ! ip link show "$E2E_BRIDGE" >/dev/null 2>&1; then
    log "bridge $E2E_BRIDGE with $E2E_NODE_GW (pods: $E2E_NODE_SUBNET)"
    ip link add "$E2E_BRIDGE" type bridge
  fi
  ip addr replace "$E2E_NODE_GW/${E2E_NODE_SUBNET#*/}" dev "$E2E_BRIDGE"
  ip link set "$E2E_BRIDGE" up
  # Pods talk to the pods' subnet only (this host's bridge address is input, not forwarding, so it is reached).
  nft -f - <<EOF
table inet $E2E_NFT_TABLE
delete table inet $E2E_NFT_TABLE
table inet $E2E_NFT_TABLE {
  chain input {
    type filter hook input priority filter - 10; policy accept;
    tcp dport $E2E_APISERVER_PORT iifname != { "lo", "$E2E_BRIDGE" } counter drop comment "the API server: this host and its pods only"
  }
  chain forward {
    type filter hook forward priority filter - 10; policy accept;
    ip saddr $E2E_NODE_SUBNET ip daddr != $E2E_NODE_SUBNET counter drop comment "pods reach nothing outside the cluster"
    ip daddr $E2E_NODE_SUBNET ip saddr != $E2E_NODE_SUBNET iifname != "$E2E_BRIDGE" counter drop comment "nothing outside reaches the pods"
  }
}
EOF
}

# ---------------------------------------------------------------- the API server for pods
# real_nodes_apiserver_bind: the API server's --bind-address. With real nodes it listens on every address, so that
# pods reach it on this host's bridge address (the nftables table's input chain drops it from any interface but lo
# and the bridge); else 127.0.0.1 alone.
real_nodes_apiserver_bind() { if ((E2E_REAL_NODES > 0)); then echo 0.0.0.0; else echo 127.0.0.1; fi; }

# real_nodes_apiserver_endpoint: the `kubernetes` Service's endpoint, this host's bridge address (the API server runs
# with --endpoint-reconciler-type=none, so it publishes none itself): in-cluster clients (KUBERNETES_SERVICE_HOST,
# 10.96.0.1:443, a SAN of its certificate) reach it through kube-proxy, as the operator's pods do.
real_nodes_apiserver_endpoint() {
  kc apply --server-side --force-conflicts -f - >/dev/null <<EOF
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kubernetes-ib-e2e
  namespace: default
  labels: {kubernetes.io/service-name: kubernetes, endpointslice.kubernetes.io/managed-by: ib-e2e}
addressType: IPv4
endpoints: [{addresses: ["$E2E_NODE_GW"], conditions: {ready: true}}]
ports: [{name: https, port: $E2E_APISERVER_PORT, protocol: TCP}]
EOF
}

# ---------------------------------------------------------------- cluster services: CoreDNS, kube-proxy
real_nodes_dns() {
  kc apply --server-side --force-conflicts -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "ib-e2e:coredns"}
rules:
- {apiGroups: [""], resources: [endpoints, services, pods, namespaces], verbs: [list, watch]}
- {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "ib-e2e:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "ib-e2e:coredns"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: ib-e2e-coredns}]
EOF
  cat >"$REAL_DIR/Corefile" <<EOF
cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {
    bind $E2E_NODE_GW
    errors
    health $E2E_NODE_GW:8080
    ready $E2E_NODE_GW:8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $E2E_DIR/coredns.kubeconfig
        pods insecure
    }
    cache 5
}
# Any other name: NXDOMAIN here (no forwarding: pods have no network beyond this machine).
.:53 {
    bind $E2E_NODE_GW
    errors
    template ANY ANY {
        rcode NXDOMAIN
    }
}
EOF
  start_in_cgroup coredns "$E2E_CGROUP/services" "$(binpath coredns)" -conf "$REAL_DIR/Corefile"
  wait_for "CoreDNS ready" 60 coredns curl -sf --max-time 3 "http://$E2E_NODE_GW:8181/ready"
}

real_nodes_proxy() {
  cat >"$REAL_DIR/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection:
  kubeconfig: $E2E_DIR/kube-proxy.kubeconfig
hostnameOverride: $(real_node_name 0)
bindAddress: $E2E_NODE_GW
healthzBindAddress: $E2E_NODE_GW:10256
metricsBindAddress: $E2E_NODE_GW:10249
clusterCIDR: $E2E_NODE_SUBNET
nodePortAddresses: ["$E2E_NODE_GW/32"]
oomScoreAdj: 0  # its default, -999, needs CAP_SYS_RESOURCE, which this machine's root lacks
# Leave this host's conntrack sysctls alone (0: do not set).
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF
  # kube-proxy's nftables table is `ip kube-proxy` whatever the cluster (a constant of pkg/proxy/nftables): a second
  # cluster's kube-proxy on this host deletes this one's service chains as stale ("Deleting stale nftables chains"),
  # and ClusterIP connections are then refused now and then. Said here; the real-node slots should not overlap.
  if pgrep -f "$(binpath kube-proxy)" >/dev/null; then
    log "!! another cluster's kube-proxy runs on this host: both share the nftables table ip kube-proxy and delete" \
      "each other's service chains, so ClusterIP traffic of both clusters will fail at times"
  fi
  start_in_cgroup kube-proxy "$E2E_CGROUP/services" "$(binpath kube-proxy)" --config="$REAL_DIR/kube-proxy.yaml" --v=1
  wait_for "kube-proxy /healthz" 90 kube-proxy curl -sf --max-time 3 "http://$E2E_NODE_GW:10256/healthz"
}

# ---------------------------------------------------------------- one node: containerd + kubelet
real_node_up() {
  local i=$1 name dir run port lo hi
  name=$(real_node_name "$i")
  dir=$REAL_DIR/$name
  run=$E2E_RUN/$i
  port=$((E2E_KUBELET_PORT + i))
  lo=$((16 + 40 * i))
  hi=$((lo + 39))
  ((hi < 255)) || die "E2E_REAL_NODES=$E2E_REAL_NODES: at most 5 nodes fit $E2E_NODE_SUBNET"
  mkdir -p "$dir/cni/net.d" "$dir/pod-logs" "$dir/kubelet" "$run"
  cat >"$dir/cni/net.d/10-ib-e2e.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "ib-e2e",
  "plugins": [
    {"type": "bridge", "bridge": "$E2E_BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$dir/cni/ipam",
              "ranges": [[{"subnet": "$E2E_NODE_SUBNET", "gateway": "$E2E_NODE_GW",
                           "rangeStart": "${E2E_NODE_SUBNET%.*/*}.$lo", "rangeEnd": "${E2E_NODE_SUBNET%.*/*}.$hi"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}, "backend": "nftables"}
  ]
}
EOF
  # Every registry is this host's discard port: an image that was not imported fails to pull at once
  # (ErrImagePull, then ImagePullBackOff) without a connection leaving the machine.
  mkdir -p "$dir/certs.d/_default"
  cat >"$dir/certs.d/_default/hosts.toml" <<EOF
server = "http://127.0.0.1:9"
[host."http://127.0.0.1:9"]
  capabilities = ["pull", "resolve"]
EOF
  # containerd 2.4's configuration (version 4; nothing imported from /etc/containerd): its own root and state, runc through the v2 shim with cgroupfs, the
  # pods' network namespaces under its state directory (so that down finds them), our pause image as the sandbox.
  cat >"$dir/containerd.toml" <<EOF
version = 4
imports = []
root = "$(real_node_store "$i")/containerd"
state = "$run/containerd"
[plugins."io.containerd.server.v1.grpc"]
  address = "$run/containerd.sock"
[plugins."io.containerd.server.v1.ttrpc"]
  address = "$run/containerd.sock.ttrpc"
[plugins."io.containerd.nri.v1.nri"]
  disable = true
[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
[plugins."io.containerd.cri.v1.runtime"]
  enable_selinux = false
  netns_mounts_under_state_dir = true
  # This machine's root lacks CAP_SYS_RESOURCE: no process may lower its oom_score_adj below its parent's, and the
  # kubelet asks -998 for every pod sandbox ("failed to update /proc/self/oom_score_adj: Permission denied" from
  # runc). Containers get at least containerd's own (0) instead.
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "$RUNC"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["$(binpath cni-plugins)"]
    conf_dir = "$dir/cni/net.d"
    max_conf_num = 1
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  # The content of an unpacked image is dropped (the snapshots are what runs; the archive stays in \$IB_CACHE/images).
  discard_unpacked_layers = true
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "$dir/certs.d"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "$PAUSE_IMAGE"
EOF
  # The shim is found on PATH by its name (containerd-shim-runc-v2): $E2E_DIR/bin has it under that name.
  PATH=$E2E_DIR/bin:$PATH start_in_cgroup "containerd-$name" "$E2E_CGROUP/$name-runtime" "$(binpath containerd)" \
    --config "$dir/containerd.toml"
  wait_for "containerd of $name" 60 "containerd-$name" "$(binpath ctr)" --address "$run/containerd.sock" version
  real_node_images "$name" "$run/containerd.sock" "$(real_node_store "$i")"

  cat >"$dir/resolv.conf" <<EOF
nameserver $E2E_NODE_GW
EOF
  cgroup_make "$E2E_CGROUP/$name"
  cat >"$dir/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine has cgroup v1 only (hybrid: controllers on v1, an empty unified tree); Kubernetes 1.35+ refuses v1
# unless told otherwise (KEP-5573). Said here, and in e2e/README.md.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$E2E_CGROUP/$name
containerRuntimeEndpoint: unix://$run/containerd.sock
address: $E2E_NODE_GW
port: $port
readOnlyPort: 0
healthzBindAddress: $E2E_NODE_GW
healthzPort: $((port + 100))
tlsCertFile: $PKI/kubelet-$name-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-$name-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization:
  mode: Webhook
clusterDomain: cluster.local
clusterDNS: [$E2E_NODE_GW]
resolvConf: $dir/resolv.conf
podLogsDir: $dir/pod-logs
maxPods: 30
oomScoreAdj: 0  # its default, -999, needs CAP_SYS_RESOURCE (see restrict_oom_score_adj above)
serializeImagePulls: false
# The disk is shared with everything else on this machine: evict only when it is really full, never collect images
# (they were imported, not pulled: nothing could pull them again).
evictionHard: {memory.available: "200Mi", nodefs.available: "2Gi", imagefs.available: "2Gi"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionPressureTransitionPeriod: 30s
nodeStatusReportFrequency: 10s
syncFrequency: 10s
fileCheckFrequency: 10s
EOF
  start_in_cgroup "kubelet-$name" "$E2E_CGROUP/$name-kubelet" "$(binpath kubelet)" \
    --config="$dir/kubelet.yaml" --kubeconfig="$E2E_DIR/kubelet-$name.kubeconfig" --root-dir="$dir/kubelet" \
    --cert-dir="$dir/kubelet/pki" --hostname-override="$name" --node-ip="$E2E_NODE_GW" \
    --node-labels="type=real,inference-backend.dev/node-class=cpu-real,inference-backend.dev/e2e-real-node=true" \
    --register-with-taints="inference-backend.dev/e2e-real-node=true:NoSchedule" \
    --v=1
}

# real_node_images NAME SOCKET STORE: imports the images of e2e/build-images (all, or those E2E_NODE_IMAGES names:
# the demo's) into the node's containerd (namespace k8s.io, where the CRI looks), unless it has it already.
real_node_images() {
  local name=$1 sock=$2 store=$3 ref archive have
  local ctr=("$(binpath ctr)" --address "$sock" -n k8s.io)
  local wanted=()
  read -ra wanted <<<"${E2E_NODE_IMAGES:-}"
  have=$("${ctr[@]}" images ls -q 2>/dev/null || true)
  while read -r ref archive; do
    if [[ $archive == *"(missing)" || ! -f $archive ]]; then
      log "!! image $ref is not built (e2e/build-images): its pods will not start on $name"
      continue
    fi
    if grep -qxF "$ref" <<<"$have" && [[ -f $store/images/$(basename "$archive") ]]; then continue; fi
    log "importing $ref into $name's containerd ($(du -h "$archive" | cut -f1))"
    "${ctr[@]}" images import --local "$archive" >/dev/null 2>&1 || die "ctr images import $archive failed"
    # Pinned: the kubelet never garbage-collects it, not even under disk pressure (this machine's disk is shared;
    # a collected image could not be pulled again).
    "${ctr[@]}" images label "$ref" io.cri-containerd.pinned=pinned >/dev/null
    mkdir -p "$store/images"
    rm -f "$store/images/${archive##*/}" "$store/images/$(basename "${archive%-*}")"-*.oci.tar
    touch "$store/images/$(basename "$archive")"
  done < <("$E2E_SRC/build-images" --list "${wanted[@]}" 2>/dev/null)
}

real_nodes_up() {
  ((E2E_REAL_NODES > 0)) || return 0
  real_nodes_check
  local i t0=$SECONDS names=()
  for n in "${E2E_NODE_BINARIES[@]}"; do built "$n" || die "$(binpath "$n") is missing: run e2e/build-binaries nodes"; done
  mkdir -p "$REAL_DIR" "$E2E_RUN"
  ln -sfn "$(binpath containerd-shim-runc-v2)" "$E2E_DIR/bin/containerd-shim-runc-v2"
  real_nodes_network
  for ((i = 0; i < E2E_REAL_NODES; i++)); do
    real_node_up "$i"
    names+=("$(real_node_name "$i")")
  done
  real_nodes_dns
  real_nodes_apiserver_endpoint
  for i in "${names[@]}"; do
    wait_for "node $i registered" 120 "kubelet-$i" kc get node "$i"
  done
  real_nodes_proxy
  for i in "${names[@]}"; do
    wait_for "node $i Ready" 120 "kubelet-$i" \
      bash -c "[[ \$('$KUBECTL' --kubeconfig '$KUBECONFIG_ADMIN' get node '$i' -o 'jsonpath={.status.conditions[?(@.type==\"Ready\")].status}') == True ]]"
  done
  log "real nodes ${names[*]} Ready in $((SECONDS - t0))s (pods on $E2E_BRIDGE, $E2E_NODE_SUBNET; DNS $E2E_NODE_GW)"
}

# ---------------------------------------------------------------- down: everything above, undone
# stop_label LABEL: TERM then KILL the process of $PIDS/LABEL.pid when it still runs the binary it was started with.
stop_label() {
  local label=$1 pidfile=$PIDS/$1.pid pid
  [[ -f $pidfile ]] || return 0
  pid=$(<"$pidfile")
  if [[ $pid =~ ^[0-9]+$ && -r /proc/$pid/cmdline ]] && grep -q "$IB_CACHE/bin/" "/proc/$pid/cmdline"; then
    log "stopping $label (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do
      [[ -e /proc/$pid && $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]] || break
      sleep 0.1
    done
    [[ -e /proc/$pid && $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]] && kill -KILL "$pid" 2>/dev/null
  fi
  rm -f "$pidfile"
}

# unmount_under DIR: every mount at or below DIR, deepest first.
unmount_under() {
  local dir=$1 m
  [[ -n $dir && $dir == /* ]] || return 0
  awk -v d="$dir" '$5 == d || index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r |
    while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
}

real_nodes_down() {
  local label f pids h d i
  [[ -d $REAL_DIR || -d $E2E_RUN || -d /sys/fs/cgroup/memory/$E2E_CGROUP ]] || return 0
  for f in "$PIDS"/kubelet-*.pid; do [[ -f $f ]] && { label=${f##*/}; stop_label "${label%.pid}"; }; done
  stop_label kube-proxy
  stop_label coredns
  # The pods' processes, the shims and containerd itself: all in our cgroups.
  for _ in $(seq 20); do
    pids=$(cgroup_pids "$E2E_CGROUP")
    [[ -z $pids ]] && break
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.25
  done
  [[ -z $(cgroup_pids "$E2E_CGROUP") ]] || log "!! processes left in cgroup $E2E_CGROUP: $(cgroup_pids "$E2E_CGROUP" | tr '\n' ' ')"
  for f in "$PIDS"/containerd-*.pid; do [[ -f $f ]] && rm -f "$f"; done
  unmount_under "$E2E_RUN"
  [[ -d $REAL_DIR ]] && unmount_under "$REAL_DIR"
  for ((i = 0; i < 5; i++)); do unmount_under "$(real_node_store "$i")"; done
  rm -rf "$E2E_RUN"
  # Cgroups, deepest first (a v1 cgroup goes with rmdir once it has no process and no child).
  for h in $(cgroup_hierarchies); do
    [[ -d $h/$E2E_CGROUP ]] || continue
    find "$h/$E2E_CGROUP" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
  nft delete table inet "$E2E_NFT_TABLE" 2>/dev/null || true
  if [[ -f $REAL_DIR/nft-tables.before ]]; then
    # grep finds nothing when an earlier down removed them: not a failure (pipefail would stop down here, before
    # the control plane, and every later down of this E2E_DIR would stop at the same line).
    # Another real-node cluster's tables are left alone: its own (ib_e2e_<its port>), and kube-proxy's and the
    # portmap plugin's, which every cluster's kube-proxy and CNI share on this host, while another kube-proxy runs.
    local others=0
    pgrep -f "$(binpath kube-proxy)" >/dev/null && others=1
    nft list tables | { grep -vxF -f "$REAL_DIR/nft-tables.before" || true; } | while read -r _ family name; do
      [[ $name == ib_e2e_* && $name != "$E2E_NFT_TABLE" ]] && continue
      [[ $others == 1 && ($name == kube-proxy || $name == cni_hostport) ]] && continue
      nft delete table "$family" "$name" 2>/dev/null || true
    done
    rm -f "$REAL_DIR/nft-tables.before"
  fi
  ip link del "$E2E_BRIDGE" 2>/dev/null || true
  if [[ -f $REAL_DIR/sysctl.saved ]]; then
    while IFS== read -r k v; do sysctl -qw "$k=$v" || true; done <"$REAL_DIR/sysctl.saved"
    rm -f "$REAL_DIR/sysctl.saved"
  fi
  log "real nodes down (bridge $E2E_BRIDGE, nftables, cgroups, mounts removed; sysctls restored)"
}
