"""The selection decision tree: spec + node facts + engine cards -> Decision, with every step's reason recorded.

Steps, in order (each appends to the decision path):
1. resolve the model (registered Model + inline facts; format, dtype, shape inferred where plain);
2. filter engines by weight format, then by quantization;
3. honour an explicit ``spec.backend`` or refuse it (never replace it);
4. keep the hardware classes the pod can be scheduled on (Ready, schedulable, taints tolerated, nodeSelector);
5. check the draft model for speculative decoding (registered, tokenizer, vocabulary, architecture, size);
6. per engine, every placement that fits in memory, with estimated TTFT/throughput and objective misses;
   under ``accelerator: auto`` GPU placements win over CPU ones when any fits;
7. rank engines by (objectives missed, requested features the engine lacks, registry order) and the placements of
   the winner by (gpuProducts preference, objectives missed, identified GPU (not assumed), draft kept, fewest GPUs,
   smallest GPU memory, faster GPU, product name, hardware class). Python's sort is stable and every key ends
   in a total order, so the same input always gives the same Decision whatever the order of the nodes.
8. resolve batching, prefix cache, KV cache dtype and speculation on the chosen engine, reporting what it lacks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from inference_backend.api.inferencebackend import InferenceBackendSpec
from inference_backend.api.model import ModelSpec
from inference_backend.decision import (
    Batching,
    Current,
    Decision,
    InvalidSpec,
    Memory,
    MultiNode,
    ResolvedModel,
    Speculation,
)
from inference_backend.engines import NAMES as ENGINES
from inference_backend.engines import EngineCard, card, check_spec
from inference_backend.facts import VENDOR_TITLES, ClusterFacts, Pool, capacity, pod_selector, pool_of, reserved
from inference_backend.quantity import gib
from inference_backend.selection.adapters import adapter_plan, lora_refusal
from inference_backend.selection.hardware import Expression, UsableClass, gpu_node_exclusion, usable_classes
from inference_backend.selection.model import draft_incompatibility, resolve_draft, resolve_model
from inference_backend.selection.multinode import engines_across_nodes, multi_node_layout, multi_node_options, needs
from inference_backend.selection.nodefit import disk_miss, engine_classes, has_init, pod_disk, requests_miss
from inference_backend.selection.options import MIB, Option, engine_options, serving_dtype
from inference_backend.selection.planning import tokens_per_sequence


def _describe_model(m: ResolvedModel) -> str:
    q = "" if m.quantization == "none" else f", {m.quantization}"
    active = f" ({m.active_parameters / 1e9:.2f}B active per token)" if m.active_parameters else ""
    return f"model: {m.parameters / 1e9:.2f}B parameters{active}, {m.format}, {m.dtype}{q}, context {m.context_length}"


def _draft(
    spec: InferenceBackendSpec, model: ResolvedModel, registry: Mapping[str, ModelSpec]
) -> tuple[ResolvedModel | None, str]:
    """The draft model when method is draft and it is compatible with the target; else None and why."""
    sd = spec.speculative_decoding
    if sd is None or sd.method != "draft" or sd.draft_model_ref is None:
        return None, ""
    try:
        draft = resolve_draft(sd.draft_model_ref, registry)
    except InvalidSpec as exc:
        return None, f"draft model {sd.draft_model_ref}: {exc.message}"
    why = draft_incompatibility(model, draft)
    return (None, f"draft {sd.draft_model_ref} rejected: {why}") if why else (draft, "")


def _subsumed(strategy: str, caps: EngineCard) -> bool:
    """Continuous batching subsumes dynamic and static batching: it admits waiting requests at every step, so a
    request never waits for a window or a full batch (the specification lists vLLM and TGI for dynamic batching)."""
    return strategy in ("dynamic", "static") and "continuous" in caps.batching


def _lacks(caps: EngineCard, spec: InferenceBackendSpec, draft: ResolvedModel | None) -> list[str]:
    """Requested features the engine does not have natively (counted when ranking engines)."""
    lacks: list[str] = []
    strategy = spec.batching.strategy
    if strategy != "auto" and strategy not in caps.batching and not _subsumed(strategy, caps):
        lacks.append(
            f"batching.strategy {strategy}: {caps.name} has no {strategy} batching; "
            f"{caps.batching[0]} batching used instead"
        )
    sd = spec.speculative_decoding
    if sd is not None and sd.method not in caps.speculative:
        lacks.append(f"speculativeDecoding.method {sd.method}: {caps.name} has no {sd.method} speculation; off")
    elif sd is not None and sd.method == "draft" and draft is not None and draft.format not in caps.formats:
        lacks.append(f"speculativeDecoding: draft format {draft.format} is not one {caps.name} loads; off")
    if spec.prefix_cache.enabled and not caps.prefix_cache:
        lacks.append(f"prefixCache: {caps.name} has no prefix cache")
    if spec.kv_cache.dtype != "auto" and spec.kv_cache.dtype not in caps.kv_dtypes:
        lacks.append(f"kvCache.dtype {spec.kv_cache.dtype}: not a {caps.name} KV cache type; the model dtype is used")
    if spec.kv_cache.cpu_offload_gi_b > 0 and not caps.kv_offload:
        lacks.append(f"kvCache.cpuOffloadGiB: {caps.name} has no KV offload to CPU; ignored")
    return lacks


def select(
    spec: InferenceBackendSpec,
    cluster: ClusterFacts,
    registry: Mapping[str, ModelSpec],
    keep: Current | None = None,
    gpus_in_use: Mapping[Pool, int] | None = None,
    avoid: Current | None = None,
    avoid_why: str = "",
) -> Decision:
    """Run the decision tree. Raises InvalidSpec (naming the field) when the spec itself must change.

    ``keep`` is the placement serving now (the operator passes it when the spec has not changed): if it still fits,
    it is kept even when a better one has appeared, so adding nodes never moves a healthy backend.
    ``gpus_in_use`` counts the devices of each pool (facts/pools.py) other InferenceBackends hold, so backends spread
    over the GPUs there are instead of all queueing for the cheapest kind.
    ``avoid`` is a placement whose pods stayed unschedulable past the grace period (``avoid_why`` says so): its
    pool is left out when another placement fits, and kept (saying so) when none does.
    """
    check_spec(spec)
    model, reasons = resolve_model(spec.model, registry)
    reasons.append(_describe_model(model))
    rejected = _engine_refusals(spec, model)
    candidates = [e for e in ENGINES if e not in rejected]
    reasons.append(
        f"format {model.format}, quantization {model.quantization}: candidates {', '.join(candidates) or 'none'}"
    )
    if spec.backend != "auto" and spec.backend in rejected:
        why = f"backend {spec.backend} requested but {rejected[spec.backend]}; not replaced"
        return _refuse(model, reasons, rejected, why)
    if spec.backend != "auto":
        candidates = _requested(spec.backend, candidates, rejected, reasons)
    if not candidates:
        return _refuse(model, reasons, rejected, "no engine serves this model format and quantization")
    classes = _node_classes(spec, cluster, candidates, reasons)
    draft, draft_why = _draft(spec, model, registry)
    if draft_why:
        reasons.append(draft_why)
    found = _fitting_options(spec, model, draft, candidates, classes, reasons, rejected, avoid, avoid_why)
    if isinstance(found, Decision):
        return found
    all_options, left_out = found
    prefs = spec.hardware.gpu_products
    kept = _still_valid(keep, all_options.get(keep.engine, []), prefs) if keep else None
    # Free capacity only steers new placements: a placement that is kept does not depend on what others use, so
    # its decision (and status) stays the same while the cluster fills up.
    busy = frozenset() if kept else _busy_pools(classes.gpu, gpus_in_use or {}, all_options, spec.replicas)
    best = {engine: sorted(opts, key=lambda o: o.sort_key(prefs, busy))[0] for engine, opts in all_options.items()}
    if not best:
        why = "no engine has a placement that fits: " + "; ".join(f"{e}: {rejected[e]}" for e in candidates)
        return _refuse(model, reasons, rejected, why)
    lacks = {e: _lacks(card(e), spec, draft) for e in best}
    order = _ranking(best, lacks, keep, kept, reasons)
    if kept is not None:
        best[kept.engine] = kept
    winner = order[0]
    choice = best[winner]
    for engine in order[1:]:
        rejected[engine] = _ranked_below(winner, choice, lacks[winner], best[engine], lacks[engine])
    reasons.append(
        f"ranked by (objectives missed, features lacking, GPUs or replicas the objectives need, registry "
        f"order): {', '.join(order)}"
    )
    if kept is None:
        reasons.extend(_no_free_gpus(choice, classes.gpu, gpus_in_use or {}, busy, spec.replicas))
    ranked = _Ranked(choice, lacks[winner], all_options.get(winner, []))
    return _decided(spec, cluster, model, (draft, draft_why), ranked, reasons, rejected, classes, left_out)


def _refuse(model: ResolvedModel, reasons: list[str], rejected: dict[str, str], why: str) -> Decision:
    """No engine placed: the path so far, then why not."""
    return Decision(None, tuple([*reasons, why]), tuple(rejected.items()), model=model)


def _engine_refusals(spec: InferenceBackendSpec, model: ResolvedModel) -> dict[str, str]:
    """Step 2: the engines that cannot serve this model at all (format, quantization, the autoscaling metric or
    scale to zero, LoRA adapters), each with why, in registry order."""
    rejected: dict[str, str] = {}
    for engine in ENGINES:
        caps = card(engine)
        if model.format not in caps.formats:
            rejected[engine] = f"format {model.format} is not one it serves ({', '.join(sorted(caps.formats))})"
        elif model.quantization not in caps.quantizations:
            rejected[engine] = f"quantization {model.quantization} is not one it runs"
        elif spec.autoscaling is not None and spec.autoscaling.metric not in caps.autoscaling.signals:
            rejected[engine] = (
                f"it exposes no {spec.autoscaling.metric} metric to autoscale on "
                f"(spec.autoscaling.metric; {caps.autoscaling.lacks})"
            )
        elif spec.autoscaling is not None and spec.autoscaling.min_replicas == 0 and not caps.autoscaling.scale_to_zero:
            rejected[engine] = (
                f"it may not scale to zero (spec.autoscaling.minReplicas 0): its cold start takes "
                f"{caps.autoscaling.cold_start}"
            )
        elif spec.adapters and (why := lora_refusal(caps, spec, model)):
            rejected[engine] = why
    return rejected


def _requested(backend: str, candidates: list[str], rejected: dict[str, str], reasons: list[str]) -> list[str]:
    """Step 3: an explicit ``spec.backend`` (a candidate) is the only one; the others are rejected for it."""
    for engine in candidates:
        if engine != backend:
            rejected[engine] = f"not requested (spec.backend is {backend})"
    reasons.append(f"backend {backend} requested explicitly")
    return [backend]


@dataclass(frozen=True)
class _Classes:
    """The usable hardware classes the GPU and the CPU placements are looked for on."""

    gpu: list[UsableClass]
    cpu: list[UsableClass]


def _node_classes(
    spec: InferenceBackendSpec, cluster: ClusterFacts, candidates: list[str], reasons: list[str]
) -> _Classes:
    """Step 4: the hardware classes the pod can be scheduled on, split by what ``hardware.accelerator`` allows (CPU
    placements on GPU nodes only when no CPU-only node exists and the spec asks for CPU)."""
    usable, hw_notes = usable_classes(spec.hardware, cluster)
    reasons.extend(hw_notes)
    accel = spec.hardware.accelerator
    gpu_classes = [u for u in usable if u.hardware.has_gpu] if accel != "cpu" else []
    cpu_only = [u for u in usable if not u.hardware.has_gpu]
    on_gpu_nodes = [u for u in usable if u.hardware.has_gpu and not u.gpu_pods_only]
    cpu_classes = cpu_only if accel != "gpu" else []
    reasons.extend(_unserved_devices(gpu_classes, candidates))
    if not cpu_only and on_gpu_nodes and accel == "cpu":
        cpu_classes = on_gpu_nodes
        reasons.append("no CPU-only node: CPU placements considered on GPU nodes (hardware.accelerator: cpu)")
    elif not cpu_only and on_gpu_nodes and accel == "auto":
        reasons.append(
            "no CPU-only node: CPU placements are not considered on GPU nodes (they would hold GPUs "
            "idle; hardware.accelerator: cpu allows it)"
        )
    return _Classes(gpu_classes, cpu_classes)


def _on_gpu(options: dict[str, list[Option]]) -> bool:
    return any(o.placement.gpu for opts in options.values() for o in opts)


def _fitting_options(
    spec: InferenceBackendSpec,
    model: ResolvedModel,
    draft: ResolvedModel | None,
    candidates: list[str],
    classes: _Classes,
    reasons: list[str],
    rejected: dict[str, str],
    avoid: Current | None,
    avoid_why: str,
) -> tuple[dict[str, list[Option]], tuple[Current, str] | None] | Decision:
    """Step 6: per engine, the placements that fit (less an avoided pool; across nodes when no one node holds the
    model; GPU placements only under ``accelerator: auto`` when any fits), and the placement left out as avoided;
    or the refusal when none can."""
    accel = spec.hardware.accelerator
    all_options: dict[str, list[Option]] = {}
    disk_only: dict[str, str] = {}
    for engine in candidates:
        options, why, blocked = _engine_options(engine, spec, model, draft, classes.gpu, classes.cpu)
        if blocked:
            disk_only[engine] = blocked
        if not options:
            rejected[engine] = why
            continue
        all_options[engine] = options
    if disk_only and accel != "cpu" and not _on_gpu(all_options):
        return _refuse(model, reasons, rejected, _disk_refusal(disk_only))
    left_out: tuple[Current, str] | None = None
    if avoid is not None:
        fewer = _avoiding(avoid, avoid_why, all_options, rejected, reasons)
        left_out = (avoid, avoid_why) if fewer is not all_options else None
        all_options = fewer
    gpu_fits = _on_gpu(all_options)
    layout = None if gpu_fits or accel == "cpu" else multi_node_layout(spec, model, candidates, classes.gpu)
    if layout is not None:
        across = _across_nodes(spec, model, candidates, classes.gpu, rejected, disk_only)
        if not across and disk_only:
            return _refuse(model, reasons, rejected, _disk_refusal(disk_only))
        if not across:
            return _too_big(layout, spec, model, reasons, rejected, all_options)
        for engine in all_options:
            if engine not in across:
                rejected[engine] = "runs only on CPU here, and the model belongs on GPUs across nodes"
        all_options = across
        reasons.append(
            f"larger than any one usable node: one replica spans several nodes ({layout.describe()} "
            "at the fewest); placed as a LeaderWorkerSet, never on CPU"
        )
    if accel == "auto" and gpu_fits:
        _prefer_gpus(all_options, rejected, reasons)
    return all_options, left_out


def _prefer_gpus(all_options: dict[str, list[Option]], rejected: dict[str, str], reasons: list[str]) -> None:
    """``accelerator: auto`` and a GPU placement fits: each engine keeps its GPU placements; one with none is
    rejected (``all_options`` is changed in place)."""
    for engine, opts in list(all_options.items()):
        gpu_opts = [o for o in opts if o.placement.gpu is not None]
        if gpu_opts:
            all_options[engine] = gpu_opts
        else:
            rejected[engine] = "runs on CPU only here, and a GPU placement fits (hardware.accelerator: auto)"
            del all_options[engine]
    reasons.append("hardware.accelerator auto: a GPU placement fits, so GPU placements are preferred")


def _ranking(
    best: dict[str, Option],
    lacks: dict[str, list[str]],
    keep: Current | None,
    kept: Option | None,
    reasons: list[str],
) -> list[str]:
    """Step 7: the engines by (objectives missed, features lacking, cost, registry order), the kept placement's
    engine first when the current placement is still valid."""
    order = sorted(best, key=lambda e: (len(best[e].misses), len(lacks[e]), _cost(best[e]), ENGINES.index(e)))
    if kept is not None:
        if (kept.engine, kept.placement) != (order[0], best[order[0]].placement):  # else the fresh pick agrees
            reasons.append(
                f"kept the current placement ({kept.engine} on {kept.placement.describe()}): it is "
                "still valid, and adding nodes does not move a healthy backend"
            )
        order = [kept.engine, *(e for e in order if e != kept.engine)]
    elif keep is not None:
        reasons.append(f"the current placement ({keep.engine}, {keep.describe()}) is no longer valid: selecting again")
    return order


def _no_free_gpus(
    choice: Option,
    gpu_classes: list[UsableClass],
    in_use: Mapping[Pool, int],
    busy: frozenset[tuple[Pool, int]],
    replicas: int,
) -> list[str]:
    """A reason when the chosen GPU pool has no free devices left for the replicas (its pods wait)."""
    gpu = choice.placement.gpu
    if gpu is None or (pool_of(gpu), choice.placement.gpus_per_replica) not in busy:
        return []
    classes = [(u.hardware, u.nodes) for u in gpu_classes]
    used = reserved(pool_of(gpu), in_use, classes)
    where = ", ".join(f"{k}={v}" for k, v in pool_of(gpu)[1]) or "any node"
    return [
        f"no free {gpu.product} GPUs left for {replicas} replica(s) on the nodes it selects "
        f"({where}; {used} held by other InferenceBackends): pods wait until some free up"
    ]


@dataclass(frozen=True)
class _Ranked:
    """The winner's chosen option, the requested features its engine lacks, and all its options."""

    choice: Option
    lacks: list[str]
    options: list[Option]


def _decided(
    spec: InferenceBackendSpec,
    cluster: ClusterFacts,
    model: ResolvedModel,
    draft: tuple[ResolvedModel | None, str],
    ranked: _Ranked,
    reasons: list[str],
    rejected: dict[str, str],
    classes: _Classes,
    left_out: tuple[Current, str] | None,
) -> Decision:
    """The Decision on the chosen option (step 8 in _finish), kept off GPU nodes (CPU placements), pinned to an
    architecture when needed, with its multi-node layout and the placement it avoided."""
    choice = ranked.choice
    off_gpus: tuple[Expression, ...] = ()
    if choice.placement.gpu is None and not choice.placement.hardware.has_gpu:
        off_gpus, notes = gpu_node_exclusion(cluster, choice.placement.hardware)
        reasons.extend(notes)
    narrower = _narrower_miss(ranked.options, choice)
    if narrower:
        reasons.append(narrower)
    done = _finish(spec, model, *draft, choice, ranked.lacks, reasons, rejected, off_gpus)
    done = _pin_arch(done, choice, classes.gpu if choice.placement.gpu is not None else classes.cpu)
    chosen = choice.placement
    if chosen.multi_node and chosen.gpu is not None:
        per_node = spec.kv_cache.memory_fraction * chosen.gpu.memory_mib * MIB * chosen.gpus_per_node
        done = replace(
            done,
            multi_node=MultiNode(
                choice.engine,
                chosen.gpu,
                chosen.gpus_per_node,
                chosen.pipeline_parallel,
                choice.fit.required,
                per_node,
                chosen.nodes,
            ),
        )
    return replace(done, avoided=left_out) if left_out is not None else done


def _engine_options(
    engine: str,
    spec: InferenceBackendSpec,
    model: ResolvedModel,
    draft: ResolvedModel | None,
    gpu: list[UsableClass],
    cpu: list[UsableClass],
) -> tuple[list[Option], str, str]:
    """The engine's placements on the nodes its image runs on and whose disk holds what it downloads, less those
    whose node cannot hold the pod's requests (selection/nodefit.py); why none, when none; and, when a GPU node
    would hold it but for its disk, that disk shortfall."""
    f = engine_classes(engine, spec, model, draft, gpu, cpu)
    options, why = engine_options(engine, spec, model, draft, f.gpu, f.cpu)
    init = has_init(engine, model, draft)
    left = dict(f.why)
    kept = []
    for o in options:
        miss = requests_miss(o, spec, init)
        if miss is None:
            kept.append(o)
        else:
            left[miss] = left.get(miss, 0) + o.placement.nodes
    blocked = ""
    gpu_blocked = [u for u in f.disk_blocked if u.hardware.has_gpu]
    if gpu_blocked and not any(o.placement.gpu for o in kept):
        would, _ = engine_options(engine, spec, model, draft, gpu_blocked, [])
        if would:
            blocked = str(disk_miss(pod_disk(engine, model, draft), would[0].placement.hardware))
            blocked = f"{would[0].placement.describe()} would hold it, but its node {blocked}"
    if left and (not kept or why):
        out = "; ".join(f"{n} node(s) left out: {r}" for r, n in sorted(left.items()))
        why = f"{out}; {why}" if why and not why.startswith(("needs a GPU", "no usable node")) else out
    return kept, why, blocked


def _disk_refusal(disk_only: dict[str, str]) -> str:
    engines = "; ".join(f"{e}: {why}" for e, why in disk_only.items())
    return (
        f"the GPU nodes that hold the model cannot hold its weights on their disk ({engines}): set "
        "spec.model.cache (pvc: an existing claim; storageClass: the operator creates a claim sized for the "
        "weights) so the weights go to a volume instead of the node's ephemeral storage, or give the nodes "
        "larger disks; not placed on CPU"
    )


def _pin_arch(done: Decision, choice: Option, pool: list[UsableClass]) -> Decision:
    """``kubernetes.io/arch`` in the pod's nodeSelector when the nodes it may land on (the usable classes of its
    pool) mix architectures, or when the chosen nodes carry GKE's arm64 taint (with the toleration GKE adds)."""
    p = choice.placement
    hw = p.hardware
    mine = pool_of(p.gpu) if p.gpu is not None else None
    landing = [
        u
        for u in pool
        if not (u.arch_tainted and u.hardware.arch != hw.arch)
        and (mine is None or any(g.count > 0 and pool_of(g) == mine for g in u.hardware.gpus))
    ]
    archs = sorted({u.hardware.arch for u in landing} | {hw.arch})
    tainted = any(u.arch_tainted and u.hardware == hw for u in pool)
    if len(archs) == 1 and not tainted:
        return done
    why = []
    if len(archs) > 1:
        why.append(f"the nodes it may land on mix {' and '.join(archs)}")
    if tainted:
        why.append("the chosen nodes carry GKE's kubernetes.io/arch=arm64:NoSchedule taint (tolerated, as GKE does)")
    line = f"nodeSelector kubernetes.io/arch={hw.arch}: {'; '.join(why)}"
    return replace(done, reasons=(*done.reasons, line), arch=hw.arch, arch_toleration=tainted)


def _narrower_miss(options: list[Option], choice: Option) -> str:
    """When the chosen replica is wider than one GPU of its product would be, the objective the narrower
    placement misses and by how much ("TPOT 38 ms > tpotMillis 30 at ... on 1x NVIDIA-L4; 2x NVIDIA-L4 (TP2)
    meets it")."""
    p = choice.placement
    if p.gpu is None or choice.misses:
        return ""
    narrower = [
        o
        for o in options
        if o.placement.gpu is not None
        and o.misses
        and o.placement.gpu.product == p.gpu.product
        and o.placement.gpus_per_replica < p.gpus_per_replica
    ]
    if not narrower:
        return ""
    o = max(narrower, key=lambda o: o.placement.gpus_per_replica)
    return (
        f"{o.misses[0]} on {o.placement.gpus_per_replica}x {p.gpu.product} ({o.plan.replicas} replica(s)); "
        f"{p.gpus_per_replica}x {p.gpu.product} (TP{p.tensor_parallel_size}) meets it"
    )


def _cost(o: Option) -> int:
    """GPUs in total (or CPU replicas) the load objectives need on this option."""
    return o.total_gpus if o.placement.gpu is not None else o.plan.replicas


def _across_nodes(
    spec: InferenceBackendSpec,
    model: ResolvedModel,
    candidates: list[str],
    gpu_classes: list[UsableClass],
    rejected: dict[str, str],
    disk: dict[str, str],
) -> dict[str, list[Option]]:
    """Multi-node options per candidate engine (selection/multinode.py); why not for the others (``disk``: the
    engines whose nodes would hold a replica across them but for their disk)."""
    out: dict[str, list[Option]] = {}
    for engine in candidates:
        if "gpu" not in card(engine).accelerators:
            continue
        fit = engine_classes(engine, spec, model, None, gpu_classes, [])  # arch and disk, as on one node
        options, why = multi_node_options(engine, spec, model, fit.gpu)
        if not options and fit.why:
            why = "; ".join(f"{n} node(s) left out: {r}" for r, n in sorted(fit.why.items())) + f"; {why}"
        blocked = [u for u in fit.disk_blocked if u.hardware.has_gpu]
        if not options and blocked and multi_node_options(engine, spec, model, blocked)[0]:
            disk[engine] = f"across nodes, {disk_miss(pod_disk(engine, model, None), blocked[0].hardware)}"
        if options:
            out[engine] = options
            rejected.pop(engine, None)  # its one-node miss is what the multi-node placement answers
        else:
            one = rejected.get(engine)
            rejected[engine] = f"{one}; across nodes: {why}" if one else f"larger than any one node: {why}"
    return out


def _too_big(
    layout: MultiNode,
    spec: InferenceBackendSpec,
    model: ResolvedModel,
    reasons: list[str],
    rejected: dict[str, str],
    all_options: dict[str, list[Option]],
) -> Decision:
    """A model larger than any one usable GPU node and no multi-node placement the cluster has the nodes for:
    unsatisfiable, with the layout it needs ("needs N nodes of X"); never CPU."""
    caps = card(layout.engine)
    have = f"{layout.available_nodes} such node(s) usable"
    why = (
        f"larger than any one node: one replica needs {gib(layout.required)} GiB; one node of "
        f"{layout.gpus_per_node}x {layout.gpu.product} offers {gib(layout.per_node)} GiB at memoryFraction "
        f"{spec.kv_cache.memory_fraction}: it {needs(layout, spec.replicas)} ({layout.describe()}, "
        f"{layout.nodes * layout.gpus_per_node} GPUs per replica; {have})"
    )
    multi = (
        f"{caps.title} {caps.version} runs across nodes (LeaderWorkerSet), and the cluster lacks the nodes"
        if caps.multi_node
        else f"{caps.title} {caps.version} does not run across nodes ({engines_across_nodes()})"
    )
    reasons.append(f"{why}; {multi}; not placed on CPU")
    for engine in all_options:
        rejected.setdefault(engine, "runs only on CPU here, and the model belongs on GPUs across nodes")
    return Decision(None, tuple(reasons), tuple(rejected.items()), model=model, multi_node=layout)


def _unserved_devices(gpu_classes: list[UsableClass], candidates: list[str]) -> list[str]:
    """A reason per accelerator vendor among the usable nodes that no candidate engine has a build for."""
    by_vendor: dict[str, set[str]] = {}
    for usable in gpu_classes:
        for g in usable.hardware.gpus:
            if g.count > 0:
                by_vendor.setdefault(g.vendor, set()).add(f"{g.product} ({g.resource})")
    out = []
    for vendor, products in sorted(by_vendor.items()):
        if not any(vendor in card(e).devices for e in candidates):
            title = VENDOR_TITLES.get(vendor, vendor)
            out.append(
                f"{', '.join(sorted(products))}: no candidate engine runs on {title} "
                f"({', '.join(candidates)}: no {vendor} build in the pinned release); these accelerators are "
                "not used"
            )
    return out


def _busy_pools(
    gpu_classes: list[UsableClass], in_use: Mapping[Pool, int], options: dict[str, list[Option]], replicas: int
) -> frozenset[tuple[Pool, int]]:
    """(GPU pool, width) pairs whose free devices (allocatable on the nodes the pool selects, minus what other
    backends hold in overlapping pools) cannot hold this spec (facts/pools.py)."""
    classes = [(u.hardware, u.nodes) for u in gpu_classes]
    busy = set()
    for opts in options.values():
        for o in opts:
            g, width = o.placement.gpu, o.placement.gpus_per_replica
            if g is None:
                continue
            pool = pool_of(g)
            if capacity(pool, classes) - reserved(pool, in_use, classes) < width * max(replicas, 1):
                busy.add((pool, width))
    return frozenset(busy)


def _in_pool(option: Option, current: Current) -> bool:
    """Whether ``option`` places pods where ``current`` does: the same accelerator, product and node pool."""
    p = option.placement
    if (p.accelerator, p.gpu.product if p.gpu else None) != (current.accelerator, current.gpu_product):
        return False
    return current.gpu_selector is None or p.gpu is None or tuple(sorted(pod_selector(p.gpu))) == current.gpu_selector


def _avoiding(
    avoid: Current, why: str, options: dict[str, list[Option]], rejected: dict[str, str], reasons: list[str]
) -> dict[str, list[Option]]:
    left = {e: kept for e, opts in options.items() if (kept := [o for o in opts if not _in_pool(o, avoid)])}
    if not left:
        reasons.append(f"{why}; no other placement fits, so it stays there")
        return options
    for engine in options:
        if engine not in left:
            rejected[engine] = f"its only placements are on {avoid.describe()}, where the pods stay unschedulable"
    reasons.append(f"{why}: another placement is selected")
    return left


def _still_valid(keep: Current, options: list[Option], prefs: list[str]) -> Option | None:
    for option in sorted(options, key=lambda o: o.sort_key(prefs)):
        p = option.placement
        product = p.gpu.product if p.gpu else None
        if (p.accelerator, product, p.gpus_per_replica) != (keep.accelerator, keep.gpu_product, keep.gpus_per_replica):
            continue
        # The same product can be two pools (GFD-labelled nodes and nodes known by instance type): keep the pool
        # the pods are on, never the first one that sorts.
        if keep.gpu_selector is None or p.gpu is None or tuple(sorted(pod_selector(p.gpu))) == keep.gpu_selector:
            return option
    return None


def _ranked_below(winner: str, w: Option, w_lacks: list[str], o: Option, o_lacks: list[str]) -> str:
    if len(o.misses) > len(w.misses):
        return f"ranked below {winner}: {'; '.join(o.misses)}"
    if len(o_lacks) > len(w_lacks):
        return f"ranked below {winner}: lacks {'; '.join(o_lacks)}"
    if _cost(o) > _cost(w):
        unit = "GPUs" if o.placement.gpu is not None else "replicas"
        return (
            f"ranked below {winner}: the load objectives need {_cost(o)} {unit} on it "
            f"({o.plan.replicas} replica(s) of {o.placement.describe()}: {'; '.join(o.load)}), {_cost(w)} on "
            f"{winner}"
        )
    return f"ranked below {winner}: registry order (equal on objectives and features)"


def _finish(
    spec: InferenceBackendSpec,
    model: ResolvedModel,
    draft: ResolvedModel | None,
    draft_why: str,
    choice: Option,
    lacks: list[str],
    reasons: list[str],
    rejected: dict[str, str],
    avoid: tuple[Expression, ...] = (),
) -> Decision:
    """The Decision for the chosen option: why it fits and what it serves at, then the engine's features resolved
    (batching, adapters, prefix cache, KV cache dtype, speculation), each reported."""
    engine = choice.engine
    caps = card(engine)
    p = choice.placement
    reasons.append(f"chosen: {engine} on {p.describe()}")
    _, dtype_notes = serving_dtype(engine, model, p.gpu)
    reasons.extend(dtype_notes)
    reasons.extend(_fit_reasons(spec, model, choice))
    resolved, batching_why, unsupported = _batching(spec, caps, p.gpu is not None)
    unsupported = [*lacks, *unsupported]
    reasons.append(batching_why)
    adapters, adapter_notes = adapter_plan(spec, caps)
    reasons.extend(adapter_notes)
    prefix = spec.prefix_cache.enabled and caps.prefix_cache
    if prefix and adapters.items and not caps.lora.prefix_cache:
        prefix = False
        unsupported.append(f"prefixCache: {caps.name} turns its prefix cache off while LoRA adapters are loaded")
    caveat = f" ({caps.prefix_cache_caveat})" if prefix and caps.prefix_cache_caveat else ""
    reasons.append(f"prefix cache: {'on' if prefix else 'off'}{caveat}")
    kv_dtype = spec.kv_cache.dtype if spec.kv_cache.dtype in caps.kv_dtypes else "auto"
    speculation = _speculation(spec, draft, draft_why, choice, caps)
    if speculation.enabled and adapters.items and speculation.method not in caps.lora.speculative:
        speculation = Speculation(
            False, f"{caps.name} has no {speculation.method} speculation with LoRA adapters loaded (spec.adapters)"
        )
    reasons.append(f"speculative decoding: {'on' if speculation.enabled else 'off'} ({speculation.reason})")
    b = spec.batching
    fit = choice.fit
    return Decision(
        backend=engine,
        reasons=tuple(reasons),
        rejected=tuple(rejected.items()),
        placement=p,
        memory=Memory(fit.weights, fit.kv_cache, fit.required, fit.available, choice.kv_per_token),
        batching=Batching(resolved, b.max_batch_size, b.max_batch_tokens, b.max_wait_millis),
        prefix_cache=prefix,
        speculation=speculation,
        unsupported=tuple(unsupported),
        model=model,
        serving_dtype=choice.serving_dtype,
        kv_cache_dtype=kv_dtype,
        estimate=_estimate_json(choice),
        plan=choice.plan,
        host=choice.host,
        avoid_labels=avoid,
        adapters=adapters,
    )


def _fit_reasons(spec: InferenceBackendSpec, model: ResolvedModel, choice: Option) -> list[str]:
    """Why the chosen option fits (memory per replica, the replica plan) and what it is estimated to serve at,
    with the objectives it misses."""
    fit = choice.fit
    plan = choice.plan
    p = choice.placement
    ctx = (
        f"{plan.slots} slot(s) x {model.context_length}-token context"
        if plan.slots
        else f"one {model.context_length}-token sequence"
    )
    out = [
        f"memory per replica: weights {gib(fit.weights)} GiB + overhead {gib(fit.overhead)} GiB + "
        f"{ctx} {gib(fit.min_kv)} GiB = {gib(fit.required)} GiB "
        f"<= {gib(fit.available)} GiB available; KV cache {gib(fit.kv_cache)} GiB "
        f"({choice.kv_per_token / 1024:.0f} KiB/token, {choice.kv_sequences} full-context sequences)"
    ]
    _, how = tokens_per_sequence(spec, model.context_length)
    held = (
        f"{plan.slots} slots, each holding a full context"
        if plan.slots
        else f"{plan.sequences} requests of {plan.tokens_per_sequence} tokens ({how}; KV pages are allocated on demand)"
    )
    out.append(
        f"plan: {p.gpus_per_replica or 'no'} GPU(s) per replica, the fewest that fit and meet the "
        f"per-replica objectives; one replica holds {held}; {plan.replicas} replica(s) for the load "
        "objectives (more replicas rather than wider ones)"
    )
    out.extend(choice.notes)
    e = choice.estimate
    out.append(
        f"estimated TTFT {_ms(e.ttft_ms)} (p95 {_ms(e.ttft_p95_ms)}), TPOT {_ms(e.tpot_ms)}, "
        f"{e.tokens_per_second:.0f} tokens/s per replica at {choice.load_how} (an estimate until benchmarked; "
        f"source: {e.how})"
    )
    out.extend(f"objective not met: {m}" for m in choice.misses)
    if choice.misses:
        out.append(f"the binding objective: {choice.misses[0]} on {p.describe()}")
    return out


def _batching(spec: InferenceBackendSpec, caps: EngineCard, on_gpu: bool) -> tuple[str, str, list[str]]:
    """The batching strategy the engine runs (dynamic and static mapped to continuous where it subsumes them; the
    engine's own choice under auto), its reason, and what of the request it does not honour."""
    strategy = spec.batching.strategy
    resolved = strategy if strategy in caps.batching else caps.batching[0]
    if strategy == "auto":
        resolved = caps.auto_batching.get("gpu" if on_gpu else "cpu", resolved)
    unsupported = []
    if strategy != resolved and strategy != "auto" and _subsumed(strategy, caps):
        mapped = (
            f"batching.strategy {strategy}: mapped to {caps.name}'s continuous batching, which admits "
            "waiting requests at every step (it subsumes dynamic and static batching)"
        )
        why = f"batching: continuous ({strategy} requested: {mapped.split(': ', 1)[1]})"
        unsupported.append(mapped)
    else:
        why = f"batching: {resolved}" + (" (auto)" if strategy == "auto" else "")
    if resolved == "continuous" and spec.batching.max_wait_millis is not None:
        unsupported.append("batching.maxWaitMillis: continuous batching admits requests every step; ignored")
    return resolved, why, unsupported


def _ms(v: float) -> str:
    return "unbounded" if v == float("inf") else f"{v:.0f} ms" if v >= 10 else f"{v:.1f} ms"


def _finite(v: float) -> float:
    return round(v, 1) if v != float("inf") else 1e12


def _estimate_json(choice: Option) -> dict[str, float | str]:
    e = choice.estimate
    return {
        "ttftMillis": _finite(e.ttft_ms),
        "ttftP95Millis": _finite(e.ttft_p95_ms),
        "tpotMillis": round(e.tpot_ms, 2),
        "tokensPerSecond": round(e.tokens_per_second, 1),
        "concurrency": round(e.concurrency, 2),
        "source": e.how,
    }


def _speculation(
    spec: InferenceBackendSpec, draft: ResolvedModel | None, draft_why: str, choice: Option, caps: EngineCard
) -> Speculation:
    sd = spec.speculative_decoding
    if sd is None:
        return Speculation(False, "not requested")
    if sd.method not in caps.speculative:
        return Speculation(False, f"{caps.name} has no {sd.method} speculation")
    if sd.method == "ngram":
        return Speculation(True, "n-gram prompt lookup", "ngram", sd.num_speculative_tokens)
    if draft is None:
        return Speculation(False, draft_why)
    if draft.format not in caps.formats:
        return Speculation(False, f"draft format {draft.format} is not one {caps.name} loads")
    if not choice.speculate:
        return Speculation(False, "the draft model does not fit beside the target")
    return Speculation(
        True, f"draft {draft.model_ref} shares the target's tokenizer", "draft", sd.num_speculative_tokens, draft
    )
