"""Fast: every rendered runner args list parses with the runner's own parser into what the spec asked.

The parsers are the runners' real ones (inference_backend.runners.{pytorch,onnx}.args.build_parser), light enough
for the operator's venv. tests/runners/test_contract.py starts the servers from the same rendered args.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import pytest
from ib_testkit.factories import MODELS
from ib_testkit.rendered import render_case
from ib_testkit.runner_cases import CASES, RUNNER_MODELS, localize, render_runner_case
from inference_backend.decision import InvalidSpec
from inference_backend.runners.onnx.args import build_parser as onnx_parser
from inference_backend.runners.pytorch.args import build_parser as pytorch_parser

PARSERS = {"pytorch": pytorch_parser, "onnxruntime": onnx_parser}
COMMANDS = {"pytorch": ("ib-pytorch-runner",), "onnxruntime": ("ib-onnxruntime-server",)}


def parse_runner_args(engine: str, args: Sequence[str]) -> argparse.Namespace:
    """The runner's own parser; an argparse error (SystemExit) becomes an AssertionError with the args."""
    try:
        return PARSERS[engine]().parse_args(list(args))
    except SystemExit as e:
        raise AssertionError(f"the {engine} runner's parser rejected {list(args)}") from e


@pytest.mark.parametrize("name", list(CASES))
def test_rendered_args_parse_into_what_the_spec_asked(name: str) -> None:
    engine = CASES[name][0]
    r = render_runner_case(name)
    s, d = r.spec, r.decision
    assert d.model is not None and d.placement is not None and d.batching is not None
    assert r.container.command == COMMANDS[engine]
    ns = parse_runner_args(engine, r.args)
    assert ns.model.startswith("/models")
    assert ns.served_model_name == (s.model.served_name or "ib")
    assert (ns.host, ns.port) == ("0.0.0.0", 8000)
    assert ns.max_model_len == d.model.context_length
    assert ns.batching == d.batching.strategy or (engine == "onnxruntime" and d.batching.strategy == "continuous")
    if s.batching.max_batch_size is not None:
        assert ns.max_batch_size == s.batching.max_batch_size
    if s.batching.max_batch_tokens is not None:
        assert ns.max_batch_tokens == s.batching.max_batch_tokens
    if s.batching.max_wait_millis is not None and ns.batching != "continuous":
        assert ns.max_wait_ms == s.batching.max_wait_millis
    assert ns.kv_cache_memory_fraction == s.kv_cache.memory_fraction
    assert ns.enable_prefix_caching is s.prefix_cache.enabled
    on_gpu = d.placement.gpu is not None
    assert ns.threads == (None if on_gpu else 2)
    if engine == "pytorch":
        assert ns.device == ("cuda" if on_gpu else "cpu")
        sd = s.speculative_decoding
        assert ns.draft_model == ("/draft-models/draft" if sd else None)
        if sd:
            assert ns.num_speculative_tokens == sd.num_speculative_tokens
    else:
        want = "CUDAExecutionProvider,CPUExecutionProvider" if on_gpu else "CPUExecutionProvider"
        assert ns.providers == want


def test_localize_changes_only_paths_host_and_port() -> None:
    r = render_runner_case("serve-pytorch-cpu-draft-continuous")
    local = localize(r.args, {"--model": "/tmp/tiny", "--draft-model": "/tmp/draft"}, port=1234)
    changed = {r.args[i - 1]: (a, b) for i, (a, b) in enumerate(zip(r.args, local, strict=True)) if a != b}
    assert changed == {
        "--model": ("/models/tiny", "/tmp/tiny"),
        "--draft-model": ("/draft-models/draft", "/tmp/draft"),
        "--host": ("0.0.0.0", "127.0.0.1"),
        "--port": ("8000", "1234"),
    }
    ns = parse_runner_args("pytorch", local)
    assert ns.model == "/tmp/tiny" and ns.port == 1234


def test_unknown_flag_fails_the_runner_parser() -> None:
    r = render_runner_case("serve-onnx-cpu-dynamic")
    with pytest.raises(AssertionError, match="rejected"):
        parse_runner_args("onnxruntime", [*r.args, "--draft-model", "/x"])  # the ONNX server has no drafts


def test_renderer_refuses_extra_args_repeating_its_flags() -> None:
    _, body, nodes = CASES["serve-pytorch-cpu-dynamic"]
    body = {**body, "engine": {"extraArgs": ["--no-enable-prefix-caching"]}}
    with pytest.raises(InvalidSpec, match=r"spec\.engine\.extraArgs") as info:
        render_case(body, *nodes, models={**MODELS, **RUNNER_MODELS})
    assert "--no-enable-prefix-caching (same flag as --enable-prefix-caching)" in str(info.value)
