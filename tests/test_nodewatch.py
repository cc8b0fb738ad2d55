"""NodeClasses: what a node event changes (the list-then-watch itself runs against a real API server in e2e/)."""

from __future__ import annotations

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
