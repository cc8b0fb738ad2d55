"""GPU capacity: reservations taken when a placement is decided, and the check that keeps them from overlapping.

The selection steers new placements away from products whose free GPUs cannot hold them, but when every fitting
product is full it still names the best one. Before a Deployment is created (or moved), the reconcile checks the
placement against what is reserved: allocatable GPUs of that product on the nodes the pod may use, minus the
reservations of every other InferenceBackend. Reservations are taken synchronously, right after the decision and
before any API call, so concurrent reconciles on the one event loop never promise the same GPUs twice. A placement
that does not fit now is not applied; it waits with a condition and an Event naming the numbers, and is reconciled
again as soon as a reservation is released or a node is added.

MIG slices are counted per profile: a slice's product names its profile, and the node's allocatable count of that
``nvidia.com/mig-<profile>`` resource is the capacity.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from inference_backend.api import InferenceBackendSpec
from inference_backend.decision import Decision
from inference_backend.facts import HardwareClass
from inference_backend.selection.hardware import usable_classes

Owner = tuple[str, str]


class GpuLedger:
    """GPUs per product reserved by each InferenceBackend, with running totals: the sum over the other backends
    costs O(products), not a pass over every child (at 1,000 backends that pass was a quarter of the operator's
    CPU, measured with py-spy during bench/operator_scale.py)."""

    def __init__(self) -> None:
        self._by_owner: dict[Owner, tuple[str, int]] = {}
        self._totals: dict[str, int] = {}

    def set(self, owner: Owner, gpus: tuple[str, int] | None) -> bool:
        """Record what ``owner`` holds now (None or 0 GPUs: nothing, as when it is deleted). True when this frees
        GPUs that others may be waiting for (fewer of a product, or another product)."""
        old = self._by_owner.pop(owner, None)
        if old is not None:
            self._add(old, -1)
        if gpus is not None and gpus[1]:
            self._by_owner[owner] = gpus
            self._add(gpus, 1)
        else:
            gpus = None
        return old is not None and (gpus is None or gpus[0] != old[0] or gpus[1] < old[1])

    def _add(self, gpus: tuple[str, int], sign: int) -> None:
        product, count = gpus
        total = self._totals.get(product, 0) + sign * count
        if total:
            self._totals[product] = total
        else:
            self._totals.pop(product, None)

    def held(self, owner: Owner) -> tuple[str, int] | None:
        return self._by_owner.get(owner)

    def excluding(self, owner: Owner) -> dict[str, int]:
        """GPUs per product reserved by every backend but ``owner``."""
        used = dict(self._totals)
        own = self._by_owner.get(owner)
        if own is not None:
            used[own[0]] -= own[1]
            if not used[own[0]]:
                del used[own[0]]
        return used

    def holders(self, product: str, exclude: Owner) -> list[tuple[Owner, int]]:
        """Who reserves GPUs of ``product`` (largest first), for the message of a backend that waits."""
        out = [(o, g[1]) for o, g in self._by_owner.items() if g[0] == product and o != exclude]
        return sorted(out, key=lambda item: (-item[1], item[0]))


@dataclass(frozen=True)
class Shortfall:
    product: str
    resource: str
    needed: int
    allocatable: int
    reserved: int
    holders: tuple[tuple[Owner, int], ...]

    @property
    def free(self) -> int:
        return max(self.allocatable - self.reserved, 0)

    def message(self, replicas: int, per_replica: int, most: int = 5) -> str:
        who = ", ".join(f"{ns}/{name} ({n})" for (ns, name), n in self.holders[:most])
        if len(self.holders) > most:
            who += f" and {len(self.holders) - most} more"
        return (f"waiting for capacity: needs {self.needed} {self.product} ({self.resource}; {replicas} replica(s) x "
                f"{per_replica}); {self.allocatable} allocatable on the nodes it may use, {self.free} free, "
                f"{self.reserved} reserved by other InferenceBackends" + (f": {who}" if who else "") +
                "; it is placed as soon as enough are released or nodes are added")  # fmt: skip


def wanted(decision: Decision | None, replicas: int) -> tuple[str, int] | None:
    """(product, GPUs over all replicas) a satisfiable GPU decision reserves; None for CPU or no decision."""
    if decision is None or not decision.satisfiable or decision.placement is None:
        return None
    p = decision.placement
    if p.gpu is None or not p.gpus_per_replica:
        return None
    return p.gpu.product, p.gpus_per_replica * max(replicas, 0)


def shortfall(spec: InferenceBackendSpec, decision: Decision, cluster: Mapping[HardwareClass, tuple[str, ...]],
              ledger: GpuLedger, owner: Owner) -> Shortfall | None:  # fmt: skip
    """The missing capacity for ``decision``'s placement, or None when its GPUs are free."""
    want = wanted(decision, spec.replicas)
    if want is None or decision.placement is None or decision.placement.gpu is None:
        return None
    product, needed = want
    resource = decision.placement.gpu.resource
    usable, _ = usable_classes(spec.hardware, cluster)
    allocatable = sum(g.count * u.nodes for u in usable for g in u.hardware.gpus
                      if g.product == product and g.resource == resource)  # fmt: skip
    reserved = ledger.excluding(owner).get(product, 0)
    if allocatable - reserved >= needed:
        return None
    return Shortfall(product, resource, needed, allocatable, reserved, tuple(ledger.holders(product, owner)))
