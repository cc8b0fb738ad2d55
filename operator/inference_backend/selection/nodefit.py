"""Per engine, the nodes a pod of it can actually run on beyond memory: the CPU architecture its image is built
for, the node disk the weights it downloads take, and the node's allocatable CPU and memory against the pod's
requests (its init containers included, as the scheduler counts them). Pure: no I/O.

- Architecture: each card names the platforms of each image it renders, with the source (engines/card.py
  ``platforms``); a node whose ``kubernetes.io/arch`` the image lacks would fail with "exec format error".
- Disk: weights downloaded into an emptyDir (the fetch init container's, or the engine's own Hugging Face cache)
  are requested as ``ephemeral-storage`` (render.py): a node whose allocatable ``ephemeral-storage`` is smaller never
  takes the pod. ``spec.model.cache`` keeps them off the node's disk.
- Requests: the scheduler takes the larger of the app containers' sum and each init container's request
  (k8s.io/component-helpers resource.PodRequests); a node allocating less never takes the pod.
"""

from __future__ import annotations

from dataclasses import dataclass

from inference_backend.api.inferencebackend import InferenceBackendSpec
from inference_backend.decision import InvalidSpec, ResolvedModel
from inference_backend.engines import card, lora
from inference_backend.engines.artifacts import (
    FETCH_REQUESTS,
    OPERATOR_ARCHS,
    OPERATOR_IMAGE,
    Artifact,
    draft_model,
    resolve,
)
from inference_backend.facts import HardwareClass
from inference_backend.memory import disk_bytes, weight_bytes
from inference_backend.quantity import GIB, gib, parse_quantity
from inference_backend.selection.hardware import UsableClass
from inference_backend.selection.options import Option

SMALL_DISK_BYTES = GIB
"""The 1 GiB disk emptyDir of a pod whose weights are not on the node's disk (render.SMALL_DISK)."""


@dataclass(frozen=True)
class PodDisk:
    """The node disk a pod of one engine requests, and what for."""

    bytes: int
    weights: bool
    """True when the weights are downloaded into an emptyDir on the node (no spec.model.cache)."""


def _artifacts(engine: str, model: ResolvedModel, draft: ResolvedModel | None) -> list[tuple[Artifact, float]]:
    caps = card(engine)
    out: list[tuple[Artifact, float]] = []
    try:
        out.append(
            (resolve(model, caps.own_hf_loader), weight_bytes(model.parameters, model.dtype, model.quantization))
        )
        if draft is not None:
            d = draft_model(model, draft)
            out.append((resolve(d, caps.own_hf_loader, "draft"), weight_bytes(d.parameters, d.dtype, d.quantization)))
    except InvalidSpec:
        pass  # the renderer refuses it with the field; nothing to size here
    return out


def on_node_disk(art: Artifact) -> bool:
    """Whether the weights land in an emptyDir: the engine's own download (into its model-cache emptyDir) or the
    fetch init container's emptyDir (no spec.model.cache)."""
    return art.hf_repo is not None or any("emptyDir" in v for v in art.volumes)


def pod_disk(engine: str, model: ResolvedModel, draft: ResolvedModel | None) -> PodDisk:
    """The ephemeral storage a pod of ``engine`` requests: the weights it downloads to the node (the draft's too),
    with render's headroom (memory.disk_bytes), else the 1 GiB of its caches."""
    held = sum(size for art, size in _artifacts(engine, model, draft) if on_node_disk(art))
    return PodDisk(disk_bytes(held), True) if held else PodDisk(SMALL_DISK_BYTES, False)


def has_init(engine: str, model: ResolvedModel, draft: ResolvedModel | None) -> bool:
    return any(art.init_containers for art, _ in _artifacts(engine, model, draft))


def image_arch_miss(engine: str, spec: InferenceBackendSpec, usable: UsableClass, fetch: bool = False) -> str | None:
    """Why ``engine``'s image for this class cannot run on its architecture; None when it can (or when
    spec.engine.image replaces the pinned image, whose platforms are unknown)."""
    if spec.engine.image:
        return None
    caps = card(engine)
    hw = usable.hardware
    vendors = sorted({g.vendor for g in hw.gpus if g.count > 0})
    if hw.has_gpu and "gpu" in caps.accelerators:
        images = [caps.image_for("gpu", v) for v in vendors]
    elif "cpu" in caps.accelerators:
        images = [caps.image_for("cpu")]
    else:
        return None
    for image in images:
        plat = caps.platforms.get(image) if image else None
        if plat is not None and hw.arch not in plat.archs:
            return f"{image} is built for {', '.join(sorted(plat.archs))} only ({plat.source}), not {hw.arch}"
    if fetch and hw.arch not in OPERATOR_ARCHS:  # the fetch init container's image
        return f"{OPERATOR_IMAGE} (the fetch step) is built for {', '.join(sorted(OPERATOR_ARCHS))} only, not {hw.arch}"
    return None


def disk_miss(need: PodDisk, hw: HardwareClass) -> str | None:
    if hw.ephemeral_bytes is None or need.bytes <= hw.ephemeral_bytes:
        return None
    what = "the downloaded weights (an emptyDir)" if need.weights else "the engine's caches"
    return (
        f"needs {gib(need.bytes)} GiB of ephemeral-storage for {what}; the node allocates {gib(hw.ephemeral_bytes)} GiB"
    )


@dataclass
class Filtered:
    """The classes an engine may use, and why the others are left out (cause -> node classes)."""

    gpu: list[UsableClass]
    cpu: list[UsableClass]
    disk_blocked: list[UsableClass]
    """Left out only for disk: spec.model.cache would make them usable."""
    why: dict[str, int]


def engine_classes(
    engine: str,
    spec: InferenceBackendSpec,
    model: ResolvedModel,
    draft: ResolvedModel | None,
    gpu: list[UsableClass],
    cpu: list[UsableClass],
) -> Filtered:
    """The usable classes whose architecture the engine's image has and whose disk holds what the pod downloads."""
    need = pod_disk(engine, model, draft)
    fetch = has_init(engine, model, draft)
    out = Filtered([], [], [], {})
    for kind, classes in (("gpu", gpu), ("cpu", cpu)):
        for u in classes:
            why = image_arch_miss(engine, spec, u, fetch)
            disk = None if why else disk_miss(need, u.hardware)
            if why or disk:
                reason = why or str(disk)
                out.why[reason] = out.why.get(reason, 0) + u.nodes
                if disk:
                    out.disk_blocked.append(u)
                continue
            (out.gpu if kind == "gpu" else out.cpu).append(u)
    return out


def _quantity(spec: InferenceBackendSpec, key: str) -> float | None:
    value = (spec.resources.requests if spec.resources is not None else {}).get(key)
    return float(parse_quantity(str(value))) if value is not None else None


def _sidecar(option: Option, spec: InferenceBackendSpec) -> tuple[int, int]:
    """The adapters sidecar's CPU (millicores) and memory requests when the pod runs one (engines/lora.py), else 0."""
    uris = [a.uri for a in spec.adapters]
    if not lora.runtime_loaded(card(option.engine).lora, uris, option.placement.multi_node):
        return 0, 0
    req = lora.SIDECAR_REQUESTS
    return int(float(parse_quantity(req["cpu"])) * 1000), int(parse_quantity(req["memory"]))


def requests_miss(option: Option, spec: InferenceBackendSpec, init: bool) -> str | None:
    """Why the node cannot hold the pod's requests (engine container, spec.resources overriding it, the adapters
    sidecar running beside it, and the fetch init container: the larger counts); None when it can."""
    hw = option.placement.hardware
    cpu = _quantity(spec, "cpu")
    mem = _quantity(spec, "memory")
    engine_cpu = int(cpu * 1000) if cpu is not None else option.host.cpu_millis
    engine_mem = int(mem) if mem is not None else option.host.memory_bytes
    side_cpu, side_mem = _sidecar(option, spec)
    # render caps the fetch step's CPU request at the engine's (render._within_engine_cpu)
    init_cpu = min(int(float(parse_quantity(FETCH_REQUESTS["cpu"])) * 1000), engine_cpu) if init else 0
    init_mem = int(parse_quantity(FETCH_REQUESTS["memory"])) if init else 0
    pod_cpu, pod_mem = max(engine_cpu + side_cpu, init_cpu), max(engine_mem + side_mem, init_mem)
    if pod_cpu <= hw.cpu_millis and pod_mem <= hw.memory_bytes:
        return None
    parts = [f"the engine {engine_cpu / 1000:g} CPU / {gib(engine_mem)} GiB"]
    if side_cpu or side_mem:
        parts.append(f"the adapters sidecar beside it {side_cpu / 1000:g} CPU / {gib(side_mem)} GiB")
    if init:
        parts.append(f"the fetch init container {init_cpu / 1000:g} CPU / {gib(init_mem)} GiB")
    return (
        f"the pod requests {pod_cpu / 1000:g} CPU and {gib(pod_mem)} GiB ({', '.join(parts)}; the larger "
        f"counts, as the scheduler does); the node allocates {hw.cpu_millis / 1000:g} CPU (whole cores) and "
        f"{gib(hw.memory_bytes)} GiB"
    )
