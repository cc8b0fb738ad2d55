"""Render an InferenceBackend + its Decision into the Kubernetes objects the operator applies. Pure: no I/O.

One function, ``render(ib, decision)``, used by the CLI (``inference-backend render``) and the operator. Output is
deterministic: dicts are built in a fixed key order and every list in a fixed order, so the same input always
gives byte-identical YAML. Owner references are not set here (the kube layer adds them); ``object_names`` says
what the objects are called.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import yaml

from inference_backend import autoscaling, images, routing
from inference_backend.api import InferenceBackend
from inference_backend.decision import Decision, InvalidSpec
from inference_backend.engines import ENGINES, EngineContainer, card, lora
from inference_backend.engines.artifacts import CACHE_VOLUME
from inference_backend.engines.base import DRA_CLAIM, KubeRef
from inference_backend.facts import ARCH_LABEL, DRA_POOL_ANNOTATION, dra_annotation, pod_selector, tolerates
from inference_backend.memory import disk_bytes, weight_bytes
from inference_backend.names import dns1035_label, endpoint, label_value, service_name
from inference_backend.quantity import GIB, parse_quantity
from inference_backend.rollout import Choice, Context, choose, strategy
from inference_backend.selection.hardware import ARM64_TAINT
from inference_backend.vocabulary import (
    AUTOSCALER,
    BACKEND_LABEL,
    COMPONENT,
    COMPONENT_LABEL,
    GROUP_KEY_LABEL,
    HOSTNAME_LABEL,
    INSTANCE_LABEL,
    LWS_API_VERSION,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    NAME_LABEL,
    PART_OF,
    PART_OF_LABEL,
    REPLICAS_OWNER,
    SCRAPE_ANNOTATION,
    SCRAPE_PATH_ANNOTATION,
    SCRAPE_PORT_ANNOTATION,
    SPEC_HASH,
    WORKER_COMPONENT,
    WORKER_INDEX_LABEL,
)

Json = dict[str, Any]
TERMINATION_GRACE_SECONDS = 60
"""Time for the serving container's preStop sleep (engines/base.py PRE_STOP_SLEEP_SECONDS: the endpoint removal
reaches every kube-proxy first) and then for in-flight generations to finish after SIGTERM (the engines stop
admitting and drain)."""


@dataclass(frozen=True)
class Rendered:
    objects: tuple[Json, ...]
    container: EngineContainer
    spec_hash: str
    unsupported: tuple[str, ...]
    """The Decision's unsupported features followed by the renderer's notes."""
    rollout: Choice | None = None
    """How the workload's pods are replaced, chosen from the cluster (rollout.choose); None when rendered offline."""


def object_names(ib: InferenceBackend) -> dict[str, str]:
    """Names of the rendered objects (all in the InferenceBackend's namespace): the Deployment and the
    PodDisruptionBudget take the InferenceBackend's name (a subdomain of at most names.MAX_NAME characters, which
    the CRD enforces), the Service a DNS-1035 label derived from it (names.service_name)."""
    name = ib.metadata.name
    return {
        "Deployment": name,
        "Service": service_name(name),
        "PodDisruptionBudget": name,
        "ScaledObject": name,
        "LeaderWorkerSet": lws_name(name),
    }


def claim_template_name(name: str) -> str:
    """The ResourceClaimTemplate of a DRA placement of the InferenceBackend ``name`` (a DNS subdomain: the
    InferenceBackend's name is at most names.MAX_NAME characters)."""
    return f"{name}-{DRA_CLAIM}"


def service_endpoint(ib: InferenceBackend) -> str:
    """In-cluster URL of the OpenAI-compatible API (status.endpoint): the Service's DNS name."""
    return endpoint(ib.metadata.name, ib.metadata.namespace or "default")


def selector_labels(ib: InferenceBackend) -> dict[str, str]:
    """The Deployment's selector. Immutable, so it holds nothing that can change (not the engine)."""
    return selector_of(ib.metadata.name)


def selector_of(name: str) -> dict[str, str]:
    return {
        INSTANCE_LABEL: label_value(name),
        COMPONENT_LABEL: COMPONENT,
        MANAGED_BY_LABEL: MANAGED_BY,
    }


def labels(ib: InferenceBackend, engine: str) -> dict[str, str]:
    return {
        NAME_LABEL: engine,
        INSTANCE_LABEL: label_value(ib.metadata.name),
        COMPONENT_LABEL: COMPONENT,
        MANAGED_BY_LABEL: MANAGED_BY,
        PART_OF_LABEL: PART_OF,
        BACKEND_LABEL: engine,
    }


def spec_hash(pod_template: Json) -> str:
    """sha256 over the canonical JSON (sorted keys, no whitespace) of the pod template, without the hash."""
    tpl = json.loads(json.dumps(pod_template))
    tpl.get("metadata", {}).get("annotations", {}).pop(SPEC_HASH, None)
    canonical = json.dumps(tpl, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _node_selector(ib: InferenceBackend, decision: Decision) -> dict[str, str]:
    """spec.hardware.nodeSelector plus the label naming the chosen GPU product on its nodes (GFD's
    nvidia.com/gpu.product, GKE's gke-accelerator, Karpenter's instance-gpu-name, AMD's product name or the
    instance type: whichever identified it); none for a GPU nothing names."""
    out = dict(sorted(ib.spec.hardware.node_selector.items()))
    p = decision.placement
    if p is not None and p.gpu is not None:
        for key, value in pod_selector(p.gpu):  # MIG mixed strategy: the whole GPU's product (facts/pools.py)
            out.setdefault(key, value)
    if decision.arch:  # the pool mixes architectures, or GKE's arm64 taint (selection/tree.py _pin_arch)
        out.setdefault(ARCH_LABEL, decision.arch)
    return out


def _affinity(decision: Decision) -> Json:
    """Required node affinity keeping a CPU placement off GPU nodes (selection/hardware.py gpu_node_exclusion)."""
    if not decision.avoid_labels:
        return {}
    exprs: list[Json] = []
    for key, op, values in decision.avoid_labels:
        e: Json = {"key": key, "operator": op}
        if values:
            e["values"] = list(values)
        exprs.append(e)
    terms = [{"matchExpressions": exprs}]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


def _tolerations(ib: InferenceBackend, decision: Decision) -> list[Json]:
    """spec.hardware.tolerations, plus the toleration the ExtendedResourceToleration admission plugin adds for
    the accelerator resource when the chosen nodes carry a taint keyed on it (GKE's nvidia.com/gpu=present), so the
    pod schedules there whether or not the cluster runs that plugin."""
    own = [t.wire() for t in ib.spec.hardware.tolerations]
    if decision.arch_toleration and not tolerates(own, ARM64_TAINT):
        own.append({"key": ARCH_LABEL, "operator": "Equal", "value": "arm64", "effect": "NoSchedule"})
    p = decision.placement
    if p is None or p.gpu is None or p.gpu.dra:
        return own
    implicit = {"key": p.gpu.resource, "operator": "Exists", "effect": "NoSchedule"}
    needed = any(
        t.key == p.gpu.resource and t.effect == "NoSchedule" and not tolerates(own, t) for t in p.hardware.taints
    )
    return [*own, implicit] if needed else own


INIT_USER = 65532
"""The operator image's user (images/operator/Dockerfile: USER 65532), which the fetch init containers run."""


def _pod_security(run_as_user: int | None) -> Json:
    """Pod Security "restricted" where the engine's image runs as non-root (its card says which uid, or why not):
    RuntimeDefault seccomp always; runAsNonRoot, the uid and fsGroup (the emptyDirs are group-writable) when set."""
    out: Json = {"seccompProfile": {"type": "RuntimeDefault"}}
    if run_as_user is not None:
        out |= {"runAsNonRoot": True, "runAsUser": run_as_user, "runAsGroup": run_as_user, "fsGroup": run_as_user}
    return out


def _hardened(container: Json, run_as_user: int | None, read_only: bool = False) -> Json:
    """No privilege escalation and no capabilities (restricted's container rules); ``run_as_user`` for a container
    whose image's user differs from the pod's (the operator image of the fetch init containers). ``read_only``: a
    read-only root filesystem, with the scratch emptyDir at /tmp as HOME (nothing else is written outside the
    volumes: our runners and the fetch step write only there and to the model volumes, llama-server only to
    LLAMA_CACHE)."""
    sc: Json = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    if run_as_user is not None:
        sc |= {"runAsNonRoot": True, "runAsUser": run_as_user, "runAsGroup": run_as_user}
    if not read_only:
        return {**container, "securityContext": sc}
    env = list(container.get("env") or [])
    if not any(e.get("name") == "HOME" for e in env):
        env.append({"name": "HOME", "value": SCRATCH_DIR})
    mounts = [*(container.get("volumeMounts") or []), {"name": SCRATCH, "mountPath": SCRATCH_DIR}]
    return {**container, "env": env, "volumeMounts": mounts, "securityContext": sc | {"readOnlyRootFilesystem": True}}


def literal(text: str) -> str:
    """``text`` as the kubelet must take it literally in a container's command, args or env value: every ``$``
    doubled. The kubelet expands ``$(VAR)`` there from the container's environment and turns ``$$`` into ``$``
    (k8s.io/kubernetes third_party/forked/golang/expansion Expand, called from pkg/kubelet/container/helpers.go
    ExpandContainerCommandAndArgs and kubelet_pods.go makeEnvironmentVariables), so doubling is exact: what runs is
    ``text``, whatever it holds (``$(HF_TOKEN)``, ``$$(X)``, a lone ``$``). Only ``$(`` -> ``$$(`` would not do:
    ``$$(HF_TOKEN)`` would become ``$$$(HF_TOKEN)`` and expand. The operator's own references (engines/base.py
    KubeRef: the LeaderWorkerSet's ``$(LWS_LEADER_ADDRESS)``) are left to the kubelet."""
    return str(text) if isinstance(text, KubeRef) else text.replace("$", "$$")


def no_expansion(container: Json) -> Json:
    """The one place user text is escaped: ``container``'s command, args and env values made literal (``literal``).
    Applied to every container the operator renders (engine, worker and init containers), before anything copies
    them (a copy would lose the KubeRef marks)."""
    out = dict(container)
    for key in ("command", "args"):
        if key in out:
            out[key] = [literal(v) for v in out[key]]
    if "env" in out:
        out["env"] = [{**e, "value": literal(e["value"])} if isinstance(e.get("value"), str) else e for e in out["env"]]
    return out


SCRATCH, SCRATCH_DIR = "scratch", "/tmp"
"""The writable scratch emptyDir of containers with a read-only root filesystem."""


SMALL_DISK = "1Gi"
"""A disk emptyDir that holds no weights (the cache of an engine whose weights come from a volume)."""


def _holds_weights(volume: Json, downloads: bool) -> bool:
    """The fetch init containers' volumes hold the weights; the model cache does when the engine downloads them."""
    name = str(volume.get("name", ""))
    return name.endswith("-weights") or (name == "model-cache" and downloads)


def _on_disk(volume: Json) -> bool:
    empty = volume.get("emptyDir")
    return isinstance(empty, dict) and empty.get("medium") != "Memory"


def _check_cache(
    ib: InferenceBackend, decision: Decision, weights: str, security: Json, volumes: tuple[Json, ...]
) -> None:
    """spec.model.cache: refuse a claim whose given size cannot hold the weights; give the pod fsGroup 65532 (the
    fetch step's user) when it has none, so that the fetch init container can write into the claim (the kubelet
    makes the volume group-writable; OnRootMismatch: only when its root is not already so)."""
    cache = ib.spec.model.cache
    if cache is None:
        return
    if cache.size is not None and parse_quantity(cache.size) < parse_quantity(weights):
        raise InvalidSpec("spec.model.cache.size", f"{cache.size} cannot hold the weights ({weights} with headroom)")
    if any(v.get("name") == CACHE_VOLUME and "persistentVolumeClaim" in v for v in volumes):
        if "fsGroup" not in security:
            security["fsGroup"] = INIT_USER
        security["fsGroupChangePolicy"] = "OnRootMismatch"


def weights_claim_name(name: str) -> str:
    """The PersistentVolumeClaim the operator creates for spec.model.cache.storageClass."""
    return f"{name}-weights"


HOST_PATH_PREFIXES = ("/var/lib/inference-backend",)
"""The node paths spec.model.cache.hostPath may name (itself or below), unless the operator is told others (the
chart's modelCache.hostPathPrefixes): `hostPath: /proc` mounted the node's /proc into the fetch container."""


def _resolved_cache(ib: InferenceBackend, decision: Decision, host_paths: Sequence[str]) -> Decision:
    """The decision with its cache completed: the backend's namespace (part of the cache key), a storageClass
    cache's claim named (the pods mount the claim the operator creates); a hostPath outside ``host_paths`` refused."""
    m = decision.model
    if m is None or m.cache is None:
        return decision
    path = m.cache.host_path
    if path is not None and not any(
        path.rstrip("/") == p.rstrip("/") or path.startswith(p.rstrip("/") + "/") for p in host_paths
    ):
        allowed = ", ".join(host_paths) or "none"
        why = (
            f"{path} is not under a node path the operator allows ({allowed}: chart value modelCache.hostPathPrefixes)"
        )
        raise InvalidSpec("spec.model.cache.hostPath", why)
    cache = replace(m.cache, namespace=ib.metadata.namespace or "default")
    if cache.storage_class is not None and cache.claim is None:
        cache = replace(cache, claim=weights_claim_name(ib.metadata.name))
    return replace(decision, model=replace(m, cache=cache))


def weights_claim(ib: InferenceBackend, decision: Decision, lbl: dict[str, str]) -> list[Json]:
    """spec.model.cache.storageClass: the PersistentVolumeClaim of that class the weights are downloaded into once,
    sized from them (spec.model.cache.size when given), ReadWriteMany when several pods mount it at once (replicas,
    autoscaling.maxReplicas or a replica across nodes above 1), else ReadWriteOnce. Owned by the InferenceBackend
    (the kube layer adds the owner reference), so deleting it deletes the claim."""
    cache = ib.spec.model.cache
    if cache is None or cache.storage_class is None:
        return []
    spec = ib.spec
    most = spec.replicas if spec.autoscaling is None else spec.autoscaling.max_replicas
    shared = most > 1 or (decision.placement is not None and decision.placement.multi_node)
    size = cache.size or _weights_quantity(decision)
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {
                "name": weights_claim_name(ib.metadata.name),
                "namespace": ib.metadata.namespace or "default",
                "labels": dict(lbl),
            },
            "spec": {
                "accessModes": ["ReadWriteMany" if shared else "ReadWriteOnce"],
                "storageClassName": cache.storage_class,
                "resources": {"requests": {"storage": str(size)}},
            },
        }
    ]


def _weights_quantity(decision: Decision) -> str:
    """Disk for one copy of the weights as their files hold them (the draft's included), with a tenth and 1 GiB of
    headroom (tokenizer, config, partial downloads): memory.disk_bytes, the figure the selection checked against
    the node's allocatable ephemeral-storage (selection/nodefit.py)."""
    weights = 0.0
    for m in (decision.model, decision.speculation.draft if decision.speculation.enabled else None):
        if m is not None:
            weights += weight_bytes(m.parameters, m.dtype, m.quantization)
    if decision.model is None and decision.memory is not None:
        weights = decision.memory.weights
    return f"{disk_bytes(weights) // GIB}Gi"


def _sized(volume: Json, weights: str) -> Json:
    """A disk emptyDir bounded by what it holds: the weights."""
    if not _on_disk(volume):
        return volume
    return {**volume, "emptyDir": {**volume["emptyDir"], "sizeLimit": weights}}


def selector_string(name: str) -> str:
    """The Deployment's selector as a label selector string (status.selector, the scale subresource's)."""
    return ",".join(f"{k}={v}" for k, v in sorted(selector_of(name).items()))


def render_result(
    ib: InferenceBackend,
    decision: Decision,
    surge: bool | None = None,
    scaling: autoscaling.Settings = autoscaling.DEFAULT,
    image_policy: images.Policy = images.EMPTY,
    rollout: Context | None = None,
    host_paths: Sequence[str] = HOST_PATH_PREFIXES,
) -> Rendered:
    """Everything ``render`` returns, plus the engine container, the spec hash and the notes. With
    spec.autoscaling the Deployment has no replicas (the autoscaler owns them, its REPLICAS_OWNER annotation says
    so) and a KEDA ScaledObject follows. ``image_policy``: the operator's mirror, image overrides and pull secrets
    (images.py), applied to every pod template before its hash is taken. ``rollout``: the cluster the operator
    sees, from which the rollout strategy is chosen once the template's hash is known (``Rendered.rollout``).
    ``host_paths``: the node paths a hostPath cache may name."""
    if decision.backend is None or decision.placement is None:
        raise ValueError(f"InferenceBackend {ib.metadata.name} is not satisfiable: nothing to render")
    spec = ib.spec
    engine = decision.backend
    decision = _resolved_cache(ib, decision, host_paths)
    assert decision.placement is not None
    c = ENGINES[engine](decision, spec, ib.metadata.name)
    lbl = labels(ib, engine)
    pod_annotations = _scrape_annotations(c) if scaling.scrape_annotations else {}
    pod_spec = _pod_spec(ib, decision, c)
    claim = _dra_claim(ib, decision, pod_spec, pod_annotations)
    pod_spec = images.apply(pod_spec, image_policy)
    template: Json = {"metadata": {"labels": dict(lbl), "annotations": pod_annotations}, "spec": pod_spec}
    if decision.placement.multi_node:
        multi = _multi_node(ib, decision, c, template, image_policy, claim)
        if rollout is None:
            return multi
        return replace(multi, rollout=_choose(ib, decision, rollout, multi.spec_hash))
    digest = spec_hash(template)
    template["metadata"]["annotations"][SPEC_HASH] = digest
    choice = _choose(ib, decision, rollout, digest) if rollout is not None else None
    if choice is not None and choice.surge is not None:
        surge = choice.surge
    deployment = _deployment(ib, decision, template, surge, lbl)
    objects: list[Json] = [
        *claim,
        *weights_claim(ib, decision, lbl),
        *_adapters_config(ib, c, lbl),
        deployment,
        *_service_and_pdb(ib, c, lbl, selector_labels(ib)),
        *_routing(ib, decision, selector_labels(ib), lbl, image_policy),
    ]
    if spec.autoscaling is not None:
        target = {"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment["metadata"]["name"]}
        objects.append(autoscaling.scaled_object(ib, engine, target, lbl, scaling))
    return Rendered(tuple(objects), c, digest, tuple(decision.unsupported) + c.unsupported, choice)


def _adapters_config(ib: InferenceBackend, c: EngineContainer, lbl: dict[str, str]) -> list[Json]:
    """The ConfigMap of the adapters the pods load while they serve (engines/lora.py runtime_served): its sidecar
    reads it from the mounted volume, which the kubelet refreshes, so a change of spec.adapters reaches the running
    pods without a new pod template."""
    if c.adapters_config is None:
        return []
    meta = {"name": lora.config_map_name(ib.metadata.name), "namespace": ib.metadata.namespace or "default"}
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {**meta, "labels": dict(lbl)},
            "data": {lora.CONFIG_FILE: c.adapters_config},
        }
    ]


def _scrape_annotations(c: EngineContainer) -> Json:
    """prometheus.io/* on the engine pods, for annotation discovery."""
    return {
        SCRAPE_ANNOTATION: "true",
        SCRAPE_PORT_ANNOTATION: str(c.metrics_port),
        SCRAPE_PATH_ANNOTATION: c.metrics_path,
    }


def _pod_spec(ib: InferenceBackend, decision: Decision, c: EngineContainer) -> Json:
    """The engine pod's spec: placement, security, the hardened containers and their volumes, sized."""
    pod_spec: Json = {
        # No service-link env vars: a Service named e.g. "vllm" would inject VLLM_PORT=tcp://..., which vLLM
        # reads as its own setting, and TGI reads every flag from env (clap `env`).
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
    }
    node_selector = _node_selector(ib, decision)
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    affinity = _affinity(decision)
    if affinity:
        pod_spec["affinity"] = affinity
    tolerations = _tolerations(ib, decision)
    if tolerations:
        pod_spec["tolerations"] = tolerations
    assert decision.backend is not None
    caps = card(decision.backend)
    pod_spec["securityContext"] = _pod_security(caps.run_as_user)
    weights = _weights_quantity(decision)
    _check_cache(ib, decision, weights, pod_spec["securityContext"], c.volumes)
    # The engine's own loader downloads into its model-cache emptyDir, unless the fetch step did (spec.model.cache,
    # a revision in the uri).
    fetched = any(i.get("name") == "fetch-model" for i in c.init_containers)
    downloads = (
        decision.model is not None
        and (decision.model.uri or "").startswith("hf://")
        and caps.own_hf_loader
        and not fetched
    )
    # A read-only root where the image runs as non-root (our runners, llama-server) and for the fetch step; the
    # engines whose images need root also write their caches under /root (their cards' run_as says so).
    read_only = caps.run_as_user is not None
    main = _hardened(no_expansion(c.to_k8s()), None, read_only)
    if c.init_containers:
        inits = [_within_engine_cpu(i, main) for i in c.init_containers]
        pod_spec["initContainers"] = [_hardened(no_expansion(i), INIT_USER, True) for i in inits]
    pod_spec["containers"] = [main]
    volumes = [*c.volumes]
    if read_only or c.init_containers:
        volumes.append({"name": SCRATCH, "emptyDir": {}})
    if volumes:
        pod_spec["volumes"] = [
            _sized(dict(v), weights if _holds_weights(v, downloads) else SMALL_DISK) for v in volumes
        ]
        if any(_on_disk(v) for v in volumes):
            # The weights land on node disk (emptyDir): request it, so the scheduler places the pod where it fits
            # and the kubelet evicts a pod that grows past it rather than the node filling up.
            resources = main.setdefault("resources", {})
            held = any(_on_disk(v) and _holds_weights(v, downloads) for v in volumes)
            resources["requests"] = {
                **resources.get("requests", {}),
                "ephemeral-storage": weights if held else SMALL_DISK,
            }
    return pod_spec


def _within_engine_cpu(init: Json, main: Json) -> Json:
    """An init container requests no more CPU than the engine container: the scheduler reserves the larger of the
    two for the pod's whole life, so the fetch step's one core made an engine asking for 100m hold a core long after
    its download (on a real 2-core node, two such pods left no room for a third). The download is network- and
    disk-bound, and with no CPU limit it still uses whatever CPU is idle. selection/nodefit.py counts the same."""
    engine = ((main.get("resources") or {}).get("requests") or {}).get("cpu")
    requests = (init.get("resources") or {}).get("requests") or {}
    wanted = requests.get("cpu")
    if engine is None or wanted is None or parse_quantity(str(engine)) >= parse_quantity(str(wanted)):
        return init
    return {**init, "resources": {**init["resources"], "requests": {**requests, "cpu": engine}}}


def _deployment(
    ib: InferenceBackend, decision: Decision, template: Json, surge: bool | None, lbl: dict[str, str]
) -> Json:
    """The Deployment, complete: replicas (none with spec.autoscaling: the autoscaler owns them, the annotation says
    so), the rollout strategy (``surge``: chosen by the operator; None renders spec.rollout as it can be offline)."""
    spec = ib.spec
    deploy_spec: Json = {} if spec.autoscaling is not None else {"replicas": spec.replicas}
    deploy_spec["selector"] = {"matchLabels": selector_labels(ib)}
    if surge is None and spec.rollout.strategy != "auto":
        surge = spec.rollout.strategy == "surge"
    if surge is None and decision.placement is not None and decision.placement.gpu is not None:
        # Offline (no capacity known): a surge pod could sit Pending on a full GPU pool, so replace one at a time.
        # The operator decides auto from the pool's free devices when a rollout starts (rollout.py).
        surge = False
    if surge is not None:
        deploy_spec["strategy"] = strategy(surge)
    deploy_spec["template"] = template
    namespace = ib.metadata.namespace or "default"
    meta: Json = {"name": object_names(ib)["Deployment"], "namespace": namespace, "labels": dict(lbl)}
    if spec.autoscaling is not None:
        meta["annotations"] = {REPLICAS_OWNER: AUTOSCALER}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": deploy_spec}


def _choose(ib: InferenceBackend, decision: Decision, ctx: Context, digest: str) -> Choice:
    return choose(ib.spec, decision, ctx.cluster, ctx.others, ctx.live, digest)


def _cel_string(value: str) -> str:
    """A CEL string literal (double-quoted, backslash and quote escaped)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def claim_template(ib: InferenceBackend, decision: Decision, lbl: dict[str, str]) -> Json:
    """The ResourceClaimTemplate (resource.k8s.io/v1) of a DRA placement: ``count`` devices of the chosen DeviceClass
    whose attributes name the chosen product (and type, profile), one claim per pod made from it by the
    resourceclaim controller and allocated by the scheduler on the node it picks."""
    p = decision.placement
    assert p is not None and p.gpu is not None and p.gpu.dra
    driver = p.gpu.dra
    expr = " && ".join(
        f"device.attributes[{_cel_string(driver)}].{k.split('/', 1)[1]} == {_cel_string(v)}" for k, v in p.gpu.selector
    )
    request: Json = {"deviceClassName": p.gpu.resource, "allocationMode": "ExactCount", "count": p.gpus_per_node}
    if expr:
        request["selectors"] = [{"cel": {"expression": expr}}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": claim_template_name(ib.metadata.name),
            "namespace": ib.metadata.namespace or "default",
            "labels": dict(lbl),
        },
        "spec": {"spec": {"devices": {"requests": [{"name": DRA_CLAIM, "exactly": request}]}}},
    }


def _dra_claim(ib: InferenceBackend, decision: Decision, pod_spec: Json, annotations: dict[str, str]) -> list[Json]:
    """A DRA placement: the pod's resourceClaims entry (from the template), the pool annotation the GPU ledger reads
    back (facts/pools.py), and the ResourceClaimTemplate to apply before the workload; nothing otherwise."""
    p = decision.placement
    if p is None or p.gpu is None or not p.gpu.dra:
        return []
    name = claim_template_name(ib.metadata.name)
    pod_spec["resourceClaims"] = [{"name": DRA_CLAIM, "resourceClaimTemplateName": name}]
    annotations[DRA_POOL_ANNOTATION] = dra_annotation(p.gpu, p.gpus_per_node)
    lbl = labels(ib, decision.backend or "")
    return [claim_template(ib, decision, lbl)]


def _service_and_pdb(
    ib: InferenceBackend, c: EngineContainer, lbl: dict[str, str], serving: dict[str, str]
) -> list[Json]:
    """The Service over the pods that serve the API (``serving``: every replica's pod, or only the leaders of a
    LeaderWorkerSet), and a PodDisruptionBudget over the replicas when there are several."""
    names = object_names(ib)
    namespace = ib.metadata.namespace or "default"
    svc_ports: list[Json] = [{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}]
    if c.metrics_port != 8000:
        svc_ports.append({"name": "metrics", "port": c.metrics_port, "targetPort": "metrics", "protocol": "TCP"})
    service: Json = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": names["Service"], "namespace": namespace, "labels": dict(lbl)},
        "spec": {"type": "ClusterIP", "selector": serving, "ports": svc_ports},
    }
    objects = [service]
    spec = ib.spec
    most = spec.replicas if spec.autoscaling is None else spec.autoscaling.max_replicas
    if most > 1:
        objects.append(
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": names["PodDisruptionBudget"], "namespace": namespace, "labels": dict(lbl)},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": serving}},
            }
        )
    return objects


def _routing(
    ib: InferenceBackend, decision: Decision, serving: dict[str, str], lbl: dict[str, str], image_policy: images.Policy
) -> list[Json]:
    """spec.routing.inferencePool: the InferencePool over the pods the Service selects, and its endpoint picker
    (routing.py)."""
    if not ib.spec.routing.inference_pool.enabled:
        return []
    return routing.objects(ib, serving, lbl, decision, image_policy)


def _spread(template: Json, ib: InferenceBackend) -> None:
    """The pods of one group on distinct nodes: a required pod anti-affinity on kubernetes.io/hostname against this
    backend's pods with the same group key (``matchLabelKeys``: the apiserver adds the pod's own group-key value to
    the selector when the pod is created, after LWS's webhook has set it).

    Not LWS's ``leaderworkerset.sigs.k8s.io/exclusive-topology`` annotation: it puts every pod of a group IN one
    topology domain and keeps other groups out of it (pkg/webhooks/pod_webhook.go SetExclusiveAffinities: a pod
    affinity on the group key plus an anti-affinity against other groups), so with kubernetes.io/hostname it would
    try to put a whole group on one node, the opposite of what a replica larger than a node needs."""
    term = {
        "labelSelector": {"matchLabels": {INSTANCE_LABEL: label_value(ib.metadata.name), MANAGED_BY_LABEL: MANAGED_BY}},
        "matchLabelKeys": [GROUP_KEY_LABEL],
        "topologyKey": HOSTNAME_LABEL,
    }
    affinity = template["spec"].setdefault("affinity", {})
    affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}


def _group_hash(leader: Json, worker: Json) -> str:
    """The spec hash of a LeaderWorkerSet: over both pod templates (without the hash annotation)."""
    return spec_hash({"spec": {"leaderTemplate": leader, "workerTemplate": worker}})


def lws_name(name: str) -> str:
    """The LeaderWorkerSet of the InferenceBackend ``name``: not the Service's name, because the LWS controller
    creates a headless Service named after the LeaderWorkerSet (the leader's DNS name, LWS_LEADER_ADDRESS) and would
    take ours if the names met; a DNS-1035 label of at most 40 characters, so the StatefulSet pods
    (<lws>-<group>-<worker>) and their controller-revision-hash labels stay within 63."""
    return dns1035_label(f"{name}-lws", 40)


def _multi_node(
    ib: InferenceBackend,
    decision: Decision,
    c: EngineContainer,
    template: Json,
    image_policy: images.Policy,
    claim: list[Json],
) -> Rendered:
    """A replica over several nodes: one LeaderWorkerSet group per replica, of ``nodes`` pods (a leader, which serves
    the API, and nodes - 1 workers), each on its own node with the node's GPUs; the Service selects the leaders."""
    assert decision.placement is not None and decision.backend is not None
    if c.worker_args is None:
        raise ValueError(f"{decision.backend} has no multi-node launch, yet the placement spans nodes")
    nodes = decision.placement.pipeline_parallel
    lbl = labels(ib, decision.backend)
    leader = json.loads(json.dumps(template))
    _spread(leader, ib)
    worker = json.loads(json.dumps(leader))
    main = _hardened(no_expansion(c.worker_k8s()), None)
    main["resources"] = json.loads(json.dumps(leader["spec"]["containers"][0]["resources"]))  # the same per pod
    worker["spec"]["containers"] = images.apply({"containers": [main]}, image_policy)["containers"]
    # only the leader serves HTTP metrics (vLLM's headless workers serve nothing; SGLang's a health check)
    worker["metadata"]["annotations"] = {}
    worker["metadata"]["labels"][COMPONENT_LABEL] = WORKER_COMPONENT
    digest = _group_hash(leader, worker)
    for tpl in (leader, worker):
        tpl["metadata"]["annotations"][SPEC_HASH] = digest
    namespace = ib.metadata.namespace or "default"
    lws: Json = {
        "apiVersion": LWS_API_VERSION,
        "kind": "LeaderWorkerSet",
        "metadata": {"name": lws_name(ib.metadata.name), "namespace": namespace, "labels": dict(lbl)},
        "spec": {
            "replicas": ib.spec.replicas,
            "leaderWorkerTemplate": {
                "size": nodes,
                # a failed pod of a group restarts the whole group: the ranks of one torch.distributed group cannot
                # rejoin it one by one (vLLM and SGLang both exit when a peer is lost)
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": leader,
                "workerTemplate": worker,
            },
            # LeaderCreated: the workers start with the leader, not after it is Ready; the leader becomes Ready only
            # once every rank has joined its distributed group, so LeaderReady would wait forever.
            "startupPolicy": "LeaderCreated",
            # no spare GPU nodes to surge into: replace one group at a time, as the Deployments do
            "rolloutStrategy": {
                "type": "RollingUpdate",
                "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0},
            },
        },
    }
    if ib.spec.autoscaling is not None:
        raise InvalidSpec(
            "spec.autoscaling",
            "a replica spanning nodes (a LeaderWorkerSet) is not autoscaled yet: "
            "remove spec.autoscaling and set spec.replicas, or choose GPUs where one node holds a replica",
        )
    serving = {**selector_labels(ib), WORKER_INDEX_LABEL: "0"}
    objects = [
        *claim,
        *weights_claim(ib, decision, lbl),
        lws,
        *_service_and_pdb(ib, c, lbl, serving),
        *_routing(ib, decision, serving, lbl, image_policy),
    ]
    return Rendered(tuple(objects), c, digest, tuple(decision.unsupported) + c.unsupported)


def render(
    ib: InferenceBackend,
    decision: Decision,
    surge: bool | None = None,
    scaling: autoscaling.Settings = autoscaling.DEFAULT,
    image_policy: images.Policy = images.EMPTY,
) -> list[Json]:
    """The Deployment (a LeaderWorkerSet when one replica spans nodes), Service (and PodDisruptionBudget when
    replicas, or autoscaling.maxReplicas, > 1) of one InferenceBackend, and with spec.autoscaling its KEDA
    ScaledObject. ``surge``: the rollout strategy the operator chose (rollout.py); None renders spec.rollout as it
    can be offline. ``scaling``: the operator's Prometheus settings for the ScaledObject. ``image_policy``: its
    registry mirror, image overrides and pull secrets (images.py)."""
    return list(render_result(ib, decision, surge, scaling, image_policy).objects)


# libyaml's emitter when PyYAML was built with it (same output, ~10x faster); the pure-Python one otherwise.
_Dumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def to_yaml(objects: list[Json]) -> str:
    """Multi-document YAML, keys in the order built (deterministic), no line wrapping."""
    return "".join(
        "---\n" + yaml.dump(o, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=10_000) for o in objects
    )
