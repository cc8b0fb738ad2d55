"""How a Deployment's pods are replaced when its template changes (spec.rollout), decided when a rollout starts.

surge (maxSurge 1, maxUnavailable 0) starts a new pod before an old one stops: no moment without the serving
replicas, at the price of one more replica's devices while the rollout lasts. recreate (maxSurge 0,
maxUnavailable 1) stops one old pod first: no extra devices, but a one-replica backend is down until its
replacement is Ready. On a full GPU pool a surge pod would sit Pending forever (the old pod keeps its GPU), so
``auto`` looks at the pool when the rollout starts: surge when the free devices hold one more replica, else
recreate. On CPU ``auto`` keeps Kubernetes' default (25% surge, 25% unavailable, rounded: a one-replica backend
surges).

While a surge rollout is pending or in flight, the extra replica's devices are reserved in the GPU ledger like the
others (capacity.py), so backends applied meanwhile are not promised them. Once the template is rolled out, the
choice is kept from the live Deployment, so a change of free capacity alone never rewrites it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from inference_backend.api import InferenceBackendSpec
from inference_backend.decision import Decision
from inference_backend.facts import HardwareClass, Pool, capacity, pool_of, reserved
from inference_backend.selection.hardware import usable_classes

SURGE: dict[str, Any] = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
RECREATE: dict[str, Any] = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}


def strategy(surge: bool) -> dict[str, Any]:
    """The Deployment's spec.strategy for a choice (fresh dicts: manifests are mutated by their callers)."""
    chosen = SURGE if surge else RECREATE
    return {"type": chosen["type"], "rollingUpdate": dict(chosen["rollingUpdate"])}


@dataclass(frozen=True)
class Live:
    """What the slim Deployment tells of its rollout."""

    spec_hash: str | None
    surge: bool | None
    """Its strategy: True for maxSurge > 0 with maxUnavailable 0, False for maxSurge 0, None when neither."""
    in_flight: bool
    """Pods of an older template are still there, or the new ones are not all updated yet."""

    @classmethod
    def from_deployment(cls, body: Mapping[str, Any] | None, annotation: str) -> Live | None:
        if not body:
            return None
        spec = body.get("spec") or {}
        st = body.get("status") or {}
        rolling = (spec.get("strategy") or {}).get("rollingUpdate") or {}
        surge = None
        if rolling.get("maxSurge") == 0:
            surge = False
        elif rolling.get("maxUnavailable") == 0:
            surge = True
        replicas = int(spec.get("replicas", 1) or 0)
        total, updated = st.get("replicas"), st.get("updatedReplicas")
        in_flight = (total is not None and int(total) > replicas) or (updated is not None and int(updated) < replicas)
        template = ((spec.get("template") or {}).get("metadata") or {}).get("annotations") or {}
        return cls(template.get(annotation), surge, in_flight)


@dataclass(frozen=True)
class Choice:
    surge: bool | None
    """True: surge, False: recreate, None: Kubernetes' default (CPU with auto)."""
    reason: str
    extra: int = 0
    """Replicas reserved beyond spec.replicas while the rollout lasts (1 for a surge rollout on GPUs)."""
    kept: bool = False
    """Read back from the live Deployment rather than chosen now: the status keeps the reason given when it was
    chosen (which names the free devices of that moment) where it says the same strategy."""

    def to_status(self) -> dict[str, Any] | None:
        if self.surge is None:
            return None
        return {"strategy": "surge" if self.surge else "recreate", "reason": self.reason}


@dataclass(frozen=True)
class Context:
    """What the choice of a rollout strategy reads of the cluster (render takes it to finish the Deployment)."""

    cluster: Mapping[HardwareClass, tuple[str, ...]]
    others: Mapping[Pool, int]
    """Devices per pool the other backends reserve."""
    live: Live | None
    """The Deployment serving now (None before the first apply)."""


def choose(
    spec: InferenceBackendSpec,
    decision: Decision,
    cluster: Mapping[HardwareClass, tuple[str, ...]],
    others: Mapping[Pool, int],
    live: Live | None,
    new_hash: str | None,
) -> Choice:
    """The rollout strategy for ``decision``'s Deployment. ``others``: devices per pool other backends reserve;
    ``live``: the Deployment serving now (None before the first apply); ``new_hash``: the rendered template's."""
    placement = decision.placement
    gpu = placement.gpu if placement is not None else None
    per = placement.gpus_per_replica if placement is not None else 0
    asked = spec.rollout.strategy
    pending = live is not None and (live.spec_hash != new_hash or live.in_flight)
    if gpu is None or not per:
        if asked == "auto":
            return Choice(None, "CPU: Kubernetes' default rolling update (a one-replica backend surges)")
        return Choice(asked == "surge", f"spec.rollout.strategy is {asked}")
    if asked != "auto":
        extra = 1 if asked == "surge" and pending else 0
        return Choice(asked == "surge", f"spec.rollout.strategy is {asked}", extra)
    if live is not None and live.spec_hash == new_hash and live.surge is not None:
        # Rolled out (or rolling) with the live choice: a change of free capacity alone never rewrites it.
        how = "surge" if live.surge else "recreate"
        return Choice(
            live.surge,
            f"auto: {how}, chosen when the current template was rolled out",
            1 if live.surge and live.in_flight else 0,
            kept=True,
        )
    pool = pool_of(gpu)
    usable, _ = usable_classes(spec.hardware, cluster)
    classes = [(u.hardware, u.nodes) for u in usable]
    free = capacity(pool, classes) - reserved(pool, others, classes) - per * spec.replicas
    where = f"{gpu.product} ({gpu.resource})"
    if free >= per:
        return Choice(
            True,
            f"auto: surge, {free} free {where} hold one more replica's {per} while pods are replaced",
            1 if pending else 0,
        )
    return Choice(
        False,
        f"auto: recreate, {max(free, 0)} free {where} cannot hold one more replica's {per}: "
        "one old pod stops before its replacement starts",
    )
