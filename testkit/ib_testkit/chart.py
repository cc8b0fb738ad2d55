"""The chart's values branches: one values file per branch of charts/inference-backend's templates, rendered,
linted and scored by tests/test_chart_values.py and applied as a server-side dry run by e2e/test_chart_install.py."""

from __future__ import annotations

from typing import Any

DIGEST = "sha256:" + "0123456789abcdef" * 4
OPERATOR_REF = "internal.example.com/ib/operator"
ZONE_SPREAD = {
    "maxSkew": 1,
    "topologyKey": "topology.kubernetes.io/zone",
    "whenUnsatisfiable": "ScheduleAnyway",
    "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "inference-backend"}},
}
PREFER_SYSTEM = {
    "weight": 1,
    "preference": {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["system"]}]},
}
# fmt: off
BRANCHES: dict[str, dict[str, Any]] = {
    "defaults": {},
    "nameOverride": {"nameOverride": "llm"},
    "fullnameOverride": {"fullnameOverride": "llm-operator"},
    "namespaced": {"clusterWide": False, "watchNamespaces": ["team-a", "team-b"]},
    "namespaced-no-peering": {"clusterWide": False, "watchNamespaces": ["team-a"], "peering": {"enabled": False}},
    "replicas-peering": {"replicas": 3, "peering": {"enabled": True, "name": "ib-leader"}},
    "no-peering": {"peering": {"enabled": False}},
    "external-serviceaccount": {"serviceAccount": {"create": False, "name": "platform-ib"}},
    "serviceaccount-annotations": {"serviceAccount": {"annotations": {"iam.example.com/role": "ib"}}},
    "no-metrics-service": {"metrics": {"service": {"enabled": False}}},
    "no-tests": {"tests": {"enabled": False}},
    "digest": {"image": {"digest": DIGEST}},
    "registry": {"image": {"registry": "registry.example.com:5000"}},
    "mirror": {"global": {"imageRegistry": "mirror.example.com/proxy"}, "image": {"registry": "ignored.example.com"}},
    "pull-secrets": {"imagePullSecrets": [{"name": "op-cred"}],
                     "global": {"imagePullSecrets": ["shared", {"name": "op-cred"}]},
                     "engineImagePullSecrets": [{"name": "engine-cred"}, "shared"]},
    "engine-images": {"engineImages": {"vllm": {"digest": DIGEST},
                                       "fetch": {"repository": OPERATOR_REF, "tag": "0.1.0-patched"},
                                       "llamacppCpu": {"repository": "mirror.example.com/llama.cpp"}}},
    "extras": {
        "extraArgs": ["--unschedulable-grace-seconds=120"],
        "extraEnv": [{"name": "IB_WORKERS", "value": "4"}],
        "extraVolumes": [{"name": "tmp", "emptyDir": {}}],
        "extraVolumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
        "podLabels": {"team": "platform"},
        "podAnnotations": {"example.com/owner": "platform"},
        "priorityClassName": "system-cluster-critical",
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "system", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [PREFER_SYSTEM]}},
        "topologySpreadConstraints": [ZONE_SPREAD],
        "resources": {"requests": {"cpu": "200m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
    },
    "security-contexts": {"podSecurityContext": {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001,
                                                 "fsGroup": 10001, "seccompProfile": {"type": "RuntimeDefault"}},
                          "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                              "capabilities": {"drop": ["ALL"]}, "runAsUser": 10001}},
    "operator-settings": {"logLevel": "debug", "debounceSeconds": 5,
                          "autoscaling": {"prometheusAddress": "https://prom.example.com",
                                          "labelMatchers": 'ns="{namespace}"'}},
    "argocd": {"argocd": {"healthSnippet": True, "namespace": "gitops"}},
    "subchart-keys": {"enabled": True, "global": {"storageClass": "fast", "imageRegistry": ""}},
}
# fmt: on
