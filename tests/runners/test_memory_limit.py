"""The runners size their KV cache to the container's memory limit: cgroup v2's memory.max or, on a cgroup v1 node
(the e2e real nodes), memory.limit_in_bytes; with neither (or no limit) to the host's RAM. Light: no torch."""

from __future__ import annotations

import os
from pathlib import Path

from inference_backend.runners.common.memory import host_memory_bytes

RAM = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def test_cgroup_v1_limit_caps_the_memory(tmp_path: Path) -> None:
    v2, v1 = tmp_path / "memory.max", tmp_path / "memory.limit_in_bytes"
    v1.write_text(f"{3 * 2**30}\n")
    assert host_memory_bytes((v2, v1)) == 3 * 2**30


def test_cgroup_v2_limit_caps_the_memory(tmp_path: Path) -> None:
    v2 = tmp_path / "memory.max"
    v2.write_text(f"{2**30}\n")
    assert host_memory_bytes((v2, tmp_path / "absent")) == 2**30


def test_no_limit_is_the_hosts_ram(tmp_path: Path) -> None:
    v2, v1 = tmp_path / "memory.max", tmp_path / "memory.limit_in_bytes"
    v2.write_text("max\n")
    v1.write_text("9223372036854771712\n")  # cgroup v1's "unlimited" (PAGE_COUNTER_MAX pages), above any RAM
    assert host_memory_bytes((v2, v1)) == RAM
    assert host_memory_bytes((tmp_path / "a", tmp_path / "b")) == RAM
