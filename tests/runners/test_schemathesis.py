"""schemathesis fuzzes each runner over HTTP from the runner's own GET /openapi.json (issue 16 item 3): no response
with status 5xx, and every 4xx body is OpenAI-shaped {"error": {message, type, param, code}}.

Each operation gets EXAMPLES schema-valid (positive) and EXAMPLES schema-violating (negative) cases from
schemathesis' hypothesis strategies (the positive ones name the served model, so that they reach generation);
`derandomize` makes the cases the same on every run (a failure reproduces, its curl command is in the message).
The servers run with --max-model-len 64 so that a valid request generates at most 64 tokens: under a minute per
runner on 2 cores.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode

EXAMPLES = 100
SHAPE = {"message": (str,), "type": (str,), "param": (str, type(None)), "code": (str, type(None))}


@pytest.fixture(scope="module", params=["pytorch", "onnx"])
def served(request: Any, models: dict[str, Path], start_server: Any, chat_template: Path) -> Any:
    model = models["tiny" if request.param == "pytorch" else "onnx"]
    return start_server(
        request.param,
        [
            "--model",
            str(model),
            "--served-model-name",
            "tiny",
            "--chat-template",
            str(chat_template),
            "--max-model-len",
            "64",
        ],
    )


def problem(status: int, body: bytes) -> str | None:
    """What is wrong with a response, or None."""
    if status >= 500:
        return f"status {status}: {body[:300]!r}"
    if status < 400:
        return None
    try:
        err = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return f"status {status} without an OpenAI error body: {body[:300]!r}"
    if not isinstance(err, dict) or set(err) != set(SHAPE):
        return f"status {status}: error fields {sorted(err) if isinstance(err, dict) else err!r}"
    bad = [k for k, types in SHAPE.items() if not isinstance(err[k], types)] + ([] if err["message"] else ["message"])
    return f"status {status}: bad {bad} in {err}" if bad else None


def test_problem_spots_what_the_fuzzing_must_not_see() -> None:
    ok = b'{"error": {"message": "m", "type": "invalid_request_error", "param": null, "code": null}}'
    assert problem(400, ok) is None and problem(200, b"anything") is None
    assert problem(500, ok) is not None and problem(503, ok) is not None
    assert problem(404, b'{"detail": "Not Found"}') is not None
    assert problem(422, b'{"error": {"message": "m", "type": "t"}}') is not None
    assert problem(400, b'{"error": {"message": "", "type": "t", "param": null, "code": null}}') is not None


def fuzz(op: Any, mode: GenerationMode, url: str, seen: Counter[tuple[str, int]], failures: list[str]) -> None:
    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=op.as_strategy(mode))
    def send(case: Any) -> None:
        if mode is GenerationMode.POSITIVE and isinstance(case.body, dict) and "model" in case.body:
            case.body["model"] = "tiny"  # else nearly every valid body names an unknown model (404)
        r = case.call(base_url=url, timeout=180)  # generous: a loaded 2-core machine
        seen[(op.label, r.status_code)] += 1
        if (why := problem(r.status_code, r.content)) is not None and len(failures) < 20:
            failures.append(f"{why}\n  {case.as_curl_command()}")

    send()


def test_fuzzing_gives_no_5xx_and_only_openai_shaped_4xx(served: Any) -> None:
    schema = schemathesis.openapi.from_url(served.url + "/openapi.json")
    failures: list[str] = []
    seen: Counter[tuple[str, int]] = Counter()
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.label for op in operations} >= {"POST /v1/completions", "POST /v1/chat/completions"}
    for op in operations:
        fuzz(op, GenerationMode.POSITIVE, served.url, seen, failures)
        if list(op.body) or list(op.iter_parameters()):  # else there is nothing to send schema-violating data in
            fuzz(op, GenerationMode.NEGATIVE, served.url, seen, failures)
    assert not failures, "\n".join(failures)
    for path in ("POST /v1/completions", "POST /v1/chat/completions"):
        codes = {code for (label, code) in seen if label == path}
        assert 200 in codes and 400 in codes, (path, sorted(codes))  # both valid requests and refused ones ran
    print(f"{served.url}: {sorted(seen.items())}")
