"""Thin kopf handlers over one state object (:class:`inference_backend.controller.state.OperatorState`, in kopf's
``memo``).

- the startup handler builds the state (with the indexes kopf hands to startup handlers) and starts its node watch
  and work queue; the cleanup handler cancels and awaits every task it started;
- Models are indexed by namespace, the children we own (Deployments or LeaderWorkerSets, Services, PDBs) by
  (namespace, name, kind) with their applied hash, and the
  InferenceBackends by (namespace, name), our pods (a server-side label-selected watch) by their owner as slim
  summaries of their problems (inference_backend.pods); nodes are grouped by hardware class by one watch
  (nodewatch: a kopf index would cost O(nodes^2) at startup);
- every event (of an InferenceBackend, of a child we own, of a node whose hardware class changes, of a Model) only
  enqueues a key; the queue's workers run the one level-triggered reconcile.

Everything is event-driven: there is no kopf timer, because kopf puts a finalizer on objects with timers, and a
finalizer would keep InferenceBackends from being deleted whenever the operator is not running.
"""

from __future__ import annotations

import logging
from typing import Any, cast

import kopf

from inference_backend.api.model import ModelSpec
from inference_backend.controller import config as configuration
from inference_backend.controller.config import Config
from inference_backend.controller.state import Indexes, OperatorState
from inference_backend.controller.world import Child, slim_child
from inference_backend.pods import PodSummary, owner, summarize
from inference_backend.vocabulary import (
    APPLIED_HASH,
    COMPONENT,
    COMPONENT_LABEL,
    GROUP,
    LWS_GROUP,
    LWS_PLURAL,
    LWS_VERSION,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    REPLICAS_OWNER,
    VERSION,
    WORKER_COMPONENT,
)

MANAGED = {MANAGED_BY_LABEL: MANAGED_BY}  # a label filter, read by kopf's decorators only
PLURAL = "inferencebackends"
POD_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY},{COMPONENT_LABEL} in ({COMPONENT},{WORKER_COMPONENT})"
"""Server-side label selector of the pod watch: the labels render puts on every pod template (a LeaderWorkerSet's
workers carry the worker component); no other pod of the cluster reaches the operator."""
CONFIGMAP_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
"""Server-side label selector of the ConfigMap watch (the adapters' ConfigMaps, engines/lora.py): a cluster's other
ConfigMaps (one kube-root-ca.crt per namespace at least) never reach the operator."""
log = logging.getLogger(__name__)


def _state(memo: Any) -> OperatorState:
    return cast(OperatorState, memo.state)


@kopf.on.startup()
async def start(settings: kopf.OperatorSettings, memo: kopf.Memo, **kwargs: Any) -> None:
    """kopf hands its indexes (empty until the watches fill them) to startup handlers as keyword arguments; the
    configuration comes in the memo (run.py builds it once from the flags)."""
    config: Config = getattr(memo, "config", None) or configuration.DEFAULT
    settings.posting.level = logging.INFO
    settings.watching.server_timeout = 300
    settings.execution.max_workers = 8
    settings.watching.label_selectors["v1", "pods"] = POD_SELECTOR
    settings.watching.label_selectors["v1", "configmaps"] = CONFIGMAP_SELECTOR
    names = ("models", "deployments", "services", "pdbs", "backends", "pods", "lws", "configmaps")
    state = OperatorState(Indexes(**{name: kwargs[name] for name in names}), config)
    memo.state = state
    state.start()


@kopf.on.cleanup()
async def close(memo: kopf.Memo, **_: Any) -> None:
    await _state(memo).close()


@kopf.index(GROUP, VERSION, "models")
async def models(body: kopf.Body, memo: kopf.Memo, **_: Any) -> dict[str, tuple[str, ModelSpec | None]]:
    """namespace -> (name, spec); validated once here, not on every reconcile (None when invalid)."""
    _state(memo).models_version += 1
    try:
        spec: ModelSpec | None = ModelSpec.model_validate(dict(body.get("spec") or {}))
    except ValueError:
        spec = None
    return {body["metadata"]["namespace"]: (body["metadata"]["name"], spec)}


def _child(body: kopf.Body) -> dict[tuple[str, str, str], Child]:
    meta = body["metadata"]
    annotations = meta.get("annotations") or {}
    keep = slim_child(body["kind"], dict(body.get("spec") or {}), dict(body.get("status") or {}))
    owner = next(
        (r.get("name") for r in meta.get("ownerReferences") or [] if r.get("kind") == "InferenceBackend"), None
    )
    child = Child(annotations.get(APPLIED_HASH), keep, annotations.get(REPLICAS_OWNER), owner)
    return {(meta["namespace"], meta["name"], body["kind"]): child}


@kopf.index("apps", "v1", "deployments", labels=MANAGED)
async def deployments(body: kopf.Body, **_: Any) -> dict[tuple[str, str, str], Child]:
    return _child(body)


@kopf.index(LWS_GROUP, LWS_VERSION, LWS_PLURAL, labels=MANAGED)
async def lws(body: kopf.Body, **_: Any) -> dict[tuple[str, str, str], Child]:
    """The LeaderWorkerSets of multi-node backends. Without the LWS CRD kopf watches nothing here (it starts the
    watch if the CRD is installed later), and a multi-node plan says in its status that the CRD is missing."""
    return _child(body)


@kopf.index("", "v1", "services", labels=MANAGED)
async def services(body: kopf.Body, **_: Any) -> dict[tuple[str, str, str], Child]:
    return _child(body)


@kopf.index("policy", "v1", "poddisruptionbudgets", labels=MANAGED)
async def pdbs(body: kopf.Body, **_: Any) -> dict[tuple[str, str, str], Child]:
    return _child(body)


@kopf.index("", "v1", "configmaps", labels=MANAGED)
async def configmaps(body: kopf.Body, **_: Any) -> dict[tuple[str, str, str], Child]:
    """The adapters' ConfigMaps (their applied hash: applied again only when the list changes)."""
    return _child(body)


@kopf.index("", "v1", "pods", labels=MANAGED)
async def pods(body: kopf.Body, **_: Any) -> dict[tuple[str, str], PodSummary] | None:
    """(namespace, InferenceBackend) -> a slim, bounded summary of each of its pods (inference_backend.pods)."""
    key, summary = owner(body), summarize(body)
    return {key: summary} if key is not None and summary is not None else None


@kopf.index(GROUP, VERSION, PLURAL)
async def backends(body: kopf.Body, **_: Any) -> dict[tuple[str, str], dict[str, Any]]:
    meta = {k: v for k, v in body["metadata"].items() if k != "managedFields"}  # the bulk, never read
    snapshot = {
        "apiVersion": body.get("apiVersion"),
        "metadata": meta,
        "spec": dict(body.get("spec") or {}),
        "status": dict(body.get("status") or {}),
    }
    return {(body["metadata"]["namespace"], body["metadata"]["name"]): snapshot}


@kopf.on.event(GROUP, VERSION, PLURAL)
async def on_backend(body: kopf.Body, type: str | None, memo: kopf.Memo, **_: Any) -> None:
    """Every event of an InferenceBackend (the initial listing too) queues its level-triggered reconcile. kopf's
    own change detection is not used, so kopf writes no annotations on our objects; our own status writes come
    back as events that change nothing."""
    state = _state(memo)
    state.indexed.set()
    key = (body["metadata"]["namespace"], body["metadata"]["name"])
    if type == "DELETED":  # the garbage collector removes the children; forget what we kept for it
        state.forget(key)
        return
    state.queue.add(key, "listing" if type is None else type.lower())


def _owner(body: kopf.Body, trigger: str, type: str | None, memo: kopf.Memo) -> None:
    """Queue the reconcile of the InferenceBackend owning ``body`` (drift of a child, readiness roll-up)."""
    state = _state(memo)
    state.indexed.set()
    key = state.child_event(body, deleted=type == "DELETED")
    if key is not None:
        state.queue.add(key, trigger)


@kopf.on.event("apps", "v1", "deployments", labels=MANAGED)
async def on_deployment(body: kopf.Body, type: str | None, memo: kopf.Memo, **_: Any) -> None:
    _owner(body, "deployment", type, memo)


@kopf.on.event(LWS_GROUP, LWS_VERSION, LWS_PLURAL, labels=MANAGED)
async def on_lws(body: kopf.Body, type: str | None, memo: kopf.Memo, **_: Any) -> None:
    _owner(body, "leaderworkerset", type, memo)


@kopf.on.event("", "v1", "services", labels=MANAGED)
async def on_service(body: kopf.Body, type: str | None, memo: kopf.Memo, **_: Any) -> None:
    _owner(body, "service", type, memo)


@kopf.on.event("policy", "v1", "poddisruptionbudgets", labels=MANAGED)
async def on_pdb(body: kopf.Body, type: str | None, memo: kopf.Memo, **_: Any) -> None:
    _owner(body, "pdb", type, memo)


@kopf.on.event("", "v1", "pods", labels=MANAGED)
async def on_pod(body: kopf.Body, type: str | None, memo: kopf.Memo, **_: Any) -> None:
    """Queue the owner's reconcile only when the pod's problems change (state.pod_event)."""
    state = _state(memo)
    state.indexed.set()
    key = state.pod_event(body, deleted=type == "DELETED")
    if key is not None:
        state.queue.add(key, "pod")


@kopf.on.event(GROUP, VERSION, "models")
async def on_model(body: kopf.Body, type: str | None, memo: kopf.Memo, **_: Any) -> None:
    state = _state(memo)
    state.indexed.set()
    if type == "DELETED":
        state.models_version += 1
    if type is not None:  # None is the initial listing, already handled by the backends' own listing
        state.reconcile_all_soon("model", body["metadata"]["namespace"])
