"""Check `python -m sglang.launch_server` args against the real SGLang (pinned version) without a GPU or a model.

``parse_sglang_args(args)`` runs hack/sglang_parse_args.py with the python of the SGLang venv built by
hack/sglang-venv ($IB_CACHE/venv-sglang-<version>): SGLang's own prepare_server_args (its argparse
parser), then ServerArgs.resolve_once (the resolution pipeline) and check_server_args, against a
config-only stand-in for a model that is not a local directory. Returns the parsed and resolved values
or raises SglangArgsRejected with SGLang's error. Without the venv it skips (fails under
IB_REQUIRE_CONTRACTS=1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tests.contracts.parser_harness import ArgsRejected, ParserHarness

SGLANG_VERSION = "0.5.23"


class SglangArgsRejected(ArgsRejected):
    label = "sglang 0.5.23"


HARNESS = ParserHarness(
    engine="sglang",
    version=SGLANG_VERSION,
    script="sglang_parse_args.py",
    mark="@@SGLANG_PARSE_ARGS@@",
    env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "DO_NOT_TRACK": "1"},
    rejected=SglangArgsRejected,
)


def parse_sglang_args(args: Sequence[str], *, timeout: float = 300) -> dict[str, Any]:
    """Parse, resolve and check ``args`` (what follows `python -m sglang.launch_server`) with SGLang itself.

    Returns {"args": raw parsed fields, "resolved": resolved fields, "stand_ins": {...},
    "sglang_version": ...}; raises SglangArgsRejected if SGLang rejects them.
    """
    return HARNESS.parse(args, timeout)


def parse_sglang_args_many(
    arg_lists: Sequence[Sequence[str]], *, timeout: float = 600
) -> list[dict[str, Any] | SglangArgsRejected]:
    """Like parse_sglang_args for many lists in one SGLang import; rejections are returned, not raised."""
    return HARNESS.parse_many(arg_lists, timeout)
