"""The operator's vocabulary: API groups, label keys and values, annotations and field managers, defined once.

Every module that names one of these imports it from here (a leaf module: it imports nothing of the package, so
every layer may use it). Values are a contract with the clusters the operator already runs on: renaming one
orphans what an older operator applied.
"""

from __future__ import annotations

# -- API groups ---------------------------------------------------------------------------------------------------
GROUP = "serving.inferencebackend.io"
"""Our API group (InferenceBackend, Model) and the prefix of our labels and annotations."""
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
LWS_GROUP, LWS_VERSION, LWS_PLURAL = "leaderworkerset.x-k8s.io", "v1", "leaderworkersets"
LWS_API_VERSION = f"{LWS_GROUP}/{LWS_VERSION}"
LWS_CRD = f"{LWS_PLURAL}.{LWS_GROUP}"
"""The LeaderWorkerSet CRD (sigs.k8s.io/lws) a multi-node placement needs; absent on clusters without LWS."""
KEDA_GROUP, KEDA_VERSION = "keda.sh", "v1alpha1"
KEDA_API_VERSION = f"{KEDA_GROUP}/{KEDA_VERSION}"
KEDA_CRD = f"scaledobjects.{KEDA_GROUP}"
"""KEDA's ScaledObject CRD, which spec.autoscaling needs; absent on clusters without KEDA."""

INFERENCE_POOL_GROUP, INFERENCE_POOL_VERSION = "inference.networking.k8s.io", "v1"
INFERENCE_POOL_API_VERSION = f"{INFERENCE_POOL_GROUP}/{INFERENCE_POOL_VERSION}"
INFERENCE_POOL_CRD = f"inferencepools.{INFERENCE_POOL_GROUP}"
INFERENCE_POOL_X_GROUP = "inference.networking.x-k8s.io"
"""The Inference Extension's experimental group (InferenceObjective, InferenceModelRewrite), which its picker reads."""
"""The Gateway API Inference Extension's InferencePool CRD, which spec.routing.inferencePool needs."""

# -- labels -------------------------------------------------------------------------------------------------------
NAME_LABEL = "app.kubernetes.io/name"
INSTANCE_LABEL = "app.kubernetes.io/instance"
COMPONENT_LABEL = "app.kubernetes.io/component"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
PART_OF_LABEL = "app.kubernetes.io/part-of"
BACKEND_LABEL = f"{GROUP}/backend"
"""The engine a pod runs (vllm, tgi, ...)."""
MANAGED_BY = "inference-backend-operator"
"""The managed-by value on every child and pod template: what the operator's watches select."""
PART_OF = "inference-backend"
COMPONENT = "inference-server"
WORKER_COMPONENT = "inference-worker"
"""The component label of a LeaderWorkerSet's worker pods: they serve no API, so no Service selecting
``COMPONENT`` (ours, or the one kept serving while a Deployment is replaced by a LeaderWorkerSet) ever sends them
requests."""
LWS_LABEL = "leaderworkerset.sigs.k8s.io"
WORKER_INDEX_LABEL = f"{LWS_LABEL}/worker-index"
"""Set on every pod of a LeaderWorkerSet by its controller (sigs.k8s.io/lws v0.7.0,
api/leaderworkerset/v1/leaderworkerset_types.go WorkerIndexLabelKey); "0" on the leader."""
GROUP_KEY_LABEL = f"{LWS_LABEL}/group-key"
"""The unique hash of a group, set on its leader by LWS's pod webhook and copied to its workers
(GroupUniqueHashLabelKey, pkg/webhooks/pod_webhook.go)."""
HOSTNAME_LABEL = "kubernetes.io/hostname"

# -- annotations --------------------------------------------------------------------------------------------------
SPEC_HASH = f"{GROUP}/spec-hash"
DRA_POOL_ANNOTATION = f"{GROUP}/dra-devices"
"""On a pod template placed through a ResourceClaimTemplate: the DRA pool and devices per pod as JSON
``[deviceClass, [[attribute, value], ...], count]`` (facts/pools.py; the ledger reads it back from the workloads)."""
"""On a workload's pod template: the hash of the rendered template (render.spec_hash), which placement it is."""
APPLIED_HASH = f"{GROUP}/applied-hash"
"""On every child: the content hash of the manifest last applied (a child is applied again only when it differs)."""
REPLICAS_OWNER = f"{GROUP}/replicas-owner"
"""On a Deployment applied while spec.autoscaling is set: "autoscaler" (the operator's apply leaves out replicas).
Its absence on a live Deployment means the operator's field manager still owns them: they are handed over first."""
AUTOSCALER = "autoscaler"
"""The REPLICAS_OWNER value."""
SCRAPE_ANNOTATION = "prometheus.io/scrape"
SCRAPE_PORT_ANNOTATION = "prometheus.io/port"
SCRAPE_PATH_ANNOTATION = "prometheus.io/path"

# -- field managers -----------------------------------------------------------------------------------------------
FIELD_MANAGER = "inference-backend"
"""The server-side apply field manager owning every field the operator sets (and the Events' source)."""
HANDOFF_MANAGER = "inference-backend-handoff"
"""The field manager that holds a Deployment's replicas for the moment the operator's own apply drops them (when
spec.autoscaling is turned on), so dropping them does not reset them to the default; the autoscaler's first
write takes them over (Kubernetes "Server-Side Apply", Transferring ownership)."""
