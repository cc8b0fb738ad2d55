"""hf:// from a Hub mirror on a real node (e2e/up --real-nodes): the local Hub server (ib_testkit.stores.HubServer,
the Hub's HTTP API that huggingface_hub uses) listens on this host's bridge address with a private repository of the
tiny ONNX model; the backend's credentials Secret holds HF_TOKEN and HF_ENDPOINT (the optional key that points every
hf:// reader the operator renders at a mirror). The real fetch init container (the operator image) downloads the
repository from that endpoint with the token, and the ONNX Runtime server serves it through its Service.

Skipped, saying why, without a real node (the fixtures of e2e/conftest.py).
"""

from __future__ import annotations

import uuid
from typing import Any

from ib_testkit.cluster import Operator, apply, get_json, kubectl, wait_phase
from ib_testkit.real_nodes import TINY_FACTS, TinyModels, completion, files_under, gateway, real_backend
from ib_testkit.stores import HubRepo, HubServer

REPO = "ib-e2e/tiny-onnx"


def test_hf_uri_from_a_hub_mirror(
    operator: Operator, rns: str, node: dict[str, Any], models: TinyModels, wait_until: Any
) -> None:
    token = f"hf_e2e_{uuid.uuid4().hex[:12]}"
    hub = HubServer(
        repos={REPO: HubRepo(files=dict(files_under(models.onnx)), private=True)}, token=token, host=gateway(node)
    ).start()
    try:
        kubectl(
            "create",
            "secret",
            "generic",
            "hub",
            "-n",
            rns,
            f"--from-literal=HF_TOKEN={token}",
            f"--from-literal=HF_ENDPOINT={hub.endpoint}",
        )
        model = {"uri": f"hf://{REPO}", "format": "onnx", "credentialsSecret": "hub", **TINY_FACTS}
        doc = real_backend("mirror", model, backend="onnxruntime")
        doc["metadata"]["namespace"] = rns
        apply(doc)
        wait_phase(wait_until, rns, "mirror", "Ready", timeout=600)
        pod = get_json("pods", "-n", rns, "-l", "app.kubernetes.io/instance=mirror")["items"][0]
        assert pod["status"]["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
        gets = [r for r in hub.requests if r.method == "GET" and "/resolve/" in r.path]
        fetched = {r.path.rsplit("/", 1)[-1] for r in gets}
        print(f"\nhf:// from the mirror at {hub.endpoint}: {len(hub.requests)} requests, files {sorted(fetched)}")
        assert "model.onnx" in fetched, [r.path for r in hub.requests]
        assert all(r.headers.get("authorization") == f"Bearer {token}" for r in gets), "the token went with each GET"
        svc = get_json("service", "mirror", "-n", rns)
        out = completion(f"http://{svc['spec']['clusterIP']}:8000", "mirror", "the quick brown fox", 4)
        assert out["usage"]["completion_tokens"] == 4, out
    finally:
        hub.stop()
