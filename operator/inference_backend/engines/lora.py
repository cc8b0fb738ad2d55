"""The LoRA adapters of a container (spec.adapters): each fetched and checked like the weights, at /adapters/<name>.
Pure (no I/O)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from inference_backend.decision import Decision
from inference_backend.engines import artifacts
from inference_backend.engines.card import AdapterFormat, Lora

Json = dict[str, Any]


@dataclass(frozen=True)
class Served:
    """The adapters of one container: (name, path in the container) in spec order, and their artifacts."""

    paths: tuple[tuple[str, str], ...]
    artifacts: tuple[artifacts.Artifact, ...]
    config: str | None = None
    """Loaded while the engine serves (:func:`runtime`): the ConfigMap's adapters.json the sidecar reads (the
    adapters are then not in the pod template); None when the engine gets them at start."""


def served(decision: Decision, lora: Lora, fmt: AdapterFormat = "peft") -> Served:
    """Each adapter of the decision fetched (or mounted) and checked against ``lora``'s limits: the rank limit the
    decision rendered, the modules the engine adapts, DoRA, the declared rank, the base model's architecture."""
    model = decision.model
    assert model is not None
    chosen = decision.adapters
    paths: list[tuple[str, str]] = []
    arts: list[artifacts.Artifact] = []
    for i, a in enumerate(chosen.items):
        check = artifacts.AdapterCheck(
            max_rank=chosen.max_rank,
            adapter_format=fmt,
            modules=tuple(sorted(lora.target_modules)),
            rank=a.rank,
            base_architecture=model.architecture if fmt == "peft" else None,
            dora=lora.dora,
        )
        art = artifacts.adapter(model, i, a.name, a.uri, check)
        assert art.local_path is not None
        paths.append((a.name, art.local_path))
        arts.append(art)
    return Served(tuple(paths), tuple(arts))


def no_lora(why: str, source: str) -> Lora:
    """The card entry of an engine that serves no adapters."""
    return Lora(
        serves=False,
        how=why,
        formats=frozenset(),
        max_rank=0,
        rank_choices=(),
        default_rank=0,
        architectures=frozenset(),
        target_modules=frozenset(),
        runtime="",
        prefix_cache=True,
        speculative=frozenset(),
        dora=False,
        source=source,
    )


# ---- loaded while the engine serves ------------------------------------------------------------------------------

RUNTIME_SCHEMES = ("hf", "s3", "gs", "https")
"""The stores an adapter loaded at run time may be in: fetched by the sidecar (a pvc:// or oci:// adapter is a volume
of the pod template, so a change of it rolls out)."""
SIDECAR = "adapters"
"""The native sidecar (an init container with restartPolicy Always) that fetches and loads the adapters."""
SYNC_PORT = 8090
"""The sidecar's port: GET /ready (200 once every wanted adapter was tried at least once) and GET /adapters (what
it fetched and loaded, and the error of each it could not)."""
CONFIG_VOLUME, CONFIG_DIR, CONFIG_FILE = "adapters-config", "/etc/inference-backend/adapters", "adapters.json"
ADAPTER_CACHE_DIR = "/adapters-cache"
"""Where the sidecar and the engine mount spec.model.cache for adapters (each in its cache_key directory)."""
ENGINE_URL = "http://127.0.0.1:8000"
"""The engine as the sidecar reaches it (the same pod: localhost, the engines' port 8000)."""


def config_map_name(name: str) -> str:
    """The ConfigMap of the adapters an InferenceBackend's pods load at run time."""
    return f"{name}-adapters"


SIDECAR_REQUESTS = {"cpu": "50m", "memory": "128Mi"}
"""What the adapters sidecar requests; a native sidecar runs beside the engine, so the selection adds it to the
engine container's requests (selection/nodefit.py), as the scheduler does."""


def runtime_loaded(lora: Lora, uris: Sequence[str], multi_node: bool) -> bool:
    """Whether adapters at ``uris`` are loaded while the engine serves, not given at start: the engine loads them at
    run time (its card's switch), every adapter is fetched (RUNTIME_SCHEMES) and the pods are not a LeaderWorkerSet's
    (those get theirs at start)."""
    return bool(lora.runtime_switch and uris and not multi_node) and all(
        artifacts.split_uri(u)[0] in RUNTIME_SCHEMES for u in uris
    )


def runtime(decision: Decision, lora: Lora) -> bool:
    """The decision's adapters are loaded at run time (runtime_loaded), through the adapters sidecar."""
    p = decision.placement
    if p is None:
        return False
    return runtime_loaded(lora, [a.uri for a in decision.adapters.items], p.multi_node)


def runtime_served(decision: Decision, lora: Lora, name: str, served_name: str) -> Served:
    """The adapters loaded at run time: their list in the ConfigMap (``config``; a change of it changes no pod
    template), the sidecar that fetches each into the adapters volume (or the cache volume) with the fetch step's
    checks and loads it through the engine's endpoints, the volume the engine reads them from, and the engine's
    switch. The limits stay in the template (the rank the fetch step checks, the engine's own flags): a change
    that needs others rolls out."""
    model = decision.model
    assert model is not None
    chosen = decision.adapters
    # The rank the sidecar checks each file against: the engine's flag where it has one (vLLM's --max-lora-rank, in
    # the template: a change of it rolls out), else the engine's own limit, so that a higher declared rank changes
    # no template (each adapter's declared rank is checked from the ConfigMap).
    check = artifacts.AdapterCheck(
        max_rank=chosen.max_rank if lora.rank_choices else lora.max_rank,
        adapter_format="peft",
        modules=tuple(sorted(lora.target_modules)),
        base_architecture=model.architecture,
        dora=lora.dora,
    )
    cache = model.cache
    wanted: list[Json] = []
    for i, a in enumerate(chosen.items):
        artifacts.adapter(model, i, a.name, a.uri, check)  # the uri's refusals, as for adapters given at start
        key = artifacts.cache_key(a.uri)
        path = f"{ADAPTER_CACHE_DIR}/{key}" if cache is not None else f"{artifacts.ADAPTERS_DIR}/{a.name}"
        wanted.append({"name": a.name, "uri": a.uri, "path": path, **({"rank": a.rank} if a.rank else {})})
    if cache is not None:
        data, mount = artifacts.cache_volume(cache), ADAPTER_CACHE_DIR
    else:
        data, mount = {"name": artifacts.ADAPTERS_VOLUME, "emptyDir": {}}, artifacts.ADAPTERS_DIR
    config_volume = {"name": CONFIG_VOLUME, "configMap": {"name": config_map_name(name)}}
    sidecar: Json = {
        "name": SIDECAR,
        "image": artifacts.OPERATOR_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "restartPolicy": "Always",
        "command": [
            "inference-backend",
            "adapter",
            "sync",
            f"{CONFIG_DIR}/{CONFIG_FILE}",
            "--engine",
            ENGINE_URL,
            "--served-name",
            served_name,
            "--port",
            str(SYNC_PORT),
            *check.args()[1:],
        ],
        "ports": [{"name": SIDECAR, "containerPort": SYNC_PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/ready", "port": SYNC_PORT}, "periodSeconds": 5},
        "volumeMounts": [
            {"name": CONFIG_VOLUME, "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": data["name"], "mountPath": mount},
        ],
        "resources": {"requests": dict(SIDECAR_REQUESTS), "limits": {"memory": "1Gi"}},
    }
    env = artifacts.secret_env(model.credentials_secret, artifacts.split_uri(model.uri)[0] if model.uri else "")
    if env:
        sidecar["env"] = list(env)
    art = artifacts.Artifact(
        "runtime",
        env=({"name": lora.runtime_switch, "value": "True"},),
        volumes=(data, config_volume),
        mounts=({"name": data["name"], "mountPath": mount, "readOnly": True},),
        init_containers=(sidecar,),
    )
    paths = tuple((str(w["name"]), str(w["path"])) for w in wanted)
    return Served(paths, (art,), json.dumps({"adapters": wanted}, sort_keys=True))
