"""The operator on the real control plane: install through helm, run it with the chart's ServiceAccount, and check
what users see (kubectl get/describe), what it applies, and how it behaves on change, failure and restart.

The operator runs here as a local process (KWOK plays the kubelets, so no container runs) but with a kubeconfig
holding a token of the chart's ServiceAccount, so the chart's RBAC is what it is allowed to do.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from ib_testkit.audit import audit_event
from ib_testkit.cluster import (
    BAD_IMAGE,
    EXAMPLES,
    SYSTEM_NS,
    Operator,
    apply,
    example,
    get_json,
    ib,
    kubectl,
    tool,
    wait_phase,
)
from inference_backend.facts import hardware_class
from inference_backend.vocabulary import GROUP

ROOT = Path(__file__).resolve().parents[1]
CASES = [
    ("vllm-llama-3-1-8b.yaml", "vllm", ["--max-num-seqs", "64", "--enable-prefix-caching", "--speculative-config"]),
    ("vllm-llama-3-1-70b-tp.yaml", "vllm", ["--tensor-parallel-size", "4"]),
    ("tgi-mistral-7b.yaml", "tgi", ["--speculate", "3", "--port", "8000"]),
    ("llamacpp-cpu-gguf.yaml", "llamacpp", ["--spec-draft-n-max", "8", "-ctk", "q8_0"]),
    ("onnxruntime-phi-3.yaml", "onnxruntime", ["--batching", "dynamic", "--max-wait-ms", "10"]),
    ("pytorch-research.yaml", "pytorch", ["--batching", "dynamic", "--max-batch-size", "16"]),
]


@pytest.mark.parametrize(("file", "engine", "flags"), CASES, ids=[c[1] + "-" + c[0].split(".")[0] for c in CASES])
def test_example_reaches_ready(
    operator: Operator, ns: str, wait_until: Any, file: str, engine: str, flags: list[str]
) -> None:
    doc = example(file, ns)
    name = doc["metadata"]["name"]
    apply(doc)
    obj = wait_phase(wait_until, ns, name, "Ready")
    st = obj["status"]
    assert st["backend"] == engine and st["ready"] == "1/1"
    assert {c["type"]: c["status"] for c in st["conditions"]}.items() >= {
        "BackendSelected": "True",
        "Ready": "True",
    }.items()
    dep = get_json("deployment", name, "-n", ns)
    container = dep["spec"]["template"]["spec"]["containers"][0]
    args = container.get("args", [])
    for flag in flags:
        assert flag in args, (flag, args)
    ref = dep["metadata"]["ownerReferences"][0]
    assert (ref["kind"], ref["name"], ref["uid"]) == ("InferenceBackend", name, obj["metadata"]["uid"])
    assert "argocd.argoproj.io/instance" not in dep["metadata"].get("labels", {})
    assert operator.alive()


CPU_EXAMPLES = ["llamacpp-cpu-gguf.yaml", "onnxruntime-phi-3.yaml", "pytorch-research.yaml"]


def test_cpu_engines_run_in_a_restricted_namespace(operator: Operator, ns: str, wait_until: Any) -> None:
    """Every engine that runs on CPU renders pods that Pod Security "restricted" admits: the namespace enforces
    it, the ReplicaSets create their pods, and the backends become Ready."""
    kubectl(
        "label",
        "namespace",
        ns,
        "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/enforce-version=latest",
    )
    engines = set()
    for file in CPU_EXAMPLES:  # one at a time: each sized for the whole CPU node
        doc = example(file, ns)
        doc["spec"]["hardware"]["accelerator"] = "cpu"
        doc["spec"]["hardware"].pop("nodeSelector", None)
        name = doc["metadata"]["name"]
        apply(doc)
        engines.add(wait_phase(wait_until, ns, name, "Ready")["status"]["backend"])

        def pods(n: str = name) -> list[dict[str, Any]]:
            return [p for p in get_json("pods", "-n", ns)["items"] if p["metadata"]["name"].startswith(n + "-")]

        (pod,) = pods()
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
        kubectl("delete", "ib", name, "-n", ns, "--wait=true")
        wait_until(f"{name}'s pods gone", lambda: not pods(), 60)
    assert engines == {"llamacpp", "onnxruntime", "pytorch"}, engines


def test_get_describe_and_delete(operator: Operator, ns: str, wait_until: Any) -> None:
    doc = example("vllm-llama-3-1-8b.yaml", ns)
    apply(doc)
    wait_phase(wait_until, ns, "llama-chat", "Ready")
    table = kubectl("get", "ib", "-n", ns)
    header = table.splitlines()[0].split()
    assert header == ["NAME", "BACKEND", "PHASE", "READY", "ENDPOINT", "AGE"]
    assert "vllm" in table and "Ready" in table and "1/1" in table and f"http://llama-chat.{ns}.svc:8000" in table
    described = kubectl("describe", "ib", "llama-chat", "-n", ns)
    for text in ("Reasons:", "chosen: vllm on", "BackendSelected", "Events:", "Selected", "object(s) applied"):
        assert text in described, text
    explained = kubectl("explain", "ib.spec.kvCache.memoryFraction")
    assert "Share of accelerator (or node) memory" in explained and "<number>" in explained
    assert "draft" in kubectl("explain", "inferencebackend.spec.speculativeDecoding")
    kubectl("delete", "ib", "llama-chat", "-n", ns)
    gone = lambda: not kubectl("get", "deployment,service", "-n", ns, "-o", "name").strip()  # noqa: E731
    wait_until("children garbage-collected", gone, timeout=60)


def test_batching_change_rolls_the_deployment(operator: Operator, ns: str, wait_until: Any) -> None:
    doc = example("pytorch-research.yaml", ns)
    apply(doc)
    wait_phase(wait_until, ns, "research-gpt", "Ready")
    before = get_json("deployment", "research-gpt", "-n", ns)["spec"]["template"]["metadata"]["annotations"]
    doc["spec"]["batching"]["maxBatchSize"] = 4
    apply(doc)
    after = wait_until(
        "a new spec hash",
        lambda: (
            (a := get_json("deployment", "research-gpt", "-n", ns)["spec"]["template"]["metadata"]["annotations"])[
                f"{GROUP}/spec-hash"
            ]
            != before[f"{GROUP}/spec-hash"]
            and a
        ),
    )
    assert after[f"{GROUP}/spec-hash"] != before[f"{GROUP}/spec-hash"]
    args = get_json("deployment", "research-gpt", "-n", ns)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--max-batch-size") + 1] == "4"
    assert ib(ns, "research-gpt")["status"]["specHash"] == after[f"{GROUP}/spec-hash"]


def test_unsatisfiable_update_keeps_serving(operator: Operator, ns: str, wait_until: Any) -> None:
    doc = example("tgi-mistral-7b.yaml", ns)
    apply(doc)
    wait_phase(wait_until, ns, "mistral-tgi", "Ready")
    dep_before = get_json("deployment", "mistral-tgi", "-n", ns)
    doc["spec"]["model"]["parameters"] = "400B"
    apply(doc)
    obj = wait_phase(wait_until, ns, "mistral-tgi", "Degraded")
    conds = {c["type"]: c for c in obj["status"]["conditions"]}
    # 400B in bf16 outgrows one 8x H100 node (memory, and its 450 GiB of disk for the weights) and TGI does not run a
    # replica across nodes: the Fits message gives TGI's reasons.
    fits = conds["Fits"]["message"]
    assert conds["BackendSelected"]["status"] == "False" and conds["Fits"]["status"] == "False"
    assert "tgi: " in fits and ("does not fit" in fits or "does not run one replica across nodes" in fits), fits
    assert conds["Ready"]["status"] == "True" and obj["status"]["backend"] == "tgi"
    dep = get_json("deployment", "mistral-tgi", "-n", ns)
    assert dep["metadata"]["generation"] == dep_before["metadata"]["generation"], "the serving Deployment is untouched"
    assert {c["type"]: c["status"] for c in dep["status"]["conditions"]}["Available"] == "True"
    events = kubectl("get", "events", "-n", ns, "--field-selector", "involvedObject.name=mistral-tgi")
    assert "Unsatisfiable" in events


def test_backends_applied_together_never_overcommit_gpus(operator: Operator, ns: str, wait_until: Any) -> None:
    """Three 1-GPU backends applied at once (one apply, as an Argo CD sync does) to the one A10G: one is placed,
    two wait saying why (the numbers and who holds the GPU), and one of them starts once the GPU is released."""
    # Earlier tests' namespaces are deleted asynchronously; their backends hold GPUs until they are gone.
    others = lambda: not [i for i in get_json("ib", "-A")["items"] if i["metadata"]["namespace"] != ns]  # noqa: E731
    wait_until("earlier tests' InferenceBackends deleted", others, timeout=120)
    docs = []
    for i in range(3):
        doc = example("pytorch-research.yaml", ns)
        doc["metadata"]["name"] = f"contend-{i}"
        doc["spec"]["hardware"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-A10G"}
        docs.append(doc)
    names = [d["metadata"]["name"] for d in docs]
    kubectl("apply", "--server-side", "--field-manager=e2e", "-f", "-", stdin=yaml.safe_dump_all(docs))

    def phases() -> dict[str, str]:
        return {n: (ib(ns, n).get("status") or {}).get("phase", "") for n in names}

    seen: list[dict[str, str]] = []

    def settled() -> dict[str, str] | None:
        p = phases()
        seen[:] = [p]
        return p if sorted(p.values()) == ["Pending", "Pending", "Ready"] else None

    try:
        first = wait_until("one Ready, two Pending", settled, timeout=60)
    except BaseException:
        print("phases:", seen, kubectl("get", "ib", "-A"), kubectl("describe", "ib", "-n", ns))
        raise
    deployments = [d["metadata"]["name"] for d in get_json("deployments", "-n", ns)["items"]]
    placed = next(n for n, p in first.items() if p == "Ready")
    assert deployments == [placed], deployments
    waiting = [n for n, p in first.items() if p == "Pending"]
    described = kubectl("describe", "ib", waiting[0], "-n", ns)
    for text in ("InsufficientCapacity", "needs 1 NVIDIA-A10G", "0 free", f"{ns}/{placed} (1)"):
        assert text in described, (text, described)
    kubectl("delete", "ib", placed, "-n", ns)
    names.remove(placed)
    started = time.monotonic()
    # The operator's part: a waiting backend's Deployment is applied as soon as the release is seen.
    wait_until(
        "a waiting backend's Deployment applied once the GPU is released",
        lambda: any(d["metadata"]["name"] in names for d in get_json("deployments", "-n", ns)["items"]) or None,
        timeout=15,
    )
    applied = time.monotonic() - started
    # The cluster's part: Ready, and the deleted backend's Deployment garbage-collected. On a control plane that
    # has just started, the garbage collector resolves InferenceBackend owners only after its discovery resync
    # (every 30 s), so this can take up to a minute there.
    after = wait_until(
        "a waiting backend starts once the GPU is released",
        lambda: sorted((p := phases()).values()) == ["Pending", "Ready"] and p,
        timeout=90,
    )
    print(f"waiting backend applied {applied:.1f} s, Ready {time.monotonic() - started:.1f} s after the release")
    now_placed = next(n for n, p in after.items() if p == "Ready")
    # Its placement is news when it lands: a Selected Event, not only the InsufficientCapacity one from before.
    events = kubectl("get", "events", "-n", ns, "--field-selector", f"involvedObject.name={now_placed},reason=Selected")
    assert "object(s) applied" in events, events
    wait_until(
        "only the placed backend's Deployment left",
        lambda: [d["metadata"]["name"] for d in get_json("deployments", "-n", ns)["items"]] == [now_placed],
        timeout=60,
    )


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"kvCache": {"memoryFraction": 1.5}}, "spec.kvCache.memoryFraction"),
        ({"speculativeDecoding": {"method": "draft"}}, "draftModelRef is required when method is draft"),
        (
            {"speculativeDecoding": {"method": "ngram", "numSpeculativeTokens": 40}},
            "spec.speculativeDecoding.numSpeculativeTokens",
        ),
        ({"model": {"parameters": "8B"}}, "set model.modelRef or model.uri"),
        ({"backend": "tensorrt-llm"}, "spec.backend"),
    ],
)
def test_invalid_manifest_refused_at_admission(operator: Operator, ns: str, patch: dict[str, Any], field: str) -> None:
    doc = example("pytorch-research.yaml", ns)
    doc["metadata"]["name"] = "bad"
    doc["spec"].update(patch)
    out = apply(doc, check=False)
    assert "Invalid" in out or "invalid" in out, out
    assert field in out, out


def test_no_spec_diff_after_reconcile(operator: Operator, ns: str, wait_until: Any, tmp_path: Path) -> None:
    doc = example("onnxruntime-phi-3.yaml", ns)
    apply(doc)
    wait_phase(wait_until, ns, "phi3-onnx", "Ready")
    f = tmp_path / "ib.yaml"
    f.write_text(yaml.safe_dump(doc))
    res = subprocess.run(
        [tool("kubectl"), "diff", "--server-side", "--field-manager=e2e", "-f", str(f)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr


def _audit_writes(audit: Path, since: float, user: str) -> list[dict[str, Any]]:
    out = []
    text = audit.read_text(errors="replace")
    lines = text.splitlines() if text.endswith("\n") else text.splitlines()[:-1]  # the last may be half-written
    for line in lines:
        ev = audit_event(line)
        if ev is None:
            continue
        if ev.get("stage") != "ResponseComplete" or ev.get("verb") not in ("create", "update", "patch", "delete"):
            continue
        if user not in ev.get("user", {}).get("username", ""):
            continue
        stamp = ev.get("requestReceivedTimestamp", "")
        t = time.mktime(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
        if t >= since:
            out.append(ev)
    return out


def test_restart_causes_no_writes(operator: Operator, ns: str, wait_until: Any, e2e_dir: Path) -> None:
    doc = example("llamacpp-cpu-gguf.yaml", ns)
    apply(doc)
    wait_phase(wait_until, ns, "llama-edge", "Ready")
    time.sleep(5)  # let deployment events settle
    operator.stop()
    since = time.time()
    operator.start()
    time.sleep(15)  # resume handlers, the initial listing of every watched kind
    # Earlier tests' namespaces may still be terminating: their objects are changing, not unchanged.
    active = {n["metadata"]["name"] for n in get_json("namespaces")["items"] if n["status"]["phase"] == "Active"}
    writes = [
        e
        for e in _audit_writes(e2e_dir / "audit.log", since, f"system:serviceaccount:{SYSTEM_NS}:")
        if (e.get("objectRef") or {}).get("resource") != "clusterkopfpeerings"
        and (e.get("objectRef") or {}).get("namespace", ns) in active
    ]
    assert writes == [], [(e["verb"], e["objectRef"]) for e in writes]
    assert ib(ns, "llama-edge")["status"]["phase"] == "Ready"


def test_gpu_nodes_removed_reselects_or_degrades(operator: Operator, ns: str, wait_until: Any) -> None:
    doc = example("pytorch-research.yaml", ns)
    apply(doc)
    obj = wait_phase(wait_until, ns, "research-gpt", "Ready")
    gpu = obj["status"]["decision"]["placement"]["gpuProduct"]
    assert gpu, obj["status"]["decision"]
    # every node the operator identifies as that product, by any source (GFD labels, instance type, ...)
    nodes = [n for n in get_json("nodes")["items"] if any(g.product == gpu for g in hardware_class(n)[1].gpus)]
    saved = [{k: v for k, v in n.items() if k in ("apiVersion", "kind", "metadata", "spec", "status")} for n in nodes]
    try:
        for n in nodes:
            kubectl("cordon", n["metadata"]["name"])

        def moved() -> dict[str, Any] | None:
            st = ib(ns, "research-gpt")["status"]
            placement = (st.get("decision") or {}).get("placement") or {}
            return st if placement.get("gpuProduct") != gpu else None

        st = wait_until("re-selection away from the cordoned GPUs", moved, timeout=60)
        new_gpu = st["decision"]["placement"]["gpuProduct"]
        assert st["phase"] in ("Deploying", "Ready") and new_gpu != gpu
        # The new placement's node selector (GFD's product label, or the instance type where a node of that product
        # has no GFD labels) is the Deployment's, and the status names that selector alone (no key of the old one).
        selector = st["decision"]["placement"]["nodeSelector"]
        assert selector.get("nvidia.com/gpu.product") in (None, new_gpu), selector

        def follows() -> bool:
            placed = ib(ns, "research-gpt")["status"]["decision"]["placement"]["nodeSelector"]
            template = get_json("deployment", "research-gpt", "-n", ns)["spec"]["template"]["spec"]
            return bool(placed) and template.get("nodeSelector") == placed

        wait_until("the Deployment follows the new placement", follows)
        events = kubectl("get", "events", "-n", ns, "--field-selector", "involvedObject.name=research-gpt")
        assert f"pytorch on 1x {new_gpu}" in events
    finally:
        for n in saved:
            kubectl("uncordon", n["metadata"]["name"])


def test_leader_election_one_replica_works(
    operator: Operator, sa_kubeconfig: str, ns: str, wait_until: Any, e2e_dir: Path
) -> None:
    """A second replica in the same peering waits while the first (higher priority) works, and takes over when
    the first goes away."""
    standby_log = e2e_dir / "logs" / "operator-standby.log"
    standby_log.write_text("")
    standby = Operator(sa_kubeconfig, standby_log)
    standby.start(priority=0)  # below any random priority (>= 1) of the fixture's operator
    try:
        # Both replicas announce themselves in the peering object; the lower priority one stays paused.
        peers = lambda: len(get_json("clusterkopfpeering", "inference-backend").get("status") or {}) >= 2  # noqa: E731
        wait_until("both replicas in the peering", peers, 60)
        apply(example("pytorch-research.yaml", ns))
        wait_phase(wait_until, ns, "research-gpt", "Ready")
        assert "research-gpt" not in standby_log.read_text(), "the paused replica wrote nothing"
        operator.stop()
        wait_until("the standby resumes", lambda: "Resuming operations" in standby_log.read_text(), 90)
        apply(example("onnxruntime-phi-3.yaml", ns))
        wait_phase(wait_until, ns, "phi3-onnx", "Ready")
    finally:
        standby.stop()
        operator.start()


def _ready_condition_within(wait_until: Any, namespace: str, name: str, reason: str, text: str) -> str:
    """Polls ``kubectl describe ib`` until the Ready condition has ``reason`` and the output has ``text``."""

    def check() -> str | None:
        conditions = {c["type"]: c for c in (ib(namespace, name).get("status") or {}).get("conditions") or []}
        if (conditions.get("Ready") or {}).get("reason") != reason:
            return None
        described = kubectl("describe", "ib", name, "-n", namespace)
        return described if text in described else None

    return wait_until(f"{namespace}/{name} Ready reason {reason} with {text!r}", check, timeout=30)  # type: ignore[no-any-return]


def test_missing_pvc_shows_the_schedulers_message(operator: Operator, namespace: str, wait_until: Any) -> None:
    """A backend whose weights are on a claim that does not exist: the scheduler's message reaches the status
    and an Event within 30 s of the apply, and the phase stays Deploying."""
    kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "models.yaml"))
    doc = example("pytorch-research.yaml", namespace)
    doc["spec"]["model"]["uri"] = "pvc://no-such-claim/gpt-350m"
    apply(doc)
    started = time.monotonic()
    described = _ready_condition_within(
        wait_until, namespace, "research-gpt", "Unschedulable", 'persistentvolumeclaim "no-such-claim" not found'
    )
    print(f"missing PVC shown after {time.monotonic() - started:.1f} s")
    assert "Deploying" in described
    events = wait_until(
        "the Warning Event",
        lambda: (
            "Unschedulable"
            in (e := kubectl("get", "events", "-n", namespace, "--field-selector", "involvedObject.name=research-gpt"))
            and e
        ),
        timeout=10,
    )
    assert events.count("Unschedulable") == 1, events


def test_a_cpu_request_no_node_can_hold_is_refused_naming_the_figures(
    operator: Operator, ns: str, wait_until: Any
) -> None:
    """More CPU than any node allocates (spec.resources overrides the derived requests): the selection leaves every
    node out, naming the pod's request and the node's allocatable (issue 30: nodes too small for the pod are excluded
    with a reason), instead of rendering a pod that would stay Pending. A pod the real scheduler cannot place, with
    the Ready reason Unschedulable, is e2e/test_unschedulable.py's."""
    doc = example("pytorch-research.yaml", ns)
    doc["spec"]["resources"] = {"requests": {"cpu": "5000"}, "limits": {"cpu": "5000"}}
    apply(doc)
    obj = wait_phase(wait_until, ns, "research-gpt", "Failed")
    conds = {c["type"]: c for c in obj["status"]["conditions"]}
    assert conds["Ready"]["reason"] == "Unsatisfiable", conds["Ready"]
    assert "the pod requests 5000 CPU" in conds["Fits"]["message"], conds["Fits"]
    assert "the node allocates" in conds["Fits"]["message"], conds["Fits"]
    assert kubectl("get", "deployments", "-n", ns, "-o", "name").strip() == "", "nothing is rendered"


def test_bad_image_shows_image_pull_backoff(operator: Operator, ns: str, wait_until: Any) -> None:
    """An engine image that cannot be pulled (KWOK reports the kubelet's ImagePullBackOff for this one image, see
    e2e/kwok/stages.yaml): the Ready condition names the image within 30 s."""
    doc = example("pytorch-research.yaml", ns)
    doc["spec"]["engine"] = {"image": BAD_IMAGE}
    apply(doc)
    started = time.monotonic()
    _ready_condition_within(wait_until, ns, "research-gpt", "ImagePullBackOff", f'cannot pull image "{BAD_IMAGE}"')
    print(f"bad image shown after {time.monotonic() - started:.1f} s")
