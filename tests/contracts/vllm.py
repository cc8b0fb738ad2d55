"""Check `vllm serve` args against the real vLLM (pinned version) without a GPU or a model.

``parse_vllm_args(args)`` runs hack/vllm_parse_args.py with the python of the vLLM venv built by
hack/vllm-venv ($IB_CACHE/venv-vllm-<version>): vLLM's own `vllm serve` parser and validation, then
AsyncEngineArgs.from_cli_args and the no-model config checks. Returns the parsed result or raises
VllmArgsRejected with vLLM's error. Without the venv it skips (fails under IB_REQUIRE_CONTRACTS=1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tests.contracts.parser_harness import ArgsRejected, ParserHarness

VLLM_VERSION = "0.33.0"


class VllmArgsRejected(ArgsRejected):
    label = "vllm 0.33.0"


HARNESS = ParserHarness(
    engine="vllm",
    version=VLLM_VERSION,
    script="vllm_parse_args.py",
    mark="@@VLLM_PARSE_ARGS@@",
    env={"VLLM_TARGET_DEVICE": "cpu", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"},
    rejected=VllmArgsRejected,
)


def parse_vllm_args(args: Sequence[str], *, timeout: float = 600) -> dict[str, Any]:
    """Parse/validate ``args`` (what follows `vllm serve`) with vLLM itself.

    Returns {"args": namespace, "engine_args": AsyncEngineArgs fields, "checks": {...},
    "vllm_version": ...}; raises VllmArgsRejected if vLLM rejects them.
    """
    return HARNESS.parse(args, timeout)


def parse_vllm_args_many(
    arg_lists: Sequence[Sequence[str]], *, timeout: float = 900
) -> list[dict[str, Any] | VllmArgsRejected]:
    """Like parse_vllm_args for many lists in one vLLM process; rejections are returned, not raised."""
    return HARNESS.parse_many(arg_lists, timeout)
