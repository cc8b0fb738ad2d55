"""GPU capacity: reservations taken when a placement is decided, and the check that keeps them from overlapping.

The selection steers new placements away from pools whose free devices cannot hold them, but when every fitting
pool is full it still names the best one. Before a Deployment is created (or moved), the reconcile checks the
placement against what is reserved: allocatable devices of the placement's pool (facts/pools.py: the resource and
the identifying node label the pods select) on the nodes the pod may use, minus the reservations of every other
InferenceBackend in an overlapping pool. Reservations are taken synchronously, right after the decision and before
any API call, so concurrent reconciles on the one event loop never promise the same GPUs twice. A placement that
does not fit now is not applied; it waits with a condition and an Event naming the numbers, and is reconciled
again as soon as a reservation is released or a node is added.

MIG slices are counted per profile: the pool's resource is ``nvidia.com/mig-<profile>`` (mixed strategy) or the
slice product's label (single strategy), and the nodes' allocatable count of it is the capacity.

On start the ledger is rebuilt from the Deployments the operator applied (their pod templates name the pool and
the devices), before the first reconcile: a restart never promises GPUs that are in use.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from inference_backend.api import InferenceBackendSpec
from inference_backend.decision import Decision
from inference_backend.facts import HardwareClass, Pool, capacity, pool_of, reserved
from inference_backend.facts.pools import overlap
from inference_backend.selection.hardware import usable_classes

Owner = tuple[str, str]


class GpuLedger:
    """Devices per pool reserved by each InferenceBackend, with running totals: the sum over the other backends
    costs O(pools), not a pass over every child (at 1,000 backends that pass was a quarter of the operator's CPU,
    measured with py-spy during bench/operator_scale.py)."""

    def __init__(self) -> None:
        self._by_owner: dict[Owner, tuple[Pool, int]] = {}
        self._totals: dict[Pool, int] = {}

    def set(self, owner: Owner, gpus: tuple[Pool, int] | None) -> bool:
        """Record what ``owner`` holds now (None or 0 devices: nothing, as when it is deleted). True when this
        frees devices that others may be waiting for (fewer in a pool, or another pool)."""
        old = self._by_owner.pop(owner, None)
        if old is not None:
            self._add(old, -1)
        if gpus is not None and gpus[1]:
            self._by_owner[owner] = gpus
            self._add(gpus, 1)
        else:
            gpus = None
        return old is not None and (gpus is None or gpus[0] != old[0] or gpus[1] < old[1])

    def _add(self, gpus: tuple[Pool, int], sign: int) -> None:
        pool, count = gpus
        total = self._totals.get(pool, 0) + sign * count
        if total:
            self._totals[pool] = total
        else:
            self._totals.pop(pool, None)

    def held(self, owner: Owner) -> tuple[Pool, int] | None:
        return self._by_owner.get(owner)

    def excluding(self, owner: Owner) -> dict[Pool, int]:
        """Devices per pool reserved by every backend but ``owner``."""
        used = dict(self._totals)
        own = self._by_owner.get(owner)
        if own is not None:
            used[own[0]] -= own[1]
            if not used[own[0]]:
                del used[own[0]]
        return used

    def holders(self, pools: Collection[Pool], exclude: Owner) -> list[tuple[Owner, int]]:
        """Who reserves devices in ``pools`` (largest first), for the message of a backend that waits."""
        out = [(o, g[1]) for o, g in self._by_owner.items() if g[0] in pools and o != exclude]
        return sorted(out, key=lambda item: (-item[1], item[0]))


@dataclass(frozen=True)
class Shortfall:
    product: str
    resource: str
    needed: int
    allocatable: int
    reserved: int
    holders: tuple[tuple[Owner, int], ...]
    where: str = ""
    """The identifying node label the pods select ("" when none does)."""

    @property
    def free(self) -> int:
        return max(self.allocatable - self.reserved, 0)

    def message(self, replicas: int, per_replica: int, surge: bool = False, most: int = 5) -> str:
        who = ", ".join(f"{ns}/{name} ({n})" for (ns, name), n in self.holders[:most])
        if len(self.holders) > most:
            who += f" and {len(self.holders) - most} more"
        nodes = f"the nodes it may use ({self.where})" if self.where else "the nodes it may use"
        count = (
            f"{replicas} replica(s) + 1 surge replica (spec.rollout.strategy surge)"
            if surge
            else f"{replicas} replica(s)"
        )
        return (
            f"waiting for capacity: needs {self.needed} {self.product} ({self.resource}; {count} x "
            f"{per_replica}); {self.allocatable} allocatable on {nodes}, {self.free} free, "
            f"{self.reserved} reserved by other InferenceBackends"
            + (f": {who}" if who else "")
            + "; it is placed as soon as enough are released or nodes are added"
        )


def wanted(decision: Decision | None, replicas: int) -> tuple[Pool, int] | None:
    """(pool, devices over all replicas) a satisfiable GPU decision reserves; None for CPU or no decision."""
    if decision is None or not decision.satisfiable or decision.placement is None:
        return None
    p = decision.placement
    if p.gpu is None or not p.gpus_per_replica:
        return None
    return pool_of(p.gpu), p.gpus_per_replica * max(replicas, 0)


def shortfall(
    spec: InferenceBackendSpec,
    decision: Decision,
    cluster: Mapping[HardwareClass, tuple[str, ...]],
    ledger: GpuLedger,
    owner: Owner,
    replicas: int | None = None,
) -> Shortfall | None:
    """The missing capacity for ``decision``'s placement (``replicas``, default spec.replicas), or None when its
    devices are free."""
    want = wanted(decision, spec.replicas if replicas is None else replicas)
    if want is None or decision.placement is None or decision.placement.gpu is None:
        return None
    pool, needed = want
    usable, _ = usable_classes(spec.hardware, cluster)
    classes = [(u.hardware, u.nodes) for u in usable]
    allocatable = capacity(pool, classes)
    others = ledger.excluding(owner)
    held = reserved(pool, others, classes)
    if allocatable - held >= needed:
        return None
    overlapping = {p for p in others if overlap(pool, p, classes)}
    where = ", ".join(f"{k}={v}" for k, v in pool[1])
    gpu = decision.placement.gpu
    return Shortfall(
        gpu.product, gpu.resource, needed, allocatable, held, tuple(ledger.holders(overlapping, owner)), where
    )
