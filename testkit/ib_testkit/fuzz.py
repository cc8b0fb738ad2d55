"""Fuzzing inputs: InferenceBackend specs generated from the generated CRD's schema (hypothesis-jsonschema), node
lists with garbage labels and quantities, and the one check every generated case must pass (``run_case``).

Shared by tests/test_fuzz.py (a few hundred cases per run), e2e/test_admission.py (the real apiserver's verdict)
and bench/fuzz.py (the 10,000-case run). Needs hypothesis and hypothesis-jsonschema (the dev extra).
"""

from __future__ import annotations

import copy
import io
import json
import math
import re
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema
from inference_backend.api import InferenceBackend
from inference_backend.cli import main
from inference_backend.crdgen import inference_backend_crd
from inference_backend.decision import InvalidSpec
from inference_backend.engines import check_spec
from pydantic import ValidationError

from ib_testkit.factories import node as make_node

Json = dict[str, Any]
_DROP = ("x-kubernetes-validations", "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "description")


def _json_schema(node: Json) -> Json:
    """The structural OpenAPI v3.0 node as JSON Schema: int-or-string as anyOf, boolean exclusive bounds as
    numbers, patterns anchored at the very end (Go's and Rust's ``$``; Python's also matches before a final
    newline) and no fields beyond those declared (kubectl's strict field validation refuses unknown fields)."""
    out: Json = {}
    for key, value in node.items():
        if key in _DROP or (key in ("exclusiveMinimum", "exclusiveMaximum") and isinstance(value, bool)):
            continue
        if key == "properties":
            out[key] = {k: _json_schema(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _json_schema(value)
        elif key == "pattern":
            out[key] = value[:-1] + r"\Z" if value.endswith("$") else value
        elif key == "x-kubernetes-int-or-string":
            out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        elif key == "x-kubernetes-preserve-unknown-fields":
            continue
        else:
            out[key] = value
    for bound, flag in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        if node.get(flag) is True:
            out[flag] = out.pop(bound)
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    if "anyOf" in out and "maxLength" in out:  # int-or-string: the length applies to the string branch
        out["anyOf"] = [{"type": "integer"}, {"type": "string", "maxLength": out.pop("maxLength")}]
    return out


def spec_schema() -> Json:
    crd = inference_backend_crd()
    spec: Json = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return _json_schema(spec)


def cel_messages() -> set[str]:
    """Every CEL rule's message in the CRD."""
    out: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for rule in node.get("x-kubernetes-validations", []):
                out.add(rule["message"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(inference_backend_crd())
    return out


_SCHEMA = spec_schema()
_VALIDATOR = jsonschema.Draft7Validator(_SCHEMA)
NAMES = st.sampled_from(["llama-chat", "llama.chat", "1abc", "qwen2.5-7b-instruct", "a" * 63, "b" * 64, "c" * 242])
_URIS = st.sampled_from(
    [
        "hf://Qwen/Qwen2.5-0.5B-Instruct",
        "hf://bartowski/L-GGUF/L-Q4_K_M.gguf",
        "s3://bucket/m/model.onnx",
        "pvc://weights/llama",
        "oci://registry.example.com/m:1",
        "gs://b/m.pt",
    ]
)
_PARAMS = st.sampled_from(["0.5B", "1.5B", "8B", "70B", "0.001K", "9999.9999T", "350M"])


def _plausible(spec: Json, uri: str, params: str) -> Json:
    """Half the generated specs keep what the schema generated; the others get a real model source, so the cases
    reach the selection and the renderers instead of stopping at 'model.uri needed'."""
    spec = copy.deepcopy(spec)
    model = spec.setdefault("model", {})
    model.pop("modelRef", None)
    model["uri"], model["parameters"] = uri, params
    model.pop("format", None)
    model.pop("quantization", None)
    spec.pop("speculativeDecoding", None)
    hardware = spec.get("hardware", {})
    for key in ("nodeSelector", "gpuProducts"):
        hardware.pop(key, None)
    return spec


@st.composite
def backends(draw: st.DrawFn) -> Json:
    """An InferenceBackend whose spec satisfies the CRD's structural schema (types, bounds, patterns, lengths);
    the CEL rules may still refuse it."""
    spec: Json = draw(from_schema(_SCHEMA))  # type: ignore[arg-type]  # the spec schema is an object
    if draw(st.integers(0, 3)):
        spec = _plausible(spec, draw(_URIS), draw(_PARAMS))
    return {
        "apiVersion": "serving.inferencebackend.io/v1alpha1",
        "kind": "InferenceBackend",
        "metadata": {"name": draw(NAMES), "namespace": "default"},
        "spec": spec,
    }


_GARBAGE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.just(1e400),
    st.text(max_size=12),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.sampled_from(["1e400", "-1", "16Gi", "1.5", "0", "NaN", "8Ei", "1e99", "", " 4", "4 ", "0x10"]),
)
_LABEL_KEYS = st.sampled_from(
    [
        "nvidia.com/gpu.product",
        "nvidia.com/gpu.memory",
        "nvidia.com/gpu.count",
        "nvidia.com/cuda.compute.major",
        "nvidia.com/cuda.compute.minor",
        "nvidia.com/mig.strategy",
        "nvidia.com/mig-1g.10gb.memory",
        "kubernetes.io/arch",
    ]
)
_ALLOC_KEYS = st.sampled_from(
    [
        "cpu",
        "memory",
        "nvidia.com/gpu",
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/mig-3g.40gb",
        "nvidia.com/mig-",
        "nvidia.com/mig-xx",
    ]
)


@st.composite
def node_lists(draw: st.DrawFn) -> Json:
    """A kind: List of Nodes: real shapes (factories.node) with labels and quantities replaced by garbage."""
    items: list[Any] = []
    clean = draw(st.booleans())  # half the lists are well-formed, so that cases reach the renderers
    for i in range(draw(st.integers(0 if not clean else 1, 4))):
        gpu = draw(st.sampled_from([None, "h100", "l4", "t4", "a100-40"]))
        mig = draw(st.sampled_from([None, None, "single", "mixed"])) if gpu else None
        n = make_node(f"n{i}", gpu, draw(st.integers(1, 8)), gfd=draw(st.booleans()), mig=mig)
        if clean:
            items.append(n)
            continue
        for _ in range(draw(st.integers(0, 3))):
            n["metadata"]["labels"][draw(_LABEL_KEYS)] = draw(st.one_of(_GARBAGE, st.text(max_size=8)))
        for _ in range(draw(st.integers(0, 3))):
            n["status"]["allocatable"][draw(_ALLOC_KEYS)] = draw(_GARBAGE)
        if draw(st.integers(0, 9)) == 0:
            n[draw(st.sampled_from(["metadata", "spec", "status"]))] = draw(_GARBAGE)
        items.append(n if draw(st.integers(0, 19)) else draw(_GARBAGE))
    return {"apiVersion": "v1", "kind": "List", "items": items}


@dataclass
class Outcome:
    """What one case gave: the verdicts, the CLI's exit status and messages, and the rendered children."""

    structural_ok: bool
    pydantic_ok: bool
    pydantic_errors: list[str] = field(default_factory=list)
    select_rc: int | None = None
    render_rc: int | None = None
    rules_ok: bool = True
    """The engine-card rules (engines/rules.py: CEL in the CRD, checked by the selection offline)."""
    stderr: str = ""
    children: list[Json] = field(default_factory=list)

    @property
    def offline_ok(self) -> bool:
        """What the offline CLI admits: pydantic and the engine-card rules."""
        return self.pydantic_ok and self.rules_ok


class Crash(AssertionError):
    """The CLI raised (a traceback) or the verdicts disagree."""


def pruned(value: Any) -> Any:
    """What the apiserver validates: null object fields are dropped first (non-nullable fields, apiextensions v1);
    nulls inside lists stay (and are refused)."""
    if isinstance(value, dict):
        return {k: pruned(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [pruned(v) for v in value]
    return value


def structural_ok(body: Json) -> bool:
    return bool(_VALIDATOR.is_valid(pruned(body.get("spec"))))


def _finite(obj: Any) -> bool:
    if isinstance(obj, float):
        return math.isfinite(obj)
    if isinstance(obj, dict):
        return all(_finite(v) for v in obj.values())
    if isinstance(obj, list):
        return all(_finite(v) for v in obj)
    return True


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            rc = main(argv)
        except Exception as exc:
            raise Crash(f"inference-backend {' '.join(argv[:1])} raised {type(exc).__name__}: {exc}") from exc
    return rc, out.getvalue(), err.getvalue()


def run_case(body: Json, nodes: Json, workdir: Path, cel: set[str] | None = None) -> Outcome:
    """Check one case: pydantic's verdict agrees with the structural schema (it refuses a structurally valid spec
    only for a rule the CRD states in CEL), the CLI's select and render exit 0, 2 or 3 and never raise, and a spec
    pydantic refuses gives exit 2. Returns the outcome with the rendered children (for the apiserver's check)."""
    cel = cel_messages() if cel is None else cel
    s_ok = structural_ok(body)
    try:
        ib = InferenceBackend.model_validate(body)
        outcome = Outcome(s_ok, True)
        try:
            check_spec(ib.spec)
        except InvalidSpec as exc:
            outcome.rules_ok = False
            outcome.pydantic_errors = [str(exc)]
    except ValidationError as exc:
        errors = [e["msg"].removeprefix("Value error, ") for e in exc.errors()]
        outcome = Outcome(s_ok, False, errors)
        if s_ok:
            structural = [e for e in exc.errors() if e["type"] != "value_error" and e["loc"][:1] == ("spec",)]
            if structural:
                raise Crash(f"pydantic refuses a structurally valid spec: {structural}") from exc
    if outcome.pydantic_ok and not s_ok:
        raise Crash(
            f"pydantic admits what the CRD's schema refuses: {list(_VALIDATOR.iter_errors(pruned(body['spec'])))[:2]}"
        )
    ib_file, nodes_file = workdir / "ib.yaml", workdir / "nodes.yaml"
    ib_file.write_text(yaml.safe_dump(body) if _finite(body) else json.dumps(body))
    nodes_file.write_text(yaml.safe_dump(nodes, allow_unicode=True))
    for cmd in ("select", "render"):
        rc, out, err = _cli([cmd, "-f", str(ib_file), "--nodes", str(nodes_file)])
        if rc not in (0, 2, 3):
            raise Crash(f"{cmd} exited {rc}: {err}")
        if not (outcome.pydantic_ok and outcome.rules_ok) and rc != 2:
            raise Crash(f"{cmd} exited {rc} on a spec pydantic refuses ({outcome.pydantic_errors})")
        if rc == 2 and not err.strip():
            raise Crash(f"{cmd} exited 2 without naming the problem")
        outcome.stderr += err
        if cmd == "select":
            outcome.select_rc = rc
        else:
            outcome.render_rc = rc
            if rc in (0, 3) and out.strip():
                outcome.children = [d for d in yaml.safe_load_all(out) if d]
    return outcome


def string_fields(node: dict[str, Any], path: str = "spec") -> Iterator[str]:
    """Every string leaf of the CRD's spec schema (lists as ``[]``, map values as ``{}``, map keys as ``{key}``);
    enums are not free text and are left out."""
    kind = node.get("type")
    if (kind == "string" and "enum" not in node) or node.get("x-kubernetes-int-or-string"):
        yield path
    for name, sub in (node.get("properties") or {}).items():
        yield from string_fields(sub, f"{path}.{name}")
    if kind == "array":
        yield from string_fields(node["items"], f"{path}[]")
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        yield f"{path}{{key}}"
        yield from string_fields(extra, f"{path}{{}}")


def set_path(body: dict[str, Any], path: str, value: str) -> dict[str, Any]:
    """``body`` with the leaf at ``path`` set to ``value`` (missing objects created, lists at index 0)."""
    doc = copy.deepcopy(body)
    steps = path.removeprefix("spec.").replace("[]", ".[]").replace("{key}", ".{key}").replace("{}", ".{}")
    parts = [p for p in steps.split(".") if p]
    holder: Any = doc
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "[]":
            if not holder:
                holder.append(value if last else {})
            if last:
                holder[0] = value
            holder = holder[0]
        elif part == "{key}":
            holder[value] = "v"
        elif part == "{}":
            holder["k"] = value
        elif last:
            holder[part] = value
        else:
            nxt = parts[i + 1]
            holder = holder.setdefault(part, [] if nxt == "[]" else {})
    return doc


_DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def child_name_problems(children: list[Json]) -> list[str]:
    """Names and label values of the children that the apiserver would refuse (checked offline; the e2e test
    asks the apiserver itself)."""
    problems = []
    for obj in children:
        name = obj["metadata"]["name"]
        if obj["kind"] == "Service" and not (len(name) <= 63 and _DNS1035.fullmatch(name)):
            problems.append(f"Service name {name!r}")
        for value in obj["metadata"].get("labels", {}).values():
            if not (len(value) <= 63 and _LABEL_VALUE.fullmatch(value)):
                problems.append(f"{obj['kind']} label value {value!r}")
    return problems


HOSTILE_STRINGS = (
    "$(HF_TOKEN)",
    "$$(AWS_SECRET_ACCESS_KEY)",
    "x$$$(HF_TOKEN)$",
    "$(",
    "$",
    "--help",
    "-x",
    "--served-model-name=x",
    "../../etc/passwd",
    "/proc/self/environ",
    "a/../b",
    "a b",
    "tab\there",
    "new\nline",
    "nul\x00",
    "\u2028",
    "\u00a0",
    "\ufeff",
    "é\u4e2d",
    "x" * 5000,
    "",
    " ",
    "${HF_TOKEN}",
    "`id`",
    "'; rm -rf /",
    "{{.Values}}",
    "%s%n",
    "\\",
)
"""Texts a careless or hostile user puts in a string field: variable references the kubelet would expand, flags,
paths that leave their directory, whitespace and control characters, template and format syntax, a long one."""


def hostile_strings() -> st.SearchStrategy[str]:
    alphabet = st.sampled_from(list("$()-/.\\ \t\n\x00\u2028\u00a0a=:@{}`'\"\u4e2d"))
    return st.one_of(
        st.sampled_from(HOSTILE_STRINGS),
        st.text(alphabet, max_size=16),
        st.builds(
            lambda a, b: a + b,
            st.sampled_from(["hf://o/", "s3://b/", "pvc://c/", "https://h/"]),
            st.sampled_from(HOSTILE_STRINGS),
        ),
    )


def crd_string_fields() -> list[str]:
    crd = inference_backend_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return sorted(set(string_fields(crd)))


def expansion_leaks(children: list[Json]) -> list[str]:
    """The ``$(NAME)`` references the kubelet would read in the rendered children beyond the operator's own (the
    LeaderWorkerSet's), whether or not NAME is defined: the command, args and literal env values of every container,
    expanded with a mapping that answers every name (ib_testkit.expansion)."""
    from ib_testkit.expansion import LWS_VARIABLES, expand, marker

    leaks = []
    for obj in children:
        spec = obj.get("spec") or {}
        lwt = spec.get("leaderWorkerTemplate") or {}
        for tpl in (spec.get("template"), lwt.get("leaderTemplate"), lwt.get("workerTemplate")):
            if not tpl:
                continue
            for c in [*tpl["spec"].get("initContainers", []), *tpl["spec"]["containers"]]:
                texts = [*(c.get("command") or []), *(c.get("args") or [])]
                texts += [e["value"] for e in c.get("env") or [] if isinstance(e.get("value"), str)]
                for t in texts:
                    read: list[str] = []

                    def look(name: str, read: list[str] = read) -> str:
                        read.append(name)
                        return marker(name)

                    expand(t, look)
                    if any(name not in LWS_VARIABLES for name in read):
                        leaks.append(f"{obj['kind']} {c['name']}: {t[:200]!r} reads {read}")
    return leaks
