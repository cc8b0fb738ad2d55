"""--huge-pages: the PyTorch runner's large buffers (weights, KV cache) on transparent huge pages, read back from the
running server's /proc/PID/smaps_rollup; and what the load log says on each host setting."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")  # IB_REQUIRE_RUNNERS=1 turns the skip into a failure
from ib_testkit.runners import complete  # noqa: E402
from inference_backend.runners.pytorch.runner import THP_MODE, huge_pages  # noqa: E402


def _mode() -> str | None:
    try:
        return next(w.strip("[]") for w in THP_MODE.read_text().split() if w.startswith("["))
    except (OSError, StopIteration):
        return None


def _anon_huge_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1])
    raise AssertionError("no AnonHugePages line")


@pytest.mark.parametrize("flag", ["--huge-pages", "--no-huge-pages"])
def test_large_buffers_on_huge_pages(flag: str, start_server: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    """What the flag gets depends on the host's THP mode: madvise (the usual default, and this project's machines)
    grants huge pages only to what asks; always gives them to every large allocation; never to none."""
    import httpx
    from inference_backend.runners.tiny import make_model

    mode = _mode()
    # hidden 512: the fused gate/up matrix alone is 4 MiB, above torch's 2 MiB threshold for advising huge pages
    model = make_model(tmp_path_factory.mktemp("wide") / "model", layers=1, hidden=512)
    args = ["--model", str(model), "--served-model-name", "tiny", "--threads", "1", "--max-batch-size", "4", flag]
    srv = start_server("pytorch", args)
    with httpx.Client(timeout=60) as client:
        complete(client, srv.url, [5, 6, 7, 8], 4)
    kib = _anon_huge_kib(srv.proc.pid)
    log = srv.log.read_text()
    said = log.split("huge pages for buffers of 2 MiB or more: ", 1)[1].splitlines()[0]
    if flag == "--no-huge-pages":
        assert said == f"not requested (host transparent_hugepage: {mode or 'unknown'})"
        if mode != "always":
            assert kib == 0, kib
    elif mode == "never":
        assert said.startswith("requested, but the host's transparent_hugepage is never") and kib == 0, (said, kib)
    else:
        assert said == f"on (host transparent_hugepage: {mode or 'unknown'})"
        if mode in ("madvise", "always"):
            assert kib >= 2048, kib  # at least one 2 MiB page


@pytest.mark.parametrize(
    ("text", "env", "says"),
    [
        ("always [madvise] never\n", "1", "on (host transparent_hugepage: madvise)"),
        ("always madvise [never]\n", "1", "requested, but the host's transparent_hugepage is never"),
        ("[always] madvise never\n", "0", "not requested (host transparent_hugepage: always)"),
        (None, "1", "on (host transparent_hugepage: unknown)"),
    ],
)
def test_huge_pages_log(text: str | None, env: str, says: str, tmp_path: Path, monkeypatch: Any) -> None:
    mode_file = tmp_path / "enabled"
    if text is not None:
        mode_file.write_text(text)
    monkeypatch.setenv("THP_MEM_ALLOC_ENABLE", env)
    assert huge_pages(mode_file).startswith(says)
