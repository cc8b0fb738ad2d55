"""spec.routing.inferencePool: a Gateway API Inference Extension InferencePool over the backend's serving pods, and
the endpoint picker it names, with its Service and least RBAC. Pure: dicts built here, applied by the controller.

Cited against sigs.k8s.io/gateway-api-inference-extension v1.5.0 (the version of e2e/gomod/gie, whose CRDs and
picker e2e runs): api/v1 InferencePool (spec.selector.matchLabels, spec.targetPorts[].number, spec.appProtocol,
spec.endpointPickerRef{group, kind, name, port.number, failureMode}); cmd/epp, the scoring picker, and
pkg/epp/server/options.go (its flags: --pool-name, --pool-namespace, --pool-group, --grpc-port 9002,
--grpc-health-port 9003, --metrics-port 9090, --config-text, and three whose defaults are turned off here:
--tracing (an OTLP exporter to a collector this chart does not run), --metrics-endpoint-auth (authenticated metrics
need a ClusterRole for TokenReviews and SubjectAccessReviews; the chart's own switch, auth.enabled, renders
--metrics-endpoint-auth=false the same way) and --enable-pprof); cmd/epp/runner/health.go (without leader election
every health service turns SERVING once the pool is synced); pkg/epp/server/controller_manager.go (it watches Pods
and its InferencePool in the pool's namespace, and InferenceObjectives and InferenceModelRewrites there when their
CRDs are served; it writes nothing) and config/charts/inferencepool/templates/rbac.yaml with epplib/_rbac.yaml (the
chart's Roles: get/list/watch on exactly those, the rules rendered here). The scorers and the metrics they read:
picker.py.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from inference_backend import images, picker
from inference_backend.api import InferenceBackend
from inference_backend.decision import Decision
from inference_backend.engines import card
from inference_backend.engines.base import HTTP_PORT
from inference_backend.engines.image_catalog import PICKER_IMAGE, PICKER_VERSION
from inference_backend.names import dns1035_label, label_value
from inference_backend.vocabulary import (
    COMPONENT_LABEL,
    INFERENCE_POOL_API_VERSION,
    INFERENCE_POOL_GROUP,
    INFERENCE_POOL_X_GROUP,
    INSTANCE_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    NAME_LABEL,
    PART_OF,
    PART_OF_LABEL,
    SPEC_HASH,
)

Json = dict[str, Any]
__all__ = ["PICKER_IMAGE", "PICKER_VERSION", "objects", "picker_name", "picker_name_of", "pool_name"]
PICKER_COMPONENT = "endpoint-picker"
GRPC_PORT, HEALTH_PORT, METRICS_PORT = 9002, 9003, 9090
HEALTH_SERVICE = "inference-extension"
PICKER_USER = 65532
"""distroless/static:nonroot's user."""


def pool_name(ib: InferenceBackend) -> str:
    """The InferencePool: the InferenceBackend's name (a DNS subdomain, as the CRD's metadata.name)."""
    return ib.metadata.name


def picker_name(ib: InferenceBackend) -> str:
    """The picker's Deployment, Service, ServiceAccount, Role and RoleBinding: a DNS-1035 label (the Service's rule)."""
    return picker_name_of(ib.metadata.name)


def picker_name_of(backend: str) -> str:
    """The picker's name for the InferenceBackend named ``backend``."""
    return dns1035_label(f"{backend}-epp")


def _labels(ib: InferenceBackend) -> dict[str, str]:
    return {
        NAME_LABEL: "epp",
        INSTANCE_LABEL: label_value(ib.metadata.name),
        COMPONENT_LABEL: PICKER_COMPONENT,
        MANAGED_BY_LABEL: MANAGED_BY,
        PART_OF_LABEL: PART_OF,
    }


def _meta(ib: InferenceBackend, name: str, labels: dict[str, str]) -> Json:
    return {"name": name, "namespace": ib.metadata.namespace or "default", "labels": dict(labels)}


def objects(
    ib: InferenceBackend,
    serving: dict[str, str],
    pool_labels: dict[str, str],
    decision: Decision,
    image_policy: images.Policy = images.EMPTY,
) -> list[Json]:
    """The InferencePool over the pods ``serving`` selects (every replica's pod, or a LeaderWorkerSet's leaders), and
    its picker: ServiceAccount, Role, RoleBinding, Deployment, Service. ``pool_labels``: the backend's labels;
    ``decision``: its engine and adapters, which choose the picker's scorers (picker.py)."""
    name, epp = pool_name(ib), picker_name(ib)
    lbl = _labels(ib)
    pool: Json = {
        "apiVersion": INFERENCE_POOL_API_VERSION,
        "kind": "InferencePool",
        "metadata": _meta(ib, name, pool_labels),
        "spec": {
            "selector": {"matchLabels": dict(serving)},
            "targetPorts": [{"number": HTTP_PORT}],
            "appProtocol": "http",
            # FailClose (the CRD's default, written out): no picker, no request, rather than a blind one
            "endpointPickerRef": {
                "group": "",
                "kind": "Service",
                "name": epp,
                "port": {"number": GRPC_PORT},
                "failureMode": "FailClose",
            },
        },
    }
    account: Json = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(ib, epp, lbl)}
    role: Json = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _meta(ib, epp, lbl),
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [INFERENCE_POOL_GROUP], "resources": ["inferencepools"], "verbs": ["get", "list", "watch"]},
            {
                "apiGroups": [INFERENCE_POOL_X_GROUP],
                "resources": ["inferenceobjectives", "inferencemodelrewrites"],
                "verbs": ["get", "list", "watch"],
            },
        ],
    }
    binding: Json = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(ib, epp, lbl),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": epp},
        "subjects": [{"kind": "ServiceAccount", "name": epp, "namespace": ib.metadata.namespace or "default"}],
    }
    config = picker.config_text(card(decision.backend or ""), decision)
    deployment = _deployment(ib, epp, lbl, config, image_policy)
    return [pool, account, role, binding, deployment, _service(ib, epp, lbl)]


def _deployment(ib: InferenceBackend, name: str, lbl: dict[str, str], config: str, policy: images.Policy) -> Json:
    namespace = ib.metadata.namespace or "default"
    health = {"grpc": {"port": HEALTH_PORT, "service": HEALTH_SERVICE}}
    container: Json = {
        "name": "epp",
        "image": PICKER_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "args": [
            "--pool-name",
            pool_name(ib),
            "--pool-namespace",
            namespace,
            "--pool-group",
            INFERENCE_POOL_GROUP,
            "--grpc-port",
            str(GRPC_PORT),
            "--grpc-health-port",
            str(HEALTH_PORT),
            "--metrics-port",
            str(METRICS_PORT),
            "--tracing=false",
            "--metrics-endpoint-auth=false",
            "--enable-pprof=false",
            "--config-text",
            config,
        ],
        "ports": [
            {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
            {"name": "grpc-health", "containerPort": HEALTH_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
        ],
        "readinessProbe": {**health, "periodSeconds": 2},
        "livenessProbe": {**health, "initialDelaySeconds": 5, "periodSeconds": 10},
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "runAsUser": PICKER_USER,
            "runAsGroup": PICKER_USER,
        },
    }
    pod_spec: Json = {
        "serviceAccountName": name,
        "enableServiceLinks": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}, "runAsNonRoot": True},
        "containers": [container],
    }
    if ib.spec.hardware.tolerations:
        # the backend's tolerations, so it runs wherever the backend's pods may (a cluster whose nodes are all
        # tainted); not its node selector, which names GPU nodes the picker has no use for
        pod_spec["tolerations"] = [t.wire() for t in ib.spec.hardware.tolerations]
    pod_spec = images.apply(pod_spec, policy)
    selector = {k: lbl[k] for k in (INSTANCE_LABEL, COMPONENT_LABEL, MANAGED_BY_LABEL)}
    # the hash of the template, as on the backend's own pods (render.spec_hash: sha256 of its canonical JSON)
    digest = hashlib.sha256(
        json.dumps({"metadata": {"labels": lbl}, "spec": pod_spec}, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(ib, name, lbl),
        "spec": {
            "replicas": 1,
            # one picker at a time (the chart's _deployment.yaml): its prefix index lives in its memory, and two
            # pickers of a rolling update would each send a prefix where only its own index has seen it
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": dict(lbl), "annotations": {SPEC_HASH: digest}}, "spec": pod_spec},
        },
    }


def _service(ib: InferenceBackend, name: str, lbl: dict[str, str]) -> Json:
    selector = {k: lbl[k] for k in (INSTANCE_LABEL, COMPONENT_LABEL, MANAGED_BY_LABEL)}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(ib, name, lbl),
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [
                # the gateway's ext-proc stream: gRPC over TLS (--secure-serving, on by default: a self-signed
                # certificate the gateways accept without verification, as upstream's guides set them up)
                {"name": "grpc", "port": GRPC_PORT, "targetPort": "grpc", "protocol": "TCP"},
                {"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"},
            ],
        },
    }
