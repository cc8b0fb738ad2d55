"""Re-selection after the unschedulable grace period (issue 14 item 2), with the real scheduler: the L4 node's only
GPU is taken by a pod the operator does not know about (another team's job), so the backend's pod on the L4 stays
Pending ("Insufficient nvidia.com/gpu"). Past the grace period (10 s here, 300 s by default) the operator selects
again without the L4, says why in the reasons and status.decision.avoided, and the backend becomes Ready on the
A10G. The grace period comes from the operator's environment (IB_UNSCHEDULABLE_GRACE_SECONDS), as the chart sets it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ib_testkit.cluster import KWOK_TOLERATION, Operator, apply, example, get_json, ib, kubectl, wait_phase

GRACE = 10


@pytest.fixture(scope="module")
def impatient_operator(sa_kubeconfig: str, e2e_dir: Path) -> Iterator[Operator]:
    op = Operator(sa_kubeconfig, e2e_dir / "logs" / "operator.log")
    op.start(env={"IB_UNSCHEDULABLE_GRACE_SECONDS": str(GRACE)})
    yield op
    op.stop()


def squat_l4(namespace: str) -> None:
    """A pod the operator did not make, holding the L4 node's GPU (KWOK marks it Running)."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "other-team-job", "namespace": namespace},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": "gpu-l4"},
            "tolerations": [KWOK_TOLERATION],
            "containers": [{"name": "job", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
    }
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump(pod))


def test_a_placement_unschedulable_past_the_grace_period_moves_and_says_why(
    impatient_operator: Operator, ns: str, wait_until: Any
) -> None:
    others = lambda: not [i for i in get_json("ib", "-A")["items"] if i["metadata"]["namespace"] != ns]  # noqa: E731
    wait_until("earlier tests' InferenceBackends deleted", others, timeout=120)
    squat_l4(ns)
    wait_until(
        "the other team's pod runs on the L4",
        lambda: get_json("pod", "other-team-job", "-n", ns)["status"].get("phase") == "Running",
        timeout=60,
    )
    doc = example("pytorch-research.yaml", ns)
    doc["metadata"]["name"] = "moving"
    doc["spec"]["hardware"]["gpuProducts"] = ["NVIDIA-L4", "NVIDIA-A10G"]
    doc["spec"]["hardware"].pop("nodeSelector", None)
    started = time.monotonic()
    apply(doc)

    def first_on_l4() -> dict[str, Any] | None:
        st = ib(ns, "moving").get("status") or {}
        placement = (st.get("decision") or {}).get("placement") or {}
        return st if placement.get("gpuProduct") == "NVIDIA-L4" else None

    first = wait_until(
        "placed on the L4 first (the ledger does not know the other team's pod)", first_on_l4, timeout=60
    )
    assert "avoided" not in first["decision"]
    pending = wait_until(
        "its pod Unschedulable in the status",
        lambda: (
            (c := next((c for c in ib(ns, "moving")["status"]["conditions"] if c["type"] == "Ready"), None))
            and c["reason"] == "Unschedulable"
            and c
        ),
        timeout=60,
    )
    assert "Insufficient nvidia.com/gpu" in pending["message"]
    obj = wait_phase(wait_until, ns, "moving", "Ready", timeout=120)
    moved = time.monotonic() - started
    decision = obj["status"]["decision"]
    assert decision["placement"]["gpuProduct"] == "NVIDIA-A10G"
    avoided = decision["avoided"]
    assert avoided["placement"]["gpuProduct"] == "NVIDIA-L4" and avoided["backend"] == obj["status"]["backend"]
    assert f"stayed unschedulable past the grace period ({GRACE} s)" in avoided["reason"]
    assert "Insufficient nvidia.com/gpu" in avoided["reason"]
    assert any("another placement is selected" in r for r in decision["reasons"])
    dep = get_json("deployment", "moving", "-n", ns)
    selector = dep["spec"]["template"]["spec"]["nodeSelector"]
    assert "NVIDIA-L4" not in selector.values(), selector
    described = kubectl("describe", "ib", "moving", "-n", ns)
    assert "stayed unschedulable past the grace period" in described
    print(f"moved off the full L4 and Ready on the A10G {moved:.1f} s after the apply (grace {GRACE} s)")
    assert moved >= GRACE, "never before the grace period"
