"""The e2e operator is the chart's Deployment as a local process (ib_testkit.cluster.chart_operator_process): its
command, args and env are read from `helm template`, so a chart change that breaks them breaks these tests (and e2e).

Why a local process and not the Deployment itself: the local control plane's nodes are KWOK's, which run no
containers, and this machine has no container runtime to build the operator image. The kind workflow
(.github/workflows/e2e.yaml) runs the chart's Deployment in-cluster from the image it builds.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from ib_testkit.cluster import PORT_FLAGS, chart_operator_container, chart_operator_process
from inference_backend.cli import build_parser

from tests.test_chart import needs_helm

pytestmark = needs_helm


def test_the_local_operator_runs_the_charts_command_with_only_the_ports_replaced() -> None:
    container = chart_operator_container()
    argv, env = chart_operator_process(container)
    assert Path(argv[0]) == Path(sys.executable).parent / container["command"][0]
    assert argv[1:] == [*container["command"][1:], *_ports_off(container["args"])]
    assert env == {v["name"]: v["value"] for v in container["env"]}


def test_the_charts_args_parse_with_the_cli() -> None:
    """Every argument the chart renders is one the operator's CLI accepts, with the values the chart means."""
    container = chart_operator_container("--set", "clusterWide=false", "--set", "watchNamespaces={a,b}")
    argv, _ = chart_operator_process(container, metrics_port=9999)
    args = build_parser().parse_args(argv[1:])
    assert args.command == "operator"
    assert args.namespace == ["a", "b"] and not args.all_namespaces
    assert args.metrics_port == 9999 and args.liveness_port == 0
    assert args.peering == "inference-backend"


def test_a_values_change_reaches_the_local_process() -> None:
    container = chart_operator_container("--set", "debounceSeconds=7", "--set", "logLevel=debug")
    argv, env = chart_operator_process(container)
    assert env["IB_DEBOUNCE_SECONDS"] == "7"
    assert "--log-level=debug" in argv


def test_an_env_source_with_no_local_equivalent_is_refused() -> None:
    container = chart_operator_container()
    container["env"] = [*container["env"], {"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]
    with pytest.raises(AssertionError, match="env X"):
        chart_operator_process(container)


def _ports_off(args: list[str]) -> list[str]:
    return [f"{a.split('=')[0]}=0" if a.split("=")[0] in PORT_FLAGS else a for a in args]
