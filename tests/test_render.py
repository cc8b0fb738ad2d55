"""render(): determinism, spec hash, objects, and every docs example against every node list."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml
from ib_testkit.golden import INPUTS, ROOT, decide
from inference_backend.api import InferenceBackend
from inference_backend.cli import main
from inference_backend.facts import group_nodes
from inference_backend.manifests import load, registry
from inference_backend.render import object_names, render, render_result, to_yaml
from inference_backend.selection import select
from inference_backend.vocabulary import SPEC_HASH

EXAMPLES = sorted(p for p in (ROOT / "docs" / "examples").glob("*.yaml") if p.name != "models.yaml")
NODE_LISTS = sorted((ROOT / "docs" / "examples" / "nodes").glob("*.yaml"))
MODELS = load(ROOT / "docs" / "examples" / "models.yaml")[1]


def _render_yaml(path: Path, nodes: list[dict[str, object]] | None = None) -> str:
    ib, decision = decide(path)
    assert isinstance(ib, InferenceBackend)
    if nodes is not None:
        decision = select(ib.spec, group_nodes(nodes), registry(MODELS + load(path)[1], "default"))
    return to_yaml(render(ib, decision))


def test_same_input_byte_identical() -> None:
    for path in sorted(INPUTS.glob("*.yaml")):
        assert _render_yaml(path) == _render_yaml(path)


def test_node_order_does_not_matter() -> None:
    path = INPUTS / "vllm-gpu-draft.yaml"
    nodes = load(ROOT / "docs" / "examples" / "nodes" / "mixed.yaml")[2]
    expected = _render_yaml(path, nodes)
    rng = random.Random(7)
    for _ in range(5):
        shuffled = list(nodes)
        rng.shuffle(shuffled)
        assert _render_yaml(path, shuffled) == expected


def _hash(ib: InferenceBackend) -> str:
    _, decision = decide(INPUTS / "vllm-gpu-draft.yaml")
    decision = select(
        ib.spec, group_nodes(load(ROOT / "docs/examples/nodes/mixed.yaml")[2]), registry(MODELS, "default")
    )
    return render_result(ib, decision).spec_hash


def test_spec_hash_changes_with_batching_not_with_status_or_labels() -> None:
    ib, _ = decide(INPUTS / "vllm-gpu-draft.yaml")
    assert isinstance(ib, InferenceBackend)
    base = _hash(ib)
    batching = ib.spec.batching.model_copy(update={"max_batch_size": 32})
    assert _hash(ib.model_copy(update={"spec": ib.spec.model_copy(update={"batching": batching})})) != base
    meta = ib.metadata.model_copy(update={"labels": {"team": "a"}, "annotations": {"x": "y"}})
    assert _hash(ib.model_copy(update={"metadata": meta})) == base
    status = {"phase": "Ready", "observedGeneration": 9, "backend": "vllm"}
    assert _hash(InferenceBackend.model_validate({**ib.wire(), "status": status})) == base


def test_hash_annotation_matches_template() -> None:
    ib, decision = decide(INPUTS / "vllm-tp4.yaml")
    assert isinstance(ib, InferenceBackend)
    result = render_result(ib, decision)
    deploy = result.objects[0]
    assert deploy["spec"]["template"]["metadata"]["annotations"][SPEC_HASH] == result.spec_hash


def test_objects_pdb_strategy_labels() -> None:
    ib, decision = decide(INPUTS / "vllm-replicas-noprefix.yaml")
    assert isinstance(ib, InferenceBackend)
    objs = render(ib, decision)
    assert [o["kind"] for o in objs] == ["Deployment", "Service", "PodDisruptionBudget"]
    assert objs[2]["spec"]["maxUnavailable"] == 1
    names = {k: v for k, v in object_names(ib).items() if k != "LeaderWorkerSet"}
    assert {o["metadata"]["name"] for o in objs} == set(names.values())
    assert all("ownerReferences" not in o["metadata"] for o in objs)
    d = objs[0]
    assert d["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    pod = d["spec"]["template"]
    for key in ("name", "instance", "component", "managed-by", "part-of"):
        assert f"app.kubernetes.io/{key}" in pod["metadata"]["labels"]
    assert pod["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    # 3 replicas do not fit the single A10G, so the H100 node (8 GPUs) is chosen
    h100 = "NVIDIA-H100-80GB-HBM3"
    assert pod["spec"]["nodeSelector"] == {"kubernetes.io/arch": "amd64", "nvidia.com/gpu.product": h100}
    assert pod["spec"]["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    cpu_ib, cpu_decision = decide(INPUTS / "llamacpp-cpu-draft.yaml")
    assert isinstance(cpu_ib, InferenceBackend)
    cpu = render(cpu_ib, cpu_decision)
    assert "strategy" not in cpu[0]["spec"] and len(cpu) == 2
    assert "nodeSelector" not in cpu[0]["spec"]["template"]["spec"]


def test_tgi_metrics_on_the_api_port() -> None:
    """TGI's router serves /metrics on the API port; --prometheus-port is not rendered (see engines/tgi.py)."""
    ib, decision = decide(INPUTS / "tgi-ngram.yaml")
    assert isinstance(ib, InferenceBackend)
    objs = render(ib, decision)
    assert objs[0]["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == "8000"
    assert [p["port"] for p in objs[1]["spec"]["ports"]] == [8000]


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
@pytest.mark.parametrize("nodes", NODE_LISTS, ids=[p.stem for p in NODE_LISTS])
def test_every_example_renders_where_satisfiable(
    example: Path, nodes: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["-f", str(example), "--nodes", str(nodes), "--models", str(ROOT / "docs/examples/models.yaml")]
    assert main(["select", "-o", "json", *args]) in (0, 3)
    satisfiable = '"satisfiable": true' in capsys.readouterr().out
    code = main(["render", *args])
    out = capsys.readouterr()
    if satisfiable:
        assert code == 0
        docs = list(yaml.safe_load_all(out.out))
        assert [d["kind"] for d in docs][:2] == ["Deployment", "Service"]
    else:
        assert code == 3 and out.out == "" and "NOT SATISFIABLE" in out.err


def test_render_invalid_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = (INPUTS / "vllm-overrides.yaml").read_text().replace("--trust-remote-code", "--max-model-len=10")
    (tmp_path / "ib.yaml").write_text(bad)
    code = main(["render", "-f", str(tmp_path / "ib.yaml"), "--nodes", str(ROOT / "docs/examples/nodes/mixed.yaml")])
    assert code == 2
    assert "spec.engine.extraArgs: --max-model-len is set by the operator from spec.model.contextLength" in (
        capsys.readouterr().err
    )


def test_engine_pods_carry_scrape_annotations_unless_the_operator_is_told_a_pod_monitor_scrapes_them() -> None:
    from inference_backend import autoscaling

    ib, decision = decide(INPUTS / "vllm-awq-l4.yaml")
    on = render(ib, decision)
    off = render(ib, decision, scaling=autoscaling.Settings(scrape_annotations=False))
    (dep_on,) = [o for o in on if o["kind"] == "Deployment"]
    (dep_off,) = [o for o in off if o["kind"] == "Deployment"]
    assert dep_on["spec"]["template"]["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    assert not any(k.startswith("prometheus.io/") for k in dep_off["spec"]["template"]["metadata"]["annotations"])
    assert SPEC_HASH in dep_off["spec"]["template"]["metadata"]["annotations"]
