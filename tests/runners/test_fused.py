"""The PyTorch runner's fused forward (runners/pytorch/fused.py) against transformers' own forward on the same weights:
Llama, Qwen2 (q/k/v biases) and Mistral shapes, plain and oneDNN-packed weights, through the backend as the
scheduler drives it (rows joining a running batch, leaving, a prefix-cache hit). Logits match transformers' to float32
rounding and greedy tokens are equal; models it cannot run are named with the reason."""

from __future__ import annotations

import copy
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")  # IB_REQUIRE_RUNNERS=1 turns these skips into failures

from inference_backend.runners.common.engine import GenRequest, SamplingParams  # noqa: E402
from inference_backend.runners.common.metrics import Metrics  # noqa: E402
from inference_backend.runners.common.prefix_cache import PrefixCache  # noqa: E402
from inference_backend.runners.common.scheduler import Sequence  # noqa: E402
from inference_backend.runners.pytorch import fused as fusedmod  # noqa: E402
from inference_backend.runners.pytorch import kv as kvh  # noqa: E402
from inference_backend.runners.pytorch import packed  # noqa: E402
from inference_backend.runners.pytorch.backend import TorchBackend  # noqa: E402

CPU = torch.device("cpu")
COMMON = dict(
    vocab_size=97,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
)


def model_of(kind: str, seed: int = 0) -> Any:
    torch.manual_seed(seed)
    if kind == "llama":
        config = transformers.LlamaConfig(**COMMON, initializer_range=0.3)
        cls = transformers.LlamaForCausalLM
    elif kind == "llama3-rope":  # Llama 3's rope scaling goes through the model's own rotary module
        scaling = {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
            "rope_theta": 500000.0,
        }
        config = transformers.LlamaConfig(**COMMON, initializer_range=0.3, rope_parameters=scaling)
        cls = transformers.LlamaForCausalLM
    elif kind == "qwen2":
        config = transformers.Qwen2Config(**COMMON, initializer_range=0.3, tie_word_embeddings=True)
        cls = transformers.Qwen2ForCausalLM
    elif kind == "mistral":
        config = transformers.MistralConfig(**COMMON, initializer_range=0.3, sliding_window=None)
        cls = transformers.MistralForCausalLM
    else:
        raise ValueError(kind)
    model = cls(config).eval()
    with torch.no_grad():  # biases are zero-initialised: make them count
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.3)
    return model


def seq(tokens: list[int], max_tokens: int = 50) -> Sequence:
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0)
    req = GenRequest(request_id="t", prompt_ids=tokens, params=params, emit=lambda _event: None)
    return Sequence(req, list(tokens), len(tokens), len(tokens) + max_tokens)


def drive(backend: TorchBackend, prompts: list[list[int]], steps: int) -> dict[int, list[int]]:
    """Prompts join two at a time (one packed prefill) every third step, one row leaves mid-way; returns each
    prompt's greedy tokens."""
    out: dict[int, list[int]] = {i: [] for i in range(len(prompts))}
    running: list[tuple[int, Sequence]] = []

    for step in range(steps):
        joining = [(i, seq(prompts[i])) for i in range(len(prompts)) if i // 2 == step // 3 and step % 3 == 0]
        if joining:
            firsts = backend.prefill([s for _, s in joining])
            for (i, s), first in zip(joining, firsts, strict=True):
                s.tokens += first
                out[i] += first
            running += joining
        if step == 5 and len(running) > 2:  # the middle row leaves
            gone = running.pop(1)
            backend.release([gone[1]])
        for (i, s), toks in zip(running, backend.decode([s for _, s in running]), strict=True):
            s.tokens += toks
            out[i] += toks
    return out


def reference_greedy(model: Any, prompt: list[int], n: int) -> list[int]:
    ids = torch.tensor([prompt])
    gen = model.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0
    )
    return [int(t) for t in gen[0, len(prompt) :]]


@pytest.mark.parametrize("kind", ["llama", "llama3-rope", "qwen2", "mistral"])
@pytest.mark.parametrize("forms", ["plain", "packed", "both"])  # both: plain matrices for single-row steps
def test_fused_matches_transformers(kind: str, forms: str) -> None:
    pack = forms != "plain"
    if pack and not packed.available(CPU, torch.float32):
        pytest.skip("oneDNN is not available in this torch build")
    model = model_of(kind)
    reference = copy.deepcopy(model)
    assert fusedmod.ineligible(model) is None
    fused = fusedmod.FusedLlama(model, pack)
    if forms == "packed":
        fused.drop_plain()
        assert all(w.plain is None for w in fused.weights())
        assert all(p.numel() == 0 for n, p in model.named_parameters() if n.endswith("proj.weight"))
    backend = TorchBackend(model, CPU, Metrics("t"), fused=fused)
    plain = TorchBackend(reference, CPU, Metrics("t"))
    rnd = torch.Generator().manual_seed(1)
    prompts = [torch.randint(4, 97, (int(n),), generator=rnd).tolist() for n in (5, 17, 3, 30, 11, 8)]
    steps = 12
    got = drive(backend, prompts, steps)
    want = drive(plain, prompts, steps)
    for i, p in enumerate(prompts):  # the batched tokens equal transformers' generate on each prompt alone
        assert got[i] == want[i], (kind, i)
        assert got[i] == reference_greedy(reference, p, len(got[i])), (kind, i)

    with torch.inference_mode():  # decode steps' logits, fused vs transformers, same batch
        a, b = [seq(p) for p in prompts[:3]], [seq(p) for p in prompts[:3]]
        backend.prefill(a)
        plain.prefill(b)
        fl = _step_logits(backend, a)
        pl = _step_logits(plain, b)
        backend.release(a[1:])  # one row left: a single-row step (plain matrices when both forms are kept)
        plain.release(b[1:])
        fl1, pl1 = _step_logits(backend, a[:1]), _step_logits(plain, b[:1])
    tol = 1e-4 if pack else 1e-5  # float32 rounding: a bias added inside the matmul, oneDNN's summation order
    assert torch.allclose(fl, pl, atol=tol, rtol=tol), float((fl - pl).abs().max())
    assert torch.allclose(fl1, pl1, atol=tol, rtol=tol), float((fl1 - pl1).abs().max())


def test_rows_of_very_different_lengths_attend_in_groups() -> None:
    """Short rows beside long ones: decode attention splits the rows into groups that each read only their own
    window (Slab.groups); tokens and logits stay transformers' (whose rows all read the whole padded window)."""
    model = model_of("llama")
    reference = copy.deepcopy(model)
    backend = TorchBackend(
        model, CPU, Metrics("t"), fused=fusedmod.FusedLlama(model, packed.available(CPU, torch.float32))
    )
    plain = TorchBackend(reference, CPU, Metrics("t"))
    seen: list[list[tuple[int, int, int]]] = []
    real = backend.slab.groups

    def spy() -> list[tuple[int, int, int]]:
        seen.append(real())
        return seen[-1]

    backend.slab.groups = spy  # type: ignore[method-assign]
    rnd = torch.Generator().manual_seed(2)
    prompts = [torch.randint(4, 97, (int(n),), generator=rnd).tolist() for n in (150, 4, 6, 120, 90, 3)]
    got, want = drive(backend, prompts, 12), drive(plain, prompts, 12)
    assert max(len(g) for g in seen) > 1, seen
    for i, p in enumerate(prompts):
        assert got[i] == want[i], i
        assert got[i] == reference_greedy(reference, p, len(got[i])), i
    with torch.inference_mode():
        a, b = [seq(p) for p in prompts[:4]], [seq(p) for p in prompts[:4]]
        backend.prefill(a)
        plain.prefill(b)
        fl, pl = _step_logits(backend, a), _step_logits(plain, b)
    assert len(seen[-1]) > 1, seen[-1]
    assert torch.allclose(fl, pl, atol=1e-4, rtol=1e-4), float((fl - pl).abs().max())


def _step_logits(backend: TorchBackend, seqs: list[Sequence]) -> Any:
    captured: list[Any] = []
    if backend.fused is not None:
        real = backend.fused.forward

        def spy(*a: Any, **k: Any) -> Any:
            captured.append(real(*a, **k))
            return captured[-1]

        backend.fused.forward = spy  # type: ignore[method-assign]
        backend.decode(seqs)
        backend.fused.forward = real  # type: ignore[method-assign]
    else:
        real_model = backend.model

        def spy_model(*a: Any, **k: Any) -> Any:
            res = real_model(*a, **k)
            captured.append(res.logits[:, -1])
            return res

        backend.model = spy_model
        backend.decode(seqs)
        backend.model = real_model
    return captured[0][: len(seqs)]


def test_prefix_cache_hits_in_a_packed_prefill() -> None:
    """Prompts prefilled together, some continuing from a cached prefix (only the rest is computed), one sharing its
    first block with another in the same admission (it waits a wave and hits the cache): every prompt's first-token
    logits and KV equal transformers' from scratch."""
    model = model_of("llama")
    fused = fusedmod.FusedLlama(model, False)
    cache = PrefixCache(10_000, kvh.slice_kv, block=8)
    backend = TorchBackend(model, CPU, Metrics("t"), prefix_cache=cache, fused=fused)
    cold = TorchBackend(copy.deepcopy(model), CPU, Metrics("t"))
    base = list(range(5, 40))
    with torch.inference_mode():
        backend.prefill([seq(base[:20])])  # caches blocks of 8 and 16 tokens
        prompts = [base, [50, 51, 52], base[:9] + [60, 61, 62, 63, 64, 65, 66, 67, 68], list(range(70, 90))]
        assert [cache.lookup(p)[0] for p in prompts] == [16, 0, 8, 0]
        seqs = [seq(p) for p in [*prompts, base[:30]]]  # a prompt sharing a first block in its wave waits a wave
        assert [len(w) for w in backend._waves(seqs)] == [2, 2, 1]
        got = backend._fused_prefill(fused, prompts)
        assert cache.lookup(base[:30])[0] == 24  # base's own KV is cached now
        for p, (kv, logits) in zip(prompts, got, strict=True):
            kv0, logits0 = cold._prefill_one(p)
            assert torch.allclose(logits, logits0, atol=1e-5, rtol=1e-5)
            for (k, v), (k0, v0) in zip(kv, kv0, strict=True):
                assert torch.allclose(k, k0, atol=1e-5) and torch.allclose(v, v0, atol=1e-5)


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        (transformers.MistralConfig(**COMMON, sliding_window=16), "sliding-window"),
        (transformers.GemmaConfig(**COMMON, head_dim=16), "model type 'gemma'"),
        (transformers.Qwen3Config(**COMMON), "model type 'qwen3'"),
        (transformers.LlamaConfig(**COMMON, hidden_act="gelu"), "activation 'gelu'"),
    ],
)
def test_other_models_run_transformers_forward(config: Any, reason: str) -> None:
    model = transformers.AutoModelForCausalLM.from_config(config)
    why = fusedmod.ineligible(model)
    assert why is not None and reason in why


def test_single_row_speedup_is_measured() -> None:
    """The load-time choice of the single-row form times both forms of real matrices (a ratio, not a constant)."""
    if not packed.available(CPU, torch.float32):
        pytest.skip("oneDNN is not available in this torch build")
    fused = fusedmod.FusedLlama(model_of("llama"), True)
    ratios = {round(fused.single_row_speedup(reps=3), 6) for _ in range(3)}
    assert all(0.05 < r < 20 for r in ratios) and len(ratios) > 1
    assert (
        fused.plain_bytes()
        == sum(p.numel() * 4 for n, p in fused.model.named_parameters() if "proj" in n) + 97 * 64 * 4
    )
    fused.drop_plain()
    assert fused.plain_bytes() == 0


def test_bfloat16_matches_transformers() -> None:
    """In bfloat16 (the PyTorch runner's dtype for CPU bf16 models) the fused forward normalises as transformers does
    (float32, cast back, then scaled): the same greedy tokens, batched, as transformers' forward."""
    model = model_of("llama").to(torch.bfloat16)
    reference = copy.deepcopy(model)
    backend = TorchBackend(model, CPU, Metrics("t"), fused=fusedmod.FusedLlama(model, False))
    plain = TorchBackend(reference, CPU, Metrics("t"))
    rnd = torch.Generator().manual_seed(2)
    prompts = [torch.randint(4, 97, (int(n),), generator=rnd).tolist() for n in (6, 19, 4, 25)]
    assert drive(backend, prompts, 9) == drive(plain, prompts, 9)


def test_wrapped_projections_run_transformers_forward() -> None:
    """A projection that is not a plain Linear (a quantized or adapter layer) is not read as a plain matrix."""

    class Adapter(torch.nn.Linear):
        pass

    model = model_of("llama")
    old = model.model.layers[1].mlp.up_proj
    model.model.layers[1].mlp.up_proj = Adapter(old.in_features, old.out_features, bias=False)
    why = fusedmod.ineligible(model)
    assert why is not None and "not plain torch Linear" in why


def test_the_loaded_file_is_released(tmp_path: Any) -> None:
    """A model loaded from safetensors is a set of views of one memory-mapped file. Once fused, nothing refers to
    that mapping any more (else every page read while fusing would stay resident beside the fused matrices)."""
    import gc

    model_of("llama").save_pretrained(tmp_path)
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    mapped = [ln for ln in open("/proc/self/maps").read().splitlines() if str(tmp_path) in ln]  # noqa: SIM115
    fused = fusedmod.FusedLlama(model, False)
    gc.collect()
    still = [ln for ln in open("/proc/self/maps").read().splitlines() if str(tmp_path) in ln]  # noqa: SIM115
    assert mapped and not still, still
    backend = TorchBackend(model, CPU, Metrics("t"), fused=fused)  # and it still serves
    assert drive(backend, [[5, 6, 7]], 3)[0] == reference_greedy(model, [5, 6, 7], 4)
