"""Models larger than any one node: tensor parallel inside a node x pipeline parallel across nodes.

When no single node holds one replica, a replica spans whole nodes: tensor parallel over the widest width the
node's allocatable GPUs and the attention heads allow (NVLink inside a node where the SKU table says the part has
it), pipeline parallel across nodes (one stage of consecutive layers per node; only the activations between stages
cross the network). The memory of one replica is the same fit as on one node (weights + overhead per GPU + one
full-context sequence <= memoryFraction x the GPUs' memory), over nodes x GPUs per node.

Only engines whose pinned release runs one replica over several nodes (card ``multi_node``: vLLM 0.33.0 with
``--nnodes``/``--node-rank``/``--headless``, SGLang 0.5.23 with ``--nnodes``/``--node-rank``/``--dist-init-addr``)
are placed so; the placement is rendered as a LeaderWorkerSet (render.py). When the cluster lacks the nodes, the
decision is unsatisfiable with "needs N nodes of X"; a GPU-sized model is never placed on CPU. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from inference_backend.api.inferencebackend import InferenceBackendSpec
from inference_backend.decision import MultiNode, Placement, ResolvedModel
from inference_backend.engines import NAMES as ENGINES
from inference_backend.engines import card
from inference_backend.facts import GPUFacts
from inference_backend.facts.identify import INDEX
from inference_backend.memory import gpu_fit, tensor_parallel_options
from inference_backend.quantity import gib
from inference_backend.selection.hardware import UsableClass
from inference_backend.selection.options import (
    MIB,
    Option,
    _option,
    _Sizing,
    kv_per_token,
    model_bytes,
    serving_dtype,
)
from inference_backend.selection.planning import gpu_host, tokens_per_sequence

MAX_NODES = 64
NETWORK = (
    "the cluster network between nodes (pipeline parallel sends only the activations of the stage boundary, "
    "one hidden-state vector per token; InfiniBand or RoCE is not required but the node labels do not say "
    "what the network is)"
)


def _engine_for(candidates: list[str], vendor: str) -> str | None:
    """The first candidate (registry order) that runs on the vendor across nodes, else the first that runs on it."""
    on_vendor = [e for e in candidates if "gpu" in card(e).accelerators and vendor in card(e).devices]
    return next((e for e in on_vendor if card(e).multi_node), on_vendor[0] if on_vendor else None)


@dataclass(frozen=True)
class _Layout:
    tp: int
    nodes: int
    dtype: str
    weights: float
    min_kv: float
    kv_token: float


def _layout(engine: str, spec: InferenceBackendSpec, model: ResolvedModel, gpu: GPUFacts) -> _Layout | None:
    """The fewest nodes of ``gpu``'s node (at its widest tensor-parallel width) that hold one replica of ``engine``;
    None when one node holds it (something other than size kept it off) or no width/count works."""
    if gpu.count <= 0 or gpu.mig or gpu.shared:
        return None
    caps = card(engine)
    if gpu.vendor not in caps.devices or (gpu.compute is not None and gpu.compute < caps.min_compute):
        return None
    widths, _ = tensor_parallel_options(gpu.count, False, model.attention_heads, model.kv_heads, caps.layer_split)
    if not widths:
        return None
    tp = widths[-1]
    dtype, _ = serving_dtype(engine, model, gpu)
    weights = model_bytes(model, dtype)
    kv_token = kv_per_token(engine, model, dtype, spec.kv_cache.dtype, tp)
    min_kv = kv_token * model.context_length
    fraction = spec.kv_cache.memory_fraction
    if gpu_fit(weights, min_kv, gpu.memory_mib * MIB, fraction, tp).fits:
        return None
    # at most one pipeline stage per layer (each node holds at least one layer)
    most = min(MAX_NODES, model.layers) if model.layers else MAX_NODES
    for nodes in range(2, most + 1):
        if gpu_fit(weights, min_kv, gpu.memory_mib * MIB, fraction, tp * nodes).fits:
            return _Layout(tp, nodes, dtype, weights, min_kv, kv_token)
    return None


def multi_node_layout(
    spec: InferenceBackendSpec, model: ResolvedModel, candidates: list[str], gpu_classes: list[UsableClass]
) -> MultiNode | None:
    """The layout with the fewest nodes (then GPUs, then product) over the usable GPU classes, or None."""
    fraction = spec.kv_cache.memory_fraction
    best: tuple[tuple[int, int, str], MultiNode] | None = None
    for usable in gpu_classes:
        for gpu in usable.hardware.gpus:
            engine = _engine_for(candidates, gpu.vendor)
            if engine is None:
                continue
            lay = _layout(engine, spec, model, gpu)
            if lay is None:
                continue
            fit = gpu_fit(lay.weights, lay.min_kv, gpu.memory_mib * MIB, fraction, lay.tp * lay.nodes)
            per_node = fraction * gpu.memory_mib * MIB * lay.tp
            layout = MultiNode(engine, gpu, lay.tp, lay.nodes, fit.required, per_node, usable.nodes)
            key = (lay.nodes, lay.nodes * lay.tp, gpu.product)
            if best is None or key < best[0]:
                best = (key, layout)
    return best[1] if best else None


def interconnect(gpu: GPUFacts) -> str:
    """What the plan assumes of the links: inside a node from the SKU table, across nodes the network."""
    sku = INDEX.by_id.get(gpu.sku) if gpu.sku else None
    if sku is None:
        inside = f"{gpu.product} is not in the SKU table: the link between its GPUs is unknown (PCIe assumed)"
    elif sku.nvlink:
        link = "NVLink" if sku.vendor == "nvidia" else "the vendor's GPU fabric (Infinity Fabric / RoCE links)"
        inside = f"{link} between the GPUs of a node ({sku.id}, {sku.source})"
    else:
        inside = f"PCIe only between the GPUs of a node ({sku.id} has no NVLink, {sku.source})"
    return (
        f"interconnect: tensor parallel inside each node over {inside}; pipeline parallel across nodes over {NETWORK}"
    )


def engines_across_nodes() -> str:
    """Which engines run one replica over several nodes in their pinned releases, and which do not."""
    yes = [f"{card(e).title} {card(e).version}" for e in ENGINES if card(e).multi_node]
    no = [f"{card(e).title} {card(e).version}" for e in ENGINES if not card(e).multi_node]
    return (
        f"engines that run one replica across nodes (pinned releases): {', '.join(yes) or 'none'}; "
        f"not across nodes: {', '.join(no) or 'none'}"
    )


def needs(layout: MultiNode, replicas: int) -> str:
    """The "needs N nodes of X" of ``replicas`` replicas of ``layout`` (one pod per node)."""
    total = layout.nodes * max(replicas, 1)
    per = f" ({layout.nodes} per replica x {replicas} replicas)" if replicas > 1 else ""
    return f"needs {total} nodes of {layout.gpus_per_node}x {layout.gpu.product}{per}"


def multi_node_options(
    engine: str, spec: InferenceBackendSpec, model: ResolvedModel, gpu_classes: list[UsableClass]
) -> tuple[list[Option], str]:
    """Every multi-node placement of ``engine`` the cluster has the nodes for, and why none when the list is empty.

    A replica takes ``nodes`` whole nodes of one hardware class (one pod per node, on distinct nodes), so the class
    needs ``nodes x spec.replicas`` usable nodes."""
    caps = card(engine)
    if not caps.multi_node:
        return [], f"{caps.title} {caps.version} does not run one replica across nodes"
    fraction = spec.kv_cache.memory_fraction
    options: list[Option] = []
    short = ""
    for usable in gpu_classes:
        for gpu in usable.hardware.gpus:
            lay = _layout(engine, spec, model, gpu)
            if lay is None:
                continue
            want = lay.nodes * max(spec.replicas, 1)
            layout = MultiNode(engine, gpu, lay.tp, lay.nodes, 0.0, 0.0, usable.nodes)
            if usable.nodes < want:
                short = short or f"{needs(layout, spec.replicas)}; {usable.nodes} usable"
                continue
            fit = gpu_fit(lay.weights, lay.min_kv, gpu.memory_mib * MIB, fraction, lay.tp * lay.nodes)
            host = gpu_host(
                usable.hardware, lay.tp, fit.weights / lay.nodes, spec.kv_cache.cpu_offload_gi_b, gpu.product
            )
            if host.host is None:
                short = short or host.note
                continue
            placement = Placement("gpu", usable.hardware, usable.nodes, gpu, lay.tp * lay.nodes, lay.nodes)
            tokens, how = tokens_per_sequence(spec, model.context_length)
            sizing = _Sizing(lay.weights, lay.kv_token, lay.dtype, tokens, how, 0)
            per_node = fraction * gpu.memory_mib * MIB * lay.tp
            notes = [
                f"larger than any one node: one replica needs {gib(fit.required)} GiB; one node of {lay.tp}x "
                f"{gpu.product} offers {gib(per_node)} GiB at memoryFraction {fraction}: {lay.nodes} nodes per "
                f"replica, {lay.tp * lay.nodes} GPUs ({usable.nodes} such nodes usable)",
                f"memory per node: weights {gib(fit.weights / lay.nodes)} GiB + overhead "
                f"{gib(fit.overhead / lay.nodes)} GiB + KV {gib(fit.kv_cache / lay.nodes)} GiB of "
                f"{gib(per_node)} GiB (each node holds 1/{lay.nodes} of the layers and their KV cache)",
                interconnect(gpu),
                engines_across_nodes(),
            ]
            if host.note:
                notes.append(host.note)
            options.append(_option(engine, spec, model, placement, fit, sizing, False, host.host, notes))
    if options:
        return options, ""
    return [], short or "no GPU node class where its layout fits"
