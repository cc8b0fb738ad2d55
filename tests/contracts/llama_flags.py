"""Fast (no boot) checks of llama-server args against the pinned build's flag list.

The list is tests/contracts/data/llama-server-b<N>.flags.txt, generated from the real binary's --help
by hack/llama_server_flags.py. This mirrors common/arg.cpp's parser: every token starting with '-' must
be a known option (otherwise "error: invalid argument"), removed options are still known but fatal,
and an option with a value hint consumes the next token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ib_testkit.llama_server import llama_cpp_pins

DATA = Path(__file__).resolve().parent / "data"


@dataclass(frozen=True)
class LlamaFlag:
    names: tuple[str, ...]
    value_hint: str | None
    env: str | None
    removed: bool


@cache
def llama_server_flags(build: str | None = None) -> dict[str, LlamaFlag]:
    """Every accepted spelling (aliases and negations) -> its option, for build b<N> (default: pinned)."""
    build = build or llama_cpp_pins()["LLAMA_CPP_BUILD"]
    out: dict[str, LlamaFlag] = {}
    for line in (DATA / f"llama-server-b{build}.flags.txt").read_text(encoding="utf-8").splitlines():
        if line.startswith("#") or not line.strip():
            continue
        names, hint, env, status = line.split("\t")
        flag = LlamaFlag(
            tuple(names.split(",")), None if hint == "-" else hint, None if env == "-" else env, status == "removed"
        )
        for name in flag.names:
            out[name] = flag
    return out


def check_llama_server_args(args: Sequence[str], *, build: str | None = None) -> list[str]:
    """Problems llama-server (b<N>) would have with ``args``; [] if its arg parser accepts them."""
    flags = llama_server_flags(build)
    errors: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        name = arg.replace("_", "-") if arg.startswith("--") else arg  # arg.cpp normalises '_' in long names
        flag = flags.get(name)
        if flag is None:
            errors.append(f"invalid argument: {arg}")
            continue
        if flag.removed:
            errors.append(f"{arg}: the argument has been removed in this build")
        if flag.value_hint is not None:
            if i >= len(args):
                errors.append(f"{arg}: expected value {flag.value_hint}")
            i += 1
    return errors
