"""Multi-node LeaderWorkerSets (tests/data/output/*-405b-multinode.yaml): every pod of a group, leader and each
worker, with its args expanded as the kubelet expands them from the variables LWS v0.7.0 sets
(ib_testkit.rendered.lws_env), is accepted by its engine's own parser, and the engine's own arithmetic agrees with
the pod: vLLM 0.33.0's ParallelConfig gives each node as many GPUs as the pod requests and the pod's index as its
node rank (hack/vllm_parse_args.py check_parallel); SGLang 0.5.23 resolves and checks the same rank and sizes
(hack/sglang_parse_args.py: its parallel-sizes-vs-nodes validation included).
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from ib_testkit.rendered import GOLDEN_OUTPUTS, expand, lws_env

from tests.contracts.sglang import SglangArgsRejected, parse_sglang_args_many
from tests.contracts.vllm import VllmArgsRejected, parse_vllm_args, parse_vllm_args_many


def _lws(engine: str) -> dict[str, Any]:
    path = GOLDEN_OUTPUTS / f"{engine}-405b-multinode.yaml"
    return next(d for d in yaml.safe_load_all(path.read_text()) if d and d["kind"] == "LeaderWorkerSet")


def _pods(lws: dict[str, Any]) -> list[tuple[int, dict[str, Any], list[str]]]:
    """(index in the group, container, expanded args) of every pod of group 0."""
    tpl = lws["spec"]["leaderWorkerTemplate"]
    out = []
    for index in range(tpl["size"]):
        pod = tpl["leaderTemplate"] if index == 0 else tpl["workerTemplate"]
        (c,) = pod["spec"]["containers"]
        out.append((index, c, expand([str(a) for a in c["args"]], lws_env(lws, index))))
    return out


def _gpus(container: dict[str, Any]) -> int:
    return int(container["resources"]["limits"]["nvidia.com/gpu"])


@pytest.mark.slow
def test_vllm_leader_and_workers_are_one_distributed_group() -> None:
    lws = _lws("vllm")
    pods = _pods(lws)
    results = parse_vllm_args_many([args for _, _, args in pods])
    size = lws["spec"]["leaderWorkerTemplate"]["size"]
    leader = lws_env(lws, 0)["LWS_LEADER_ADDRESS"]
    for (index, container, _), r in zip(pods, results, strict=True):
        assert not isinstance(r, VllmArgsRejected), str(r)
        par = r["checks"]["parallel"]
        assert par["nnodes"] == size and par["node_rank"] == index == par["node_rank_within_dp"]
        assert par["local_world_size"] == _gpus(container), "each node runs as many ranks as the pod has GPUs"
        assert par["world_size"] == size * _gpus(container)
        assert (par["distributed_executor_backend"], par["master_addr"]) == ("mp", leader)
        assert r["args"]["headless"] is (index > 0), "only the leader runs the API server"


@pytest.mark.slow
def test_vllm_rejects_a_worker_rank_outside_the_group() -> None:
    """The check is vLLM's and can fail: a rank past the group (as a wrong LWS_WORKER_INDEX would give) is refused."""
    lws = _lws("vllm")
    size = lws["spec"]["leaderWorkerTemplate"]["size"]
    _, container, _ = _pods(lws)[-1]
    args = expand([str(a) for a in container["args"]], lws_env(lws, size))
    with pytest.raises(VllmArgsRejected, match="node-rank"):
        parse_vllm_args(args)


@pytest.mark.slow
def test_sglang_leader_and_workers_are_one_distributed_group() -> None:
    lws = _lws("sglang")
    pods = _pods(lws)
    results = parse_sglang_args_many([args for _, _, args in pods])
    size = lws["spec"]["leaderWorkerTemplate"]["size"]
    leader = lws_env(lws, 0)["LWS_LEADER_ADDRESS"]
    for (index, container, _), r in zip(pods, results, strict=True):
        assert not isinstance(r, SglangArgsRejected), str(r)
        a = r["args"]
        assert (a["nnodes"], a["node_rank"]) == (size, index)
        assert a["dist_init_addr"].rsplit(":", 1)[0] == leader
        assert a["tp_size"] == _gpus(container) and a["tp_size"] * a["pp_size"] == size * _gpus(container)
        health = {"startupProbe", "readinessProbe", "livenessProbe"} <= set(container)
        assert health, "SGLang's non-zero ranks answer /health too, so every pod is probed"
