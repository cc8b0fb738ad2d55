"""The 7B rows the selection reads trace to bench/results/cpu-7b.json, and the random GGUFs have llama.cpp's layout
(issue 16 item 7)."""

from __future__ import annotations

import json

from inference_backend.engines import card
from inference_backend.engines.profiles_7b import MEASURED_7B_CPU
from inference_backend.memory import QUANT_BYTES

from bench import gguf_random, profiles_7b
from bench.bench_model import PRESETS


def test_the_random_gguf_has_the_llama2_7b_shape_and_llama_cpps_bits_per_weight() -> None:
    shape = gguf_random.LLAMA2_7B
    assert shape.parameters() == PRESETS["llama2-7b"].parameters() == 6_738_415_616
    for ftype in ("q8_0", "q4_k_m"):
        layout = gguf_random.tensor_types(shape, ftype)
        assert len(layout) == 2 + 9 * shape.layers + 1
        bits = 8 * profiles_7b._gguf_weight_bytes(layout) / shape.parameters()
        assert abs(bits - 8 * QUANT_BYTES[ftype]) < 0.06, (ftype, bits)
    q4 = {name: t for name, _, t in gguf_random.tensor_types(shape, "q4_k_m")}
    assert q4["output.weight"] == "Q6_K" and q4["blk.0.attn_v.weight"] == "Q6_K" and q4["blk.4.attn_v.weight"] == "Q4_K"
    assert sum(t == "Q6_K" for t in q4.values()) == 1 + 2 * 16  # output, attn_v and ffn_down of 16 layers


def test_the_rows_module_is_the_derivation_of_the_committed_results() -> None:
    results = profiles_7b.RESULTS
    rows = profiles_7b.derive(json.loads(results.read_text())) if results.exists() else {}
    assert rows == MEASURED_7B_CPU
    assert profiles_7b.render_module(rows) == profiles_7b.MODULE.read_text()
    for engine, measured in rows.items():
        assert {r.weights for r in card(engine).profiles["cpu"].measured} == {r["weights"] for r in measured}
        for r in measured:
            assert r["provenance"].startswith("measured: ") and "bench.profiles_7b measure" in r["provenance"]
            assert r["prompt_tokens"] == 512 and r["parameters"] == 6_738_415_616
