"""Fuzz: specs generated from the generated CRD's schema and node lists with garbage labels and quantities.

Each case checks that pydantic and the CRD's schema agree, that `inference-backend select` and `render` never
raise (exit 0, 2 or 3; 2 with a message for bad input) and that rendered children carry names and label values
the apiserver accepts. IB_FUZZ_EXAMPLES sets the number of cases (default 100); `python -m bench.fuzz` runs
10,000 and prints the counts. Hostile text goes into every string field of the schema (and the rendered children
must expand no variable); hostile model files are fuzzed in tests/test_fuzz_files.py. The apiserver's own verdict
on such specs and children: e2e/test_admission.py.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ib_testkit.factories import node as make_node
from ib_testkit.fuzz import (
    backends,
    cel_messages,
    child_name_problems,
    crd_string_fields,
    expansion_leaks,
    hostile_strings,
    node_lists,
    run_case,
    set_path,
)

EXAMPLES = int(os.environ.get("IB_FUZZ_EXAMPLES", "100"))
CEL = cel_messages()
_FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))


@_FUZZ
@given(backends(), node_lists())
def test_generated_specs_against_garbage_nodes(body: dict[str, Any], nodes: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        outcome = run_case(body, nodes, Path(tmp), CEL)
    assert not child_name_problems(outcome.children)


_SPEC_GARBAGE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=4), st.booleans()),
)
_FIELDS = [
    "replicas",
    "backend",
    "model",
    "model.uri",
    "model.parameters",
    "model.contextLength",
    "hardware",
    "hardware.nodeSelector",
    "hardware.tolerations",
    "batching.maxBatchSize",
    "kvCache.memoryFraction",
    "kvCache.cpuOffloadGiB",
    "prefixCache.enabled",
    "engine.env",
    "engine.extraArgs",
    "resources.requests",
    "speculativeDecoding",
    "objectives.ttftMillis",
]


@_FUZZ
@given(backends(), st.sampled_from(_FIELDS), _SPEC_GARBAGE, node_lists())
def test_garbage_in_one_field(body: dict[str, Any], path: str, value: Any, nodes: dict[str, Any]) -> None:
    """One field replaced by a value of any type: pydantic refuses exactly when the CRD's schema (or a CEL rule)
    does, and the CLI exits 2 for what pydantic refuses."""
    node = body["spec"]
    *parents, last = path.split(".")
    for p in parents:
        child = node.get(p)
        node[p] = child = child if isinstance(child, dict) else {}
        node = child
    node[last] = value
    with tempfile.TemporaryDirectory() as tmp:
        run_case(body, nodes, Path(tmp), CEL)


STRING_FIELDS = crd_string_fields()
CARRIED = ["spec.model.uri", "spec.model.servedName", "spec.engine.extraArgs[]", "spec.engine.env[].value"]
"""The string fields that reach a container's command, args or env values: drawn half the time."""
_NODES = {
    "apiVersion": "v1",
    "kind": "List",
    "items": [make_node("h100", "h100", 8), make_node("l4", "l4", 1), make_node("cpu", cpu="32", memory="128Gi")],
}


@_FUZZ
@given(
    backends(),
    st.one_of(st.sampled_from(STRING_FIELDS), st.sampled_from(CARRIED)),
    hostile_strings(),
    st.one_of(st.just(_NODES), node_lists()),
)
def test_hostile_text_in_every_string_field(body: dict[str, Any], path: str, text: str, nodes: dict[str, Any]) -> None:
    """Any string field (ib_testkit.fuzz.crd_string_fields: every string of the CRD's spec schema) holding hostile
    text: pydantic and the CRD still agree, the CLI never raises, and nothing rendered expands a variable."""
    body["spec"] = set_path(body["spec"], path, text)
    with tempfile.TemporaryDirectory() as tmp:
        outcome = run_case(body, nodes, Path(tmp), CEL)
    assert not child_name_problems(outcome.children)
    assert not expansion_leaks(outcome.children)
