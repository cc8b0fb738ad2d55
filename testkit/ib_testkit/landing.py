"""Would a rendered pod land on a node? The scheduler's filters that placement depends on, applied to the pod
template and a v1 Node (and the node's ResourceSlices for DRA claims), each failure named.

What is checked, after kube-scheduler's plugins (k8s.io/kubernetes pkg/scheduler/framework/plugins):
- NodeAffinity: ``nodeSelector`` labels and required ``nodeAffinity`` terms (In, NotIn, Exists, DoesNotExist);
- TaintToleration: every NoSchedule/NoExecute taint tolerated (core/v1 ToleratesTaint);
- NodeResourcesFit: cpu, memory, ephemeral-storage and extended resources, the pod's request being the larger of
  the app containers' sum and each init container (k8s.io/component-helpers resource.PodRequests);
- DynamicResources: each claim template's request, ``count`` devices of its DeviceClass whose attributes satisfy
  its CEL selector (the ``device.attributes["driver"].name == "value"`` terms the renderer writes), on the node;
- the image's platform: every container's image is published for the node's ``kubernetes.io/arch`` (the engine
  cards' ``platforms``, the operator image's from the release workflow).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from inference_backend.engines import REGISTRY
from inference_backend.engines.artifacts import OPERATOR_ARCHS, OPERATOR_IMAGE
from inference_backend.facts import tolerates
from inference_backend.facts.nodes import Taint
from inference_backend.quantity import parse_quantity

Json = dict[str, Any]


def platforms(image: str) -> frozenset[str] | None:
    if image == OPERATOR_IMAGE:
        return OPERATOR_ARCHS
    for c in REGISTRY:
        if image in c.platforms:
            return c.platforms[image].archs
    return None


def _expr_ok(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op, values = expr["key"], expr["operator"], expr.get("values") or []
    if op == "In":
        return labels.get(key) in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise AssertionError(f"operator {op} not handled")


def _requests(pod: Json) -> dict[str, float]:
    def of(c: Json) -> dict[str, float]:
        req = (c.get("resources") or {}).get("requests") or {}
        return {k: float(parse_quantity(str(v))) for k, v in req.items()}

    total: dict[str, float] = {}
    for c in pod.get("containers") or []:
        for k, v in of(c).items():
            total[k] = total.get(k, 0.0) + v
    for c in pod.get("initContainers") or []:
        for k, v in of(c).items():
            total[k] = max(total.get(k, 0.0), v)
    return total


_CEL_TERM = re.compile(r'device\.attributes\["([^"]+)"\]\.(\w+) == "((?:[^"\\]|\\.)*)"')


def _device_matches(expr: str, driver: str, device: Json) -> bool:
    attrs = device.get("attributes") or {}
    for term in expr.split(" && "):
        m = _CEL_TERM.fullmatch(term.strip())
        assert m, f"CEL term not understood: {term}"
        domain, name, value = m.group(1), m.group(2), m.group(3).replace('\\"', '"').replace("\\\\", "\\")
        if domain != driver:
            return False
        attr = attrs.get(name) or attrs.get(f"{domain}/{name}") or {}
        if str(next(iter(attr.values()), None)) != value:
            return False
    return True


def _claims(
    pod: Json, node: str, templates: Mapping[str, Json], slices: Iterable[Json], classes: Mapping[str, str]
) -> list[str]:
    out = []
    devices = [
        (s["spec"]["driver"], d)
        for s in slices
        if s["spec"].get("nodeName") == node
        for d in s["spec"].get("devices") or []
    ]
    for rc in pod.get("resourceClaims") or []:
        tpl = templates.get(rc.get("resourceClaimTemplateName", ""))
        if tpl is None:
            out.append(f"claim {rc['name']}: no ResourceClaimTemplate {rc.get('resourceClaimTemplateName')}")
            continue
        for req in tpl["spec"]["spec"]["devices"]["requests"]:
            ex = req["exactly"]
            driver = classes.get(ex["deviceClassName"])
            if driver is None:
                out.append(f"claim {rc['name']}: no DeviceClass {ex['deviceClassName']}")
                continue
            exprs = [s["cel"]["expression"] for s in ex.get("selectors") or []]
            have = sum(1 for drv, d in devices if drv == driver and all(_device_matches(e, drv, d) for e in exprs))
            if have < ex.get("count", 1):
                out.append(
                    f"claim {rc['name']}: {ex.get('count', 1)} {ex['deviceClassName']} device(s) wanted, "
                    f"{have} match on the node"
                )
    return out


def misfits(
    pod: Json,
    node: Json,
    templates: Mapping[str, Json] | None = None,
    slices: Iterable[Json] = (),
    classes: Mapping[str, str] | None = None,
) -> list[str]:
    """Why the pod (a pod template's spec) cannot land on the node; [] when it can. ``templates``: the rendered
    ResourceClaimTemplates by name; ``slices``: the cluster's ResourceSlices; ``classes``: DeviceClass -> driver."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    alloc = (node.get("status") or {}).get("allocatable") or {}
    out = [
        f"nodeSelector {k}={v}: the node has {labels.get(k)!r}"
        for k, v in (pod.get("nodeSelector") or {}).items()
        if labels.get(k) != v
    ]
    required = ((pod.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if terms and not any(all(_expr_ok(e, labels) for e in t.get("matchExpressions") or []) for t in terms):
        out.append("required node affinity not met")
    tolerations = pod.get("tolerations") or []
    for t in (node.get("spec") or {}).get("taints") or []:
        taint = Taint(t["key"], t.get("value", "") or "", t["effect"])
        if taint.effect in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
            out.append(f"taint {taint.key}={taint.value}:{taint.effect} not tolerated")
    for resource, wanted in sorted(_requests(pod).items()):
        have = float(parse_quantity(str(alloc.get(resource, "0"))))
        if wanted > have:
            out.append(f"requests {resource} {wanted:g}, the node allocates {have:g}")
    for c in [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]:
        archs = platforms(c["image"])
        if archs is not None and labels.get("kubernetes.io/arch", "amd64") not in archs:
            out.append(f"image {c['image']} has no {labels.get('kubernetes.io/arch')} build")
    name = (node.get("metadata") or {}).get("name", "")
    out += _claims(pod, name, templates or {}, slices, classes or {})
    return out
