"""The engine-profile bench model is ONE model in three formats, and the GPU script runs end to end on CPU.

- GGUF (llama.cpp's convert_hf_to_gguf.py through bench/gguf_convert.py) served by the real llama-server gives the
  same greedy tokens as transformers on the safetensors checkpoint, and the same token ids for a text.
- bench/gpu/h200.sh --reduced (tiny model, CPU providers, the CPU llama.cpp build): every engine measured.
Needs the runners venv and llama-server (hack/build-llama-server; `make runners-test` builds it first).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ib_testkit import free_port
from ib_testkit.llama_server import llama_cpp_source, llama_server_bin

from bench import bench_model
from bench.engine_profiles.per_engine import greedy
from bench.engine_profiles.serving import start, transformers_greedy
from bench.profile_render import localize, render

ROOT = Path(__file__).resolve().parents[2]
TEXT = "The quick brown fox asked the server a question, and the cache said 42!"


def _require_llama() -> None:
    if not llama_server_bin().exists():
        pytest.skip(f"{llama_server_bin()} missing: run hack/build-llama-server")
    if not (llama_cpp_source() / "convert_hf_to_gguf.py").exists():
        pytest.skip(f"no llama.cpp source at {llama_cpp_source()}: run hack/build-llama-server")


def test_gguf_is_the_same_model_as_safetensors(tmp_path: Path) -> None:
    _require_llama()
    m = bench_model.PRESETS["tiny"]
    hf = bench_model.make_safetensors(m, tmp_path / m.name)
    gguf = bench_model.convert_gguf(hf, tmp_path / f"{m.name}-f32.gguf", m.dtype)
    _, rendered = render("llamacpp", m, "cpu", 2)
    loc = localize("llamacpp", rendered, model_path=gguf, port=free_port(), threads=2, llama_cache=tmp_path / "c")
    srv = start("llamacpp", [str(llama_server_bin()), *loc.args], loc.env, tmp_path / "llama.log", 120)
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(hf)
        prompt = tok.encode(TEXT)
        status, out = _post(srv.url + "/tokenize", {"content": TEXT})
        assert status == 200 and out["tokens"] == prompt, "llama.cpp tokenizes the text differently"
        expected = transformers_greedy(hf, prompt, 24, "cpu")
        assert len(expected) >= 8, expected
        assert greedy(srv, m.name, prompt, 24) == expected
    finally:
        srv.stop()


def _post(url: str, body: dict[str, object]) -> tuple[int, dict[str, object]]:
    import httpx

    r = httpx.post(url, json=body, timeout=60)
    return r.status_code, r.json()


def _bench_cli_pythonpath() -> str | None:
    """`inference_backend.bench` (the bench CLI) here, or IB_BENCH_PYTHONPATH until it is merged."""
    if importlib.util.find_spec("inference_backend.bench") is not None:
        return None
    if extra := os.environ.get("IB_BENCH_PYTHONPATH"):
        return extra
    pytest.skip("inference-backend bench (inference_backend.bench) is not available")


@pytest.mark.slow
def test_gpu_script_reduced_mode_runs_every_engine(tmp_path: Path) -> None:
    _require_llama()
    extra = _bench_cli_pythonpath()
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path / "out"), "WORK": str(tmp_path / "work")}
    if extra:
        env["IB_BENCH_PYTHONPATH"] = extra
    res = subprocess.run(
        [str(ROOT / "bench" / "gpu" / "h200.sh"), "--reduced"], env=env, capture_output=True, text=True, timeout=400
    )
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    doc = json.loads((tmp_path / "out" / "reduced-profiles.json").read_text())
    assert [s for s in doc["steps"] if s["status"] != "ok"] == []
    for engine in ("pytorch", "onnxruntime", "llamacpp"):
        e = doc["engines"][engine]
        assert e["status"] == "ok" and e["greedy"]["equalsTransformers"], engine
        assert [s["target"] for s in e["steps"]] == [1, 2]
        assert all(s["completed"] == 4 and s["errored"] == 0 and s["outputTokensMean"] == 16 for s in e["steps"])
        assert e["peak"]["vmHwmBytes"] > 0
    assert doc["engines"]["llamacpp"]["kv"]["allocatedBytes"] == 2 * 512 * 256  # 2 slots x 512 ctx x 256 B/cell
    assert doc["llamaBench"]["serverVsBench"]["tg"]["ratio"] > 0
    assert doc["bandwidth"]["bestBytesPerSecond"] > 0
    assert (tmp_path / "out" / "reduced-profiles.png").stat().st_size > 0
