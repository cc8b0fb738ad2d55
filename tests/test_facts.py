"""Node facts: one parser from v1 Node to hardware facts; partial or missing labels degrade, never raise."""

from __future__ import annotations

from typing import Any

import pytest
from ib_testkit.factories import node
from inference_backend.facts import (
    UNLABELLED_GPU_MEMORY_MIB,
    Taint,
    group_nodes,
    hardware_class,
    tolerates,
)


def test_gfd_labels_parsed() -> None:
    name, cls = hardware_class(node("h", "h100", 8, cpu="191", memory="1900Gi"))
    assert name == "h"
    (gpu,) = cls.gpus
    assert (gpu.product, gpu.memory_mib, gpu.count, gpu.compute) == ("NVIDIA-H100-80GB-HBM3", 81559, 8, (9, 0))
    assert gpu.resource == "nvidia.com/gpu" and gpu.labelled and not gpu.mig
    assert cls.cpu_millis == 191_000 and cls.memory_bytes == 1900 * 2**30 and cls.has_gpu


def test_cpu_node() -> None:
    _, cls = hardware_class(node("c", cpu="15900m", memory="65536Ki", arch="arm64"))
    assert not cls.has_gpu and cls.gpus == ()
    assert cls.cpu_millis == 15_000  # whole cores, so near-identical nodes share a class
    assert cls.arch == "arm64"


def test_gpu_without_gfd_labels_gets_conservative_assumptions() -> None:
    _, cls = hardware_class(node("x", "l4", 2, gfd=False))
    (gpu,) = cls.gpus
    assert gpu.product == "unknown" and gpu.memory_mib == UNLABELLED_GPU_MEMORY_MIB and not gpu.labelled
    assert gpu.compute == (7, 5) and gpu.count == 2
    assert any("without GFD labels" in n for n in cls.notes)


def test_partial_labels_take_memory_and_compute_from_the_sku_table() -> None:
    """GFD product without memory label and a garbage compute label: L4 = 23034 MiB, compute 8.9 from the table."""
    n = node("p", "l4", 1)
    del n["metadata"]["labels"]["nvidia.com/gpu.memory"]
    n["metadata"]["labels"]["nvidia.com/cuda.compute.major"] = "garbage"
    _, cls = hardware_class(n)
    (gpu,) = cls.gpus
    assert (gpu.product, gpu.memory_mib, gpu.compute, gpu.sku) == ("NVIDIA-L4", 23034, (8, 9), "L4-24GB")
    assert gpu.labelled
    assert any("memory 23034 MiB from the SKU table (L4-24GB)" in note for note in cls.notes)


def test_gfd_count_disagreeing_with_allocatable_uses_allocatable() -> None:
    n = node("d", "l4", 4)
    n["status"]["allocatable"]["nvidia.com/gpu"] = "3"
    _, cls = hardware_class(n)
    assert cls.gpus[0].count == 3
    assert any("using 3" in note for note in cls.notes)


def test_labels_without_device_plugin() -> None:
    n = node("np", "l4", 1)
    del n["status"]["allocatable"]["nvidia.com/gpu"]
    del n["status"]["capacity"]["nvidia.com/gpu"]
    _, cls = hardware_class(n)
    assert not cls.has_gpu
    assert any("no allocatable nvidia.com/gpu" in note for note in cls.notes)


def test_mig_single_and_mixed() -> None:
    _, single = hardware_class(node("s", "a100-40", 1, mig="single"))
    assert single.gpus[0].mig and single.gpus[0].count == 7 and single.gpus[0].memory_mib == 9728
    _, mixed = hardware_class(node("m", "a100-40", 1, mig="mixed"))
    (gpu,) = mixed.gpus
    assert gpu.resource == "nvidia.com/mig-3g.40gb" and gpu.mig and gpu.count == 2 and gpu.memory_mib == 40192


@pytest.mark.parametrize(
    "broken",
    [
        {},
        {"metadata": None, "status": None, "spec": None},
        {"metadata": {"name": "n", "labels": {"nvidia.com/gpu.count": "x"}}, "status": {"allocatable": {"cpu": "?"}}},
        {"metadata": {"name": "n"}, "status": {"allocatable": {"nvidia.com/gpu": "lots"}}},
        {"metadata": {"name": "n"}, "spec": {"taints": [{"effect": "NoSchedule"}]}, "status": {"conditions": None}},
    ],
)
def test_malformed_nodes_never_raise(broken: dict[str, Any]) -> None:
    _, cls = hardware_class(broken)
    assert not cls.ready or cls.cpu_millis >= 0


def test_ready_schedulable_taints() -> None:
    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    _, cls = hardware_class(node("t", "l4", 1, ready=False, unschedulable=True, taints=[taint]))
    assert not cls.ready and not cls.schedulable
    assert cls.taints == (Taint("nvidia.com/gpu", "present", "NoSchedule"),)


def test_grouping_by_class_ignores_hostnames() -> None:
    nodes = [node(f"l4-{i}", "l4", 1) for i in range(50)] + [node(f"c-{i}") for i in range(30)]
    groups = group_nodes(nodes)
    assert len(groups) == 2
    assert sorted(len(v) for v in groups.values()) == [30, 50]


@pytest.mark.parametrize(
    ("toleration", "taint", "ok"),
    [
        ({"operator": "Exists"}, Taint("a", "b", "NoSchedule"), True),
        ({"key": "a", "operator": "Exists"}, Taint("a", "b", "NoSchedule"), True),
        ({"key": "a", "value": "b", "effect": "NoSchedule"}, Taint("a", "b", "NoSchedule"), True),
        ({"key": "a", "value": "c"}, Taint("a", "b", "NoSchedule"), False),
        ({"key": "a", "operator": "Exists", "effect": "NoExecute"}, Taint("a", "b", "NoSchedule"), False),
        ({"key": "x", "operator": "Exists"}, Taint("a", "b", "NoSchedule"), False),
    ],
)
def test_tolerations(toleration: dict[str, str], taint: Taint, ok: bool) -> None:
    assert tolerates([toleration], taint) is ok
