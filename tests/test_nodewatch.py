"""NodeClasses: what a node event changes (the list-then-watch itself runs against a real API server in e2e/)."""

from __future__ import annotations

import logging

import pytest
from ib_testkit.factories import node
from inference_backend.controller.nodewatch import NodeClasses


def test_new_nodes_bump_the_version_without_asking_for_a_reselection() -> None:
    nodes = NodeClasses()
    assert nodes.update(node("l4-a", "l4", 1)) is False
    assert nodes.update(node("l4-b", "l4", 1)) is False
    assert nodes.version == 2
    assert [names for names in nodes.grouped().values()] == [("l4-a", "l4-b")]


def test_a_known_node_changing_class_or_leaving_asks_for_a_reselection() -> None:
    nodes = NodeClasses()
    nodes.update(node("n1", "l4", 1))
    nodes.update(node("n2", "l4", 1))
    assert nodes.update(node("n1", "l4", 1)) is False, "same class: nothing changes"
    version = nodes.version
    assert nodes.update(node("n1", "a10g", 1)) is True
    assert nodes.version == version + 1
    assert sorted(nodes.grouped().values()) == [("n1",), ("n2",)]
    assert nodes.remove("n2") is True and nodes.remove("n2") is False
    assert list(nodes.grouped().values()) == [("n1",)]


def test_grouping_is_rebuilt_only_when_the_version_moves() -> None:
    nodes = NodeClasses()
    nodes.update(node("cpu-a"))
    first = nodes.grouped()
    assert nodes.grouped() is first
    nodes.update(node("cpu-b"))
    assert nodes.grouped() is not first and list(nodes.grouped().values()) == [("cpu-a", "cpu-b")]


def test_a_relisting_drops_the_nodes_that_are_gone() -> None:
    nodes = NodeClasses()
    nodes.replace([node("a"), node("b"), node("gpu", "l4", 1)])
    assert nodes.replace([node("a"), node("gpu", "l4", 1)]) is True
    assert sorted(nodes.by_name) == ["a", "gpu"]
    assert nodes.replace([node("a"), node("gpu", "l4", 1)]) is False


def test_resource_slices_add_dra_gpus_to_their_node_and_removing_them_asks_for_a_reselection() -> None:
    from ib_testkit import platforms as P

    nodes = NodeClasses()
    nodes.update(P.dra_node("dra-1"))
    assert not nodes.by_name["dra-1"].has_gpu
    slice_ = P.nvidia_slice("dra-1", count=8)
    assert nodes.slice_event("ADDED", slice_)  # a known node changed class: its placements are re-checked
    gpus = nodes.by_name["dra-1"].gpus
    assert [(g.count, g.resource, g.dra) for g in gpus] == [(8, "gpu.nvidia.com", "gpu.nvidia.com")]
    nodes.update(P.dra_node("dra-1"))  # a Node event keeps the devices its slices publish
    assert nodes.by_name["dra-1"].has_gpu
    assert nodes.slice_event("DELETED", slice_)
    assert not nodes.by_name["dra-1"].has_gpu
    other = {**slice_, "spec": {**slice_["spec"], "driver": "example.com/nic"}}
    assert not nodes.slice_event("ADDED", other)  # not a GPU driver's


def test_the_gpu_ledger_reads_a_dra_workloads_pool_back_from_its_template() -> None:
    from ib_testkit import platforms as P
    from ib_testkit.factories import MODELS, spec
    from inference_backend.api import InferenceBackend
    from inference_backend.capacity import wanted
    from inference_backend.controller.world import Child, slim_child
    from inference_backend.facts import group_nodes
    from inference_backend.render import render
    from inference_backend.selection import select

    raw = {"replicas": 2, "model": {"modelRef": "llama-3-1-70b", "cache": {"pvc": "w"}}}
    d = select(spec(**raw), group_nodes([P.dra_node("dra-1"), P.nvidia_slice("dra-1")]), MODELS)
    body = {"apiVersion": "serving.inferencebackend.io/v1alpha1", "kind": "InferenceBackend", "metadata": {"name": "x"}}
    ib = InferenceBackend.model_validate({**body, "spec": raw})
    deployment = next(o for o in render(ib, d) if o["kind"] == "Deployment")
    child = Child("h", slim_child("Deployment", deployment["spec"], {}))
    assert child.gpus == wanted(d, 2)  # the pool (DeviceClass and attributes) and 2 x 4 devices


def test_a_listing_naming_a_node_twice_counts_the_first_and_says_why(caplog: pytest.LogCaptureFixture) -> None:
    nodes = NodeClasses()
    with caplog.at_level(logging.WARNING):
        nodes.replace([node("gpu", "l4", 1), node("gpu", "h100", 8), node("cpu")])
    assert sorted(nodes.by_name) == ["cpu", "gpu"]
    assert [c.gpus[0].count for c in nodes.grouped() if c.has_gpu] == [1], "the second gpu node is not counted"
    assert "node gpu appears twice in one listing: the second is ignored" in caplog.text
