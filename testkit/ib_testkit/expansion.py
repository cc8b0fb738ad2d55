"""The kubelet's ``$(VAR)`` expansion of a container's command, args and env values, for the tests that prove no
user text expands (tests/test_expansion.py).

``expand`` is a line-for-line port of k8s.io/kubernetes third_party/forked/golang/expansion (Expand,
tryReadVariableName, MappingFuncFor) at the pinned Kubernetes release; ``kubelet`` runs the real Go code on the
same cases (the ``kube-expansion`` command e2e/build-binaries builds from e2e/gomod/kubernetes/expansion), and a
test holds the two equal. ``container_env`` gives a container's environment as the kubelet builds it, with every
value that comes from elsewhere (a Secret, a field, the LeaderWorkerSet's variables) replaced by a marker, so that a
marker in an expanded string shows which variable leaked into it.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

Json = dict[str, Any]


def _read_name(text: str) -> tuple[str, bool, int]:
    """tryReadVariableName: (what was read, whether it is a variable name, bytes advanced) after a ``$``."""
    first = text[0]
    if first == "$":  # escaped operator
        return "$", False, 1
    if first == "(":
        close = text.find(")", 1)
        if close >= 0:
            return text[1:close], True, close + 1
        return "$(", False, 1  # incomplete reference
    return "$" + first, False, 1


def mapping_for(*contexts: Mapping[str, str]) -> Callable[[str], str]:
    """MappingFuncFor: the first context holding the name, else the reference itself, unexpanded."""

    def look(name: str) -> str:
        for ctx in contexts:
            if name in ctx:
                return ctx[name]
        return f"$({name})"

    return look


def expand(text: str, mapping: Callable[[str], str]) -> str:
    """Expand: ``$(NAME)`` replaced through ``mapping``, ``$$`` -> ``$``, anything else kept. (Go walks bytes and
    decodes one rune after a ``$``; on a Python str one character is that rune.)"""
    out: list[str] = []
    checkpoint = cursor = 0
    while cursor < len(text):
        if text[cursor] == "$" and cursor + 1 < len(text):
            out.append(text[checkpoint:cursor])
            read, is_var, advance = _read_name(text[cursor + 1 :])
            out.append(mapping(read) if is_var else read)
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    return "".join(out) + text[checkpoint:]


def marker(name: str) -> str:
    """The value a variable gets in these tests when it does not come from a literal: it cannot occur in text."""
    return f"\u00abENV:{name}\u00bb"


LWS_VARIABLES = ("LWS_LEADER_ADDRESS", "LWS_GROUP_SIZE", "LWS_WORKER_INDEX")
"""Set on every container of a LeaderWorkerSet's pods by its controller (sigs.k8s.io/lws pkg/utils/pod
AddLWSVariables), before the container's own env."""
SERVICE_VARIABLES = ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")
"""The master Service's variables, which the kubelet adds even with enableServiceLinks: false."""


def container_env(container: Json) -> list[tuple[str, str]]:
    """The (name, raw value) pairs the kubelet expands for ``container``, in order: the LeaderWorkerSet's and the
    master Service's variables, then the container's env (valueFrom: a marker)."""
    pairs = [(n, marker(n)) for n in (*LWS_VARIABLES, *SERVICE_VARIABLES)]
    for e in container.get("env") or []:
        pairs.append((e["name"], e["value"] if "value" in e else marker(e["name"])))
    return pairs


def expand_container(container: Json) -> tuple[list[str], list[str]]:
    """(command + args, env values) of ``container`` as the kubelet runs them (the Python port)."""
    env: dict[str, str] = {}
    values = []
    for name, raw in container_env(container):
        env[name] = expand(raw, mapping_for(env))
        values.append(env[name])
    look = mapping_for(env)
    texts = [expand(t, look) for t in [*(container.get("command") or []), *(container.get("args") or [])]]
    return texts, values


def kubelet_binary() -> Path | None:
    """The kube-expansion command e2e/build-binaries built, or None."""
    cache = Path(os.environ.get("IB_CACHE", Path.home() / ".cache/inference-backend")) / "bin"
    found = sorted(cache.glob("kube-expansion-v*"))
    return found[-1] if found else None


def kubelet(
    cases: Sequence[tuple[Sequence[tuple[str, str]], Sequence[str]]], binary: Path
) -> list[tuple[list[str], list[str]]]:
    """The real Go expansion over ``cases`` ((env pairs, texts) each): (expanded texts, expanded env values)."""
    body = {"cases": [{"env": [list(p) for p in env], "texts": list(texts)} for env, texts in cases]}
    res = subprocess.run([str(binary)], input=json.dumps(body), capture_output=True, text=True, check=True)
    out = json.loads(res.stdout)
    return [(t or [], e or []) for t, e in zip(out["expanded"], out["env"], strict=True)]
