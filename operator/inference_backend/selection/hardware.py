"""Which hardware classes the spec may use: scheduling constraints applied once per class, not per node."""

from __future__ import annotations

from dataclasses import dataclass

from inference_backend.api.inferencebackend import Hardware
from inference_backend.facts import (
    ARCH_LABEL,
    ClusterFacts,
    HardwareClass,
    Taint,
    extended_resource_tolerations,
    tolerates,
)

_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


ARM64_TAINT = Taint(ARCH_LABEL, "arm64", "NoSchedule")
"""GKE taints every Arm node ``kubernetes.io/arch=arm64:NoSchedule`` and adds the toleration itself to pods that
select arm64 by nodeSelector or node affinity (GKE "Arm workloads: prepare a workload": "GKE automatically adds the
toleration"); a pod that lands there carries that selector and toleration (rendered), so the nodes are usable."""


@dataclass(frozen=True)
class UsableClass:
    hardware: HardwareClass
    nodes: int
    gpu_pods_only: bool = False
    """Usable only by pods requesting its accelerators: a taint keyed on the accelerator resource (GKE's
    nvidia.com/gpu=present:NoSchedule) is tolerated the way the ExtendedResourceToleration admission plugin does."""
    arch_tainted: bool = False
    """Carries GKE's ``kubernetes.io/arch=arm64:NoSchedule``: usable by a pod selecting arm64 (rendered with the
    toleration GKE would add)."""


def _selector_matches(selector: dict[str, str], cls: HardwareClass, names: tuple[str, ...]) -> int:
    """How many nodes of the class match the nodeSelector (hostname is per node, so it is matched by name)."""
    labels = cls.label_map()
    rest = {k: v for k, v in selector.items() if k != "kubernetes.io/hostname"}
    if any(labels.get(k) != v for k, v in rest.items()):
        return 0
    host = selector.get("kubernetes.io/hostname")
    return len(names) if host is None else sum(1 for n in names if n == host)


def _nodes(names: tuple[str, ...]) -> str:
    if len(names) == 1:
        return f"node {names[0]}"
    more = " and others" if len(names) > 3 else ""
    return f"nodes {', '.join(names[:3])}{more}"


def usable_classes(hardware: Hardware, cluster: ClusterFacts) -> tuple[list[UsableClass], list[str]]:
    """The classes a pod of this spec can be scheduled on, sorted (stable), and reasons for the ones left out."""
    tolerations = [t.wire() for t in hardware.tolerations]
    usable: list[UsableClass] = []
    left_out: dict[str, int] = {}
    notes: list[str] = []
    for cls in sorted(cluster):
        names = cluster[cls]
        if not cls.ready:
            left_out["NotReady"] = left_out.get("NotReady", 0) + len(names)
            continue
        if not cls.schedulable:
            left_out["unschedulable (cordoned)"] = left_out.get("unschedulable (cordoned)", 0) + len(names)
            continue
        blocking = [t for t in cls.taints if t.effect in _BLOCKING_EFFECTS and not tolerates(tolerations, t)]
        arch_tainted = ARM64_TAINT in blocking and cls.arch == "arm64"
        if arch_tainted:
            blocking.remove(ARM64_TAINT)
            notes.append(
                f"{_nodes(names)}: tainted kubernetes.io/arch=arm64:NoSchedule (GKE's Arm nodes): "
                "tolerated by a pod selecting kubernetes.io/arch=arm64, as GKE does; both rendered in the "
                "pod"
            )
        implicit = extended_resource_tolerations(cls) if cls.has_gpu else []
        gpu_only = bool(blocking) and all(tolerates(implicit, t) for t in blocking)
        if gpu_only:
            keys = ", ".join(
                sorted({f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}" for t in blocking})
            )
            notes.append(
                f"{_nodes(names)}: tainted {keys}: tolerated by pods requesting the accelerator (the "
                "toleration GKE's ExtendedResourceToleration admission adds; rendered in the pod), "
                "so only GPU placements use these nodes"
            )
            blocking = []
        if blocking:
            t = blocking[0]
            why = f"tainted {t.key}{'=' + t.value if t.value else ''}:{t.effect} (not tolerated)"
            left_out[why] = left_out.get(why, 0) + len(names)
            continue
        matching = _selector_matches(hardware.node_selector, cls, names)
        if matching == 0:
            left_out["not matching hardware.nodeSelector"] = left_out.get(
                "not matching hardware.nodeSelector", 0
            ) + len(names)
            continue
        usable.append(UsableClass(cls, matching, gpu_only, arch_tainted))
        notes.extend(f"{_nodes(names)}: {note}" for note in cls.notes)
    # No node counts here: they change with every node that comes or goes, and the decision path (and so the
    # status) should only change when the choice does.
    kinds = {g.product for u in usable for g in u.hardware.gpus if g.count > 0}
    if any(not u.hardware.has_gpu for u in usable):
        kinds.add("CPU-only nodes")
    summary = "usable: " + (", ".join(sorted(kinds)) if kinds else "no node")
    if left_out:
        summary += "; nodes left out: " + ", ".join(sorted(left_out))
    return usable, [summary, *notes]


# Labels that GPU nodes carry and CPU nodes do not: GFD's product, GKE's accelerator, Karpenter's and EKS Auto
# Mode's GPU facts, AMD's device-plugin labeller.
GPU_NODE_LABELS = (
    "nvidia.com/gpu.product",
    "cloud.google.com/gke-accelerator",
    "karpenter.k8s.aws/instance-gpu-count",
    "eks.amazonaws.com/instance-gpu-name",
    "amd.com/gpu.product-name",
    "beta.amd.com/gpu.product-name",
)
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
Expression = tuple[str, str, tuple[str, ...]]


def gpu_node_exclusion(cluster: ClusterFacts, chosen: HardwareClass) -> tuple[tuple[Expression, ...], list[str]]:
    """Node-affinity expressions that keep a CPU pod of class ``chosen`` off the cluster's GPU nodes, and a note
    for GPU nodes no label tells apart. Only labels some GPU node carries and ``chosen`` lacks are used."""
    mine = chosen.label_map()
    gpu_classes = [c for c in cluster if c.has_gpu]
    exprs: list[Expression] = []
    covered: set[HardwareClass] = set()
    for key in GPU_NODE_LABELS:
        carriers = {c for c in gpu_classes if key in c.label_map()}
        if carriers and key not in mine:
            exprs.append((key, "DoesNotExist", ()))
            covered |= carriers
    left = [c for c in gpu_classes if c not in covered]
    types = sorted({t for c in left if (t := c.label_map().get(INSTANCE_TYPE)) and t != mine.get(INSTANCE_TYPE)})
    if types:
        exprs.append((INSTANCE_TYPE, "NotIn", tuple(types)))
        left = [c for c in left if c.label_map().get(INSTANCE_TYPE) not in types]
    notes = []
    if exprs:
        notes.append(
            "CPU placement kept off GPU nodes by node affinity: "
            + ", ".join(f"{k} {op}" + (f" {list(v)}" if v else "") for k, op, v in exprs)
        )
    if left:
        names = sorted(n for c in left for n in cluster[c])
        notes.append(
            f"{_nodes(tuple(names))}: GPU nodes without a label that tells them apart from CPU nodes: "
            "the CPU pod is not kept off them"
        )
    return tuple(exprs), notes
