"""A random int4/int8 Llama built into onnxruntime-genai format by genai's own model builder, in bounded memory.

    python -m bench.genai_random OUT --bits 4 [--preset llama2-7b] [--max-memory-gib 17]

Why not the builder's usual path (a float checkpoint, `-p int4 -e cpu`): it quantizes in `to_nbits`, which
serializes the whole float32 graph to one ModelProto first (`ir.to_proto(self.model)`, 27 GB at 7B) while the
float checkpoint (13.5 GB in bf16) is still held; on a 24 GiB machine it ends in MemoryError (docs/runners.md).

What we do instead: write a checkpoint that is already quantized, in the Olive format the builder reads
(`quantization_config.quant_method = "olive"`, onnxruntime_genai/models/loaders/olive.py): per linear layer
`qweight` (out, in * bits / 8) uint8 packed along the input dimension, `scales` (out, in / group) float16 and
`qzeros` (out, in / group * bits / 8) uint8, the zero point the midpoint (8 for int4, 128 for int8, so the values
are symmetric); embeddings, norms and LM head in bfloat16. Codes and scales are random (seeded) and written shard
by shard (memory: one shard). The builder then emits MatMulNBits nodes from those bytes directly and quantizes
only the LM head itself (round-to-nearest, as `-p int4` does): the graph is the one `-p int4 -e cpu
--extra_options is_symmetric=false` builds from float weights (same nodes, fused QKV, block size 32, accuracy
level 4, zero points), only the quantized values differ (tests/runners/test_genai_random.py compares them on the
tiny shape). Timing does not depend on the values.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.bench_model import PRESETS, BenchModel, llama_skeleton

GROUP = 32  # the builder's default MatMulNBits block size for -p int4 / int8


def olive_checkpoint(m: BenchModel, out: Path, bits: int, group: int = GROUP, layers_per_shard: int = 4) -> None:
    """A random LlamaForCausalLM checkpoint already quantized to ``bits`` in the Olive format, shard by shard."""
    import torch
    from safetensors.torch import save_file

    if bits not in (4, 8):
        raise ValueError(f"bits must be 4 or 8, not {bits}")
    llama_skeleton(m, out)
    config = json.loads((out / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "olive", "bits": bits, "group_size": group}
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    gen = torch.Generator().manual_seed(m.seed)
    kv = m.kv_heads * m.head_dim
    # |w| of a symmetric code is at most 2^(bits-1) steps: scales near init_range * 2.5 / 2^(bits-1) give weights
    # of about Llama's init std
    step = m.init_range * 2.5 / 2 ** (bits - 1)
    zero = 0x88 if bits == 4 else 0x80

    def linear(prefix: str, n: int, k: int) -> dict[str, torch.Tensor]:
        return {
            prefix + ".qweight": torch.randint(0, 256, (n, k * bits // 8), dtype=torch.uint8, generator=gen),
            prefix + ".scales": (torch.rand(n, k // group, generator=gen) * step + step / 2).to(torch.float16),
            prefix + ".qzeros": torch.full((n, k // group * bits // 8), zero, dtype=torch.uint8),
        }

    def ones() -> torch.Tensor:
        return torch.ones(m.hidden, dtype=torch.bfloat16)

    groups = 1 + -(-m.layers // layers_per_shard)
    weight_map: dict[str, str] = {}
    total = 0
    for g in range(groups):
        if g == 0:
            t = {
                name: torch.empty(m.vocab, m.hidden, dtype=torch.bfloat16).normal_(0.0, m.init_range, generator=gen)
                for name in ("model.embed_tokens.weight", "lm_head.weight")
            }
            t["model.norm.weight"] = ones()
        else:
            t = {}
            for i in range((g - 1) * layers_per_shard, min(g * layers_per_shard, m.layers)):
                p = f"model.layers.{i}."
                t |= {p + "input_layernorm.weight": ones(), p + "post_attention_layernorm.weight": ones()}
                for name, (n, k) in {
                    "self_attn.q_proj": (m.hidden, m.hidden),
                    "self_attn.k_proj": (kv, m.hidden),
                    "self_attn.v_proj": (kv, m.hidden),
                    "self_attn.o_proj": (m.hidden, m.hidden),
                    "mlp.gate_proj": (m.intermediate, m.hidden),
                    "mlp.up_proj": (m.intermediate, m.hidden),
                    "mlp.down_proj": (m.hidden, m.intermediate),
                }.items():
                    t |= linear(p + name, n, k)
        name = f"model-{g + 1:05d}-of-{groups:05d}.safetensors"
        save_file(t, str(out / name), metadata={"format": "pt"})
        weight_map |= dict.fromkeys(t, name)
        total += sum(x.numel() * x.element_size() for x in t.values())
        del t
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def build(hf_dir: Path, out: Path, bits: int, max_memory: int, timeout: float = 3600) -> dict[str, Any]:
    """genai's model builder (`-p int4|int8 -e cpu`) on hf_dir into out, its address space capped at max_memory
    bytes; returns the argv, seconds and the builder's peak RSS (wait4's ru_maxrss)."""
    argv = [
        sys.executable,
        "-m",
        "onnxruntime_genai.models.builder",
        "-i",
        str(hf_dir),
        "-o",
        str(out),
        "-p",
        f"int{bits}",
        "-e",
        "cpu",
        "-c",
        str(out.parent / f".{out.name}-cache"),
    ]

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (max_memory, max_memory))

    log = out.parent / f"{out.name}-build.log"
    t = time.monotonic()
    with log.open("wb") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, preexec_fn=cap)
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:
            proc.kill()
            raise
    seconds = time.monotonic() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    result = {
        "argv": argv[1:],
        "seconds": round(seconds, 1),
        "peakRssBytes": usage.ru_maxrss * 1024,
        "addressSpaceCapBytes": max_memory,
        "returncode": proc.returncode,
    }
    if proc.returncode != 0 or not (out / "genai_config.json").exists():
        tail = log.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{' '.join(argv)} failed:\n{tail}\n{json.dumps(result)}")
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path, help="the genai model directory to write")
    p.add_argument("--bits", type=int, choices=(4, 8), default=4)
    p.add_argument("--preset", choices=sorted(PRESETS), default="llama2-7b")
    p.add_argument("--max-memory-gib", type=float, default=17.0, help="address-space cap of the builder")
    p.add_argument("--keep-checkpoint", action="store_true")
    p.add_argument("--checkpoint-only", action="store_true", help="write the Olive checkpoint (OUT-olive) and stop")
    a = p.parse_args()
    ckpt = a.out.parent / f"{a.out.name}-olive"
    if not (ckpt / "model.safetensors.index.json").exists():  # else reuse the one written before
        t = time.monotonic()
        olive_checkpoint(PRESETS[a.preset], ckpt, a.bits)
        print(f"checkpoint {ckpt}: {time.monotonic() - t:.1f} s", flush=True)
    if a.checkpoint_only:
        return 0
    print(json.dumps(build(ckpt, a.out, a.bits, int(a.max_memory_gib * 2**30))), flush=True)
    if not a.keep_checkpoint:
        subprocess.run(["rm", "-rf", str(ckpt)], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
