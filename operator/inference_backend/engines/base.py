"""What every engine renderer returns (one frozen EngineContainer), and the pieces they share.

Engine renderers are pure: Decision + spec in, container description out, no I/O. Each engine module cites the
upstream source and version of every flag it emits, next to the flag.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from inference_backend.api.common import exact_resource
from inference_backend.api.inferencebackend import InferenceBackendSpec
from inference_backend.decision import Decision, InvalidSpec, Placement
from inference_backend.engines.artifacts import Artifact
from inference_backend.quantity import decimal_text, parse_quantity

HTTP_PORT = 8000
HOST = "0.0.0.0"
MODEL_CACHE_DIR = "/model-cache"
"""emptyDir where engines that download weights themselves (hf://) keep them."""
GIB = 2**30
PRE_STOP_SLEEP_SECONDS = 5
"""The serving container's preStop sleep (``lifecycle.preStop.sleep``, KEP-3960 PodLifecycleSleepAction: beta and on
by default from Kubernetes 1.30, the chart's minimum; no sleep binary needed in the image). A terminating pod leaves
its Service's EndpointSlices at once, but kube-proxy on each node applies that a little later, and the kubelet sends
SIGTERM at the same moment: the engine stopped listening while connections still reached it. Measured under a real
kubelet and kube-proxy (nftables, e2e/test_real_rollouts.py): without it a surge rollout of two llama.cpp replicas
lost 213 of 6,583 completions sent through the ClusterIP (connection refused, about 1 s per replaced pod); with it,
none. The engine keeps serving during the sleep, then drains on SIGTERM within the grace period."""
# LeaderWorkerSet (sigs.k8s.io/lws v0.7.0, api/leaderworkerset/v1/leaderworkerset_types.go; set on every container
# by pkg/utils/pod/pod_utils.go AddLWSVariables): the leader pod's DNS name (<lws>-<group>.<lws>.<namespace>, through
# the headless Service the controller creates), the group size and this pod's index in the group (0: the leader).
# Written as $(VAR) references, which the kubelet expands in args from the container's environment.


class KubeRef(str):
    """Text the operator writes that holds ``$(VAR)`` references the kubelet is meant to expand (the
    LeaderWorkerSet's variables). Every other string of a container's command, args and env values is taken
    literally: render.py escapes it (``$`` -> ``$$``), so no user text ever expands. Never made from user text."""


def kube_ref(name: str, suffix: str = "") -> KubeRef:
    """``$(name)`` followed by ``suffix`` (operator text, e.g. ``:5000``)."""
    return KubeRef(f"$({name}){suffix}")


LWS_LEADER_ADDRESS = kube_ref("LWS_LEADER_ADDRESS")
LWS_WORKER_INDEX = kube_ref("LWS_WORKER_INDEX")

Json = dict[str, Any]


@dataclass(frozen=True)
class Endpoints:
    """Where the engine answers, on its container port."""

    port: int
    health: str
    """GET path that answers 200 once the model is loaded (startup, readiness and liveness probes)."""
    metrics: str
    """GET path of the Prometheus metrics."""
    openai: tuple[str, ...] = ("/v1/completions", "/v1/chat/completions", "/v1/models")


@dataclass(frozen=True)
class Probe:
    path: str
    port: int
    period_seconds: int
    failure_threshold: int
    timeout_seconds: int = 5

    def to_k8s(self) -> Json:
        return {
            "httpGet": {"path": self.path, "port": self.port},
            "periodSeconds": self.period_seconds,
            "timeoutSeconds": self.timeout_seconds,
            "failureThreshold": self.failure_threshold,
        }


def health_probes(path: str, port: int = HTTP_PORT) -> tuple[Probe, Probe, Probe]:
    """(startup, readiness, liveness) on the engine's health endpoint.

    Startup allows 60 minutes (weights download + load + CUDA graph capture of a 70B model); liveness only starts
    once startup succeeded, so a slow load is never killed, and a wedged engine is restarted after 3 x 30 s.
    """
    return Probe(path, port, 10, 360), Probe(path, port, 10, 3), Probe(path, port, 30, 3, 10)


@dataclass(frozen=True)
class Flag:
    """One flag the operator sets, with the spec field it comes from (for collision messages)."""

    name: str
    values: tuple[str, ...]
    source: str


INT32_MAX = 2**31 - 1
UINT32_MAX = 2**32 - 1


@dataclass(frozen=True)
class FlagBound:
    """An engine flag whose parser reads a bounded integer (an int32 parsed with std::stoi, a Rust u32): a larger
    value makes the engine exit at start, so the pod would never run. Declared on the card (``flag_bounds``)."""

    maximum: int
    field: str
    """The spec field the flag is set from verbatim (engines/rules.py bounds it in the CRD by the smallest of the
    engines' maxima); "" where the value is derived (checked when rendering only)."""
    source: str
    """The engine's type for it, with file and version."""


class ArgBuilder:
    """Ordered engine arguments; remembers which spec field set each flag."""

    def __init__(self) -> None:
        self.flags: list[Flag] = []
        self.positional: list[str] = []

    def copy(self) -> ArgBuilder:
        out = ArgBuilder()
        out.flags, out.positional = list(self.flags), list(self.positional)
        return out

    def add(self, name: str, *values: object, source: str) -> None:
        self.flags.append(Flag(name, tuple(_str(v) for v in values), source))

    def args(self) -> tuple[str, ...]:
        out = list(self.positional)
        for f in self.flags:
            out.append(f.name)
            out.extend(f.values)
        return tuple(out)


def _str(value: object) -> str:
    if isinstance(value, KubeRef):
        return value  # kept as a KubeRef: render.py leaves its references to the kubelet
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return decimal_text(value)
    return str(value)


@dataclass(frozen=True)
class EngineContainer:
    """The engine container of one replica, and what the pod needs around it."""

    engine: str
    version: str
    name: str
    image: str
    command: tuple[str, ...]
    args: tuple[str, ...]
    env: tuple[Json, ...]
    ports: tuple[Json, ...]
    startup_probe: Probe
    readiness_probe: Probe
    liveness_probe: Probe
    resources: Json
    volumes: tuple[Json, ...] = ()
    volume_mounts: tuple[Json, ...] = ()
    init_containers: tuple[Json, ...] = ()
    metrics_port: int = HTTP_PORT
    metrics_path: str = "/metrics"
    unsupported: tuple[str, ...] = ()
    """Renderer-level notes: what this engine cannot do of the spec, and what is done instead."""
    flags: tuple[Flag, ...] = field(default=(), compare=False)
    worker_args: tuple[str, ...] | None = None
    """A multi-node placement: the args of the worker pods (LeaderWorkerSet worker template; ``args`` are the
    leader's); None on one node."""
    adapters_config: str | None = None
    """spec.adapters loaded while the engine serves (engines/lora.py runtime_served): the adapters.json of the
    ConfigMap its sidecar reads, which render.py emits beside the workload; None otherwise."""
    worker_serves_health: bool = False
    """The worker pods answer the health endpoint too (SGLang's non-zero ranks run a health server; vLLM's headless
    workers serve no HTTP): probes on the workers only then."""

    def worker_k8s(self) -> Json:
        """The worker container of a multi-node placement: the leader's, with the worker args (and no probes when
        the workers serve no HTTP)."""
        if self.worker_args is None:
            raise ValueError(f"{self.engine}: not a multi-node container")
        c = {**self.to_k8s(), "args": list(self.worker_args)}
        if not self.worker_serves_health:
            for probe in ("startupProbe", "readinessProbe", "livenessProbe", "lifecycle"):
                c.pop(probe, None)
        return c

    def to_k8s(self) -> Json:
        c: Json = {
            "name": self.name,
            "image": self.image,
            "imagePullPolicy": "IfNotPresent",
            "command": list(self.command),
            "args": list(self.args),
        }
        if self.env:
            c["env"] = [dict(e) for e in self.env]
        c["ports"] = [dict(p) for p in self.ports]
        c["startupProbe"] = self.startup_probe.to_k8s()
        c["readinessProbe"] = self.readiness_probe.to_k8s()
        c["livenessProbe"] = self.liveness_probe.to_k8s()
        c["lifecycle"] = {"preStop": {"sleep": {"seconds": PRE_STOP_SLEEP_SECONDS}}}
        c["resources"] = self.resources
        if self.volume_mounts:
            c["volumeMounts"] = [dict(m) for m in self.volume_mounts]
        return c


Renderer = Callable[[Decision, InferenceBackendSpec, str], EngineContainer]


# ---- shared helpers -------------------------------------------------------------------------------------------


def placement(decision: Decision) -> Placement:
    if decision.placement is None or decision.model is None or decision.backend is None:
        raise ValueError("cannot render an unsatisfiable decision")
    return decision.placement


def gpus(decision: Decision) -> int:
    """GPUs of one pod: the tensor-parallel width (a multi-node replica runs one pod of this width per node)."""
    p = placement(decision)
    return p.gpus_per_node if p.gpu is not None else 0


def device_image(decision: Decision, devices: Mapping[Any, str], cpu_image: str | None = None) -> str:
    """The engine's image for the placement's device: the vendor's build on a GPU (the selection only places an
    engine on vendors its card lists), ``cpu_image`` on CPU."""
    gpu = placement(decision).gpu
    if gpu is None:
        return cpu_image or devices["nvidia"]
    return devices[gpu.vendor]


def served_name(decision: Decision, name: str) -> str:
    assert decision.model is not None
    return decision.model.served_name or name


def ports(metrics_port: int | None = None) -> tuple[Json, ...]:
    out: list[Json] = [{"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"}]
    if metrics_port is not None and metrics_port != HTTP_PORT:
        out.append({"name": "metrics", "containerPort": metrics_port, "protocol": "TCP"})
    return tuple(out)


def cpu_cores(decision: Decision) -> int:
    """Cores requested on a CPU placement (the plan's: 90% of the node's allocatable, daemonsets keep the rest),
    at least 1."""
    placement(decision)
    assert decision.host is not None
    return max(1, decision.host.cpu_millis // 1000)


def resources(decision: Decision, spec: InferenceBackendSpec) -> Json:
    """Requests/limits from the decision's host request (selection/planning.py: sized to fit the chosen nodes'
    allocatable), with ``spec.resources`` merged in (``merge_resources``).

    GPU: the GPU resource (nvidia.com/gpu, the MIG profile, amd.com/gpu, habana.ai/gaudi) = GPUs per pod (per
    node of a multi-node replica) in requests and limits; host CPU and memory as planned. CPU: the planned memory
    (weights + overhead + the KV the engine allocates + 1 GiB headroom) and cores. Memory limit = request (no
    overcommit of the one resource that OOM-kills); no CPU limit (throttling only slows decoding).
    """
    p = placement(decision)
    host = decision.host
    assert host is not None and decision.memory is not None
    cpu = str(host.cpu_millis // 1000) if host.cpu_millis % 1000 == 0 else f"{host.cpu_millis}m"
    memory = f"{math.ceil(host.memory_bytes / GIB)}Gi"
    requests: dict[str, int | str] = {"cpu": cpu, "memory": memory}
    limits: dict[str, int | str] = {"memory": memory}
    if p.gpu is not None and not p.gpu.dra:
        requests[p.gpu.resource] = p.gpus_per_node
        limits[p.gpu.resource] = p.gpus_per_node
    out: Json = {"requests": requests, "limits": limits}
    if spec.resources is not None:
        out = merge_resources(requests, limits, spec.resources.requests, spec.resources.limits)
    if p.gpu is not None and p.gpu.dra:
        # DRA: the devices come from the pod's resource claim (render.py: a ResourceClaimTemplate), not from an
        # extended resource; the container names the claim it uses (core/v1 ResourceRequirements.claims).
        out["claims"] = [{"name": DRA_CLAIM}]
    return out


DRA_CLAIM = "gpus"
"""The pod's resourceClaims entry (and the container's resources.claims name) of a DRA placement."""


def merge_resources(
    requests: Mapping[str, int | str],
    limits: Mapping[str, int | str],
    user_requests: Mapping[str, int | str],
    user_limits: Mapping[str, int | str],
) -> Json:
    """The computed requests/limits with spec.resources merged in as Kubernetes users expect, so the apiserver never
    refuses the pod template (docs/security.md, "spec.resources"):

    - a resource the user names replaces the computed one;
    - a request above the limit: a request the user gave raises the limit to it (a 1000Gi memory request is a
      1000Gi limit, not a refused Deployment); a limit the user gave caps the computed request; both given by the
      user is refused at admission (the CRD's rule on spec.resources);
    - extended resources and hugepages: request = limit (the one the user gave sets both)."""
    req, lim = dict(requests), dict(limits)
    req.update(user_requests)
    lim.update(user_limits)
    for name in sorted(set(user_requests) | set(user_limits)):
        if exact_resource(name):
            value = user_limits.get(name, user_requests.get(name))
            assert value is not None
            req[name] = lim[name] = value
    for name in sorted(set(req) & set(lim)):
        if parse_quantity(req[name]) <= parse_quantity(lim[name]):
            continue
        if name in user_requests and name in user_limits:
            raise InvalidSpec("spec.resources", f"requests.{name} {req[name]} is above limits.{name} {lim[name]}")
        if name in user_requests:
            lim[name] = req[name]
        else:
            req[name] = lim[name]
    return {"requests": req, "limits": lim}


def shm_volume(decision: Decision) -> tuple[tuple[Json, ...], tuple[Json, ...]]:
    """A memory-backed /dev/shm when one replica spans several GPUs (NCCL and the engines' worker processes
    exchange tensors through shared memory; the container default of 64 MiB makes them fail or crawl)."""
    if gpus(decision) <= 1:
        return (), ()
    return ({"name": "dshm", "emptyDir": {"medium": "Memory"}},), ({"name": "dshm", "mountPath": "/dev/shm"},)


def model_cache_volume() -> tuple[Json, Json]:
    return {"name": "model-cache", "emptyDir": {}}, {"name": "model-cache", "mountPath": MODEL_CACHE_DIR}


def merge_named(*groups: Iterable[Json]) -> tuple[Json, ...]:
    """Concatenate volumes/mounts/env, keeping the first of each name (artifacts of model and draft may share)."""
    seen: set[str] = set()
    out: list[Json] = []
    for group in groups:
        for item in group:
            key = str(item.get("name", "")) + "|" + str(item.get("mountPath", ""))
            if key in seen:
                continue
            seen.add(key)
            out.append(item)
    return tuple(out)


# ---- escape hatches: spec.engine.extraArgs / env / image ------------------------------------------------------


def _canonical(token: str, aliases: Mapping[str, str]) -> str:
    name = token.split("=", 1)[0]
    if name.startswith("--"):
        name = name.replace("_", "-")
    return aliases.get(name, name)


def apply_overrides(
    spec: InferenceBackendSpec,
    image: str,
    args: ArgBuilder,
    env: Sequence[Json],
    aliases: Mapping[str, str],
    reserved_env: Mapping[str, str] | None = None,
) -> tuple[str, tuple[str, ...], tuple[Json, ...]]:
    """Append ``spec.engine.extraArgs`` and ``env`` last, after checking none repeats what the operator sets.

    ``aliases`` maps every spelling of a flag (short/long, --no- forms) to one canonical name; an extra arg
    collides when its name before any ``=`` has the same canonical name as a flag we set.
    ``reserved_env`` names environment variables the engine reads as one of the flags we set (and the field).
    """
    ours = {_canonical(f.name, aliases): f for f in args.flags}
    for token in spec.engine.extra_args:
        if not token.startswith("-") or token in ("-", "--"):
            continue
        canon = _canonical(token, aliases)
        hit = ours.get(canon)
        if hit is not None:
            shown = token.split("=", 1)[0]
            same = f" (same flag as {hit.name})" if shown != hit.name else ""
            raise InvalidSpec("spec.engine.extraArgs", f"{shown}{same} is set by the operator from {hit.source}")
    env_names = {str(e["name"]): e for e in env}
    for i, extra in enumerate(spec.engine.env):
        if extra.name in env_names:
            raise InvalidSpec(f"spec.engine.env[{i}]", f"{extra.name} is set by the operator")
        if reserved_env and extra.name in reserved_env:
            raise InvalidSpec(
                f"spec.engine.env[{i}]", f"{extra.name} is set by the operator from {reserved_env[extra.name]}"
            )
    all_args = args.args() + tuple(spec.engine.extra_args)
    all_env = tuple(env) + tuple(e.wire() for e in spec.engine.env)
    return spec.engine.image or image, all_args, all_env


def check_bounds(engine: str, flags: Sequence[Flag], bounds: Mapping[str, FlagBound]) -> None:
    """InvalidSpec (naming the spec field the flag comes from) for a flag value past the engine's bound."""
    for f in flags:
        bound = bounds.get(f.name)
        if bound is None:
            continue
        for value in f.values:
            if value.lstrip("-").isdigit() and int(value) > bound.maximum:
                field = bound.field or f.source.split(" ")[0]
                raise InvalidSpec(
                    field,
                    f"renders {f.name} {value} for {engine}, past its maximum {bound.maximum} "
                    f"({bound.source}); the engine would exit at start",
                )


def artifact_parts(
    *artifacts: Artifact | None,
) -> tuple[tuple[Json, ...], tuple[Json, ...], tuple[Json, ...], tuple[Json, ...]]:
    """(env, volumes, mounts, init containers) of the model and draft artifacts, deduplicated by name."""
    present = [a for a in artifacts if a is not None]
    return (
        merge_named(*(a.env for a in present)),
        merge_named(*(a.volumes for a in present)),
        merge_named(*(a.mounts for a in present)),
        merge_named(*(a.init_containers for a in present)),
    )


@dataclass(frozen=True)
class PodParts:
    """What an engine that downloads into the model cache adds to its pod: the artifacts' env, volumes, mounts and
    init containers, the model-cache emptyDir and (several GPUs per replica) a memory-backed /dev/shm."""

    env: tuple[Json, ...]
    volumes: tuple[Json, ...]
    mounts: tuple[Json, ...]
    init: tuple[Json, ...]


def cached_pod_parts(decision: Decision, *artifacts: Artifact | None) -> PodParts:
    cache_vol, cache_mount = model_cache_volume()
    art_env, art_vols, art_mounts, init = artifact_parts(*artifacts)
    shm_vols, shm_mounts = shm_volume(decision)
    return PodParts(
        art_env,
        merge_named((cache_vol,), art_vols, shm_vols),
        merge_named((cache_mount,), art_mounts, shm_mounts),
        init,
    )


def assemble(
    *,
    engine: str,
    version: str,
    image: str,
    command: tuple[str, ...],
    args: ArgBuilder,
    env: Sequence[Json],
    aliases: Mapping[str, str],
    decision: Decision,
    spec: InferenceBackendSpec,
    notes: Sequence[str],
    volumes: tuple[Json, ...] = (),
    mounts: tuple[Json, ...] = (),
    init: tuple[Json, ...] = (),
    endpoints: Endpoints,
    reserved_env: Mapping[str, str] | None = None,
    worker: ArgBuilder | None = None,
    worker_serves_health: bool = False,
    bounds: Mapping[str, FlagBound] | None = None,
) -> EngineContainer:
    """The container every engine shares the shape of: ``spec.engine`` overrides applied last (and checked),
    probes on the card's health endpoint and metrics at its metrics path, resources from the decision.
    ``worker``: the worker pods' args of a multi-node placement (the overrides apply to them too). ``bounds``: the
    card's flag bounds, checked on every flag rendered."""
    check_bounds(engine, [*args.flags, *(worker.flags if worker is not None else ())], bounds or {})
    worker_argv = apply_overrides(spec, image, worker, env, aliases, reserved_env)[1] if worker is not None else None
    image, argv, env = apply_overrides(spec, image, args, env, aliases, reserved_env)
    startup, ready, live = health_probes(endpoints.health, endpoints.port)
    return EngineContainer(
        engine=engine,
        version=version,
        name=engine,
        image=image,
        command=command,
        args=argv,
        env=env,
        ports=ports(),
        startup_probe=startup,
        readiness_probe=ready,
        liveness_probe=live,
        resources=resources(decision, spec),
        volumes=volumes,
        volume_mounts=mounts,
        init_containers=init,
        metrics_port=endpoints.port,
        metrics_path=endpoints.metrics,
        unsupported=tuple(notes),
        flags=tuple(args.flags),
        worker_args=worker_argv,
        worker_serves_health=worker_serves_health,
    )
