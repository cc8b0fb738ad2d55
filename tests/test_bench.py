"""`inference-backend bench` options: validation (exit 2 naming the option), the guidellm scenario, preflight.

guidellm itself is not needed here; tests/runners/test_bench.py validates the scenarios against guidellm's own
schema and runs the command against a real server.
"""

from __future__ import annotations

import http.server
import json
import shlex
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from inference_backend.bench import config, run
from inference_backend.cli import build_parser, main

BASE = ["bench", "--url", "http://127.0.0.1:9", "--model", "m"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def parse(extra: str = "") -> config.BenchConfig:
    return config.from_args(build_parser().parse_args([*BASE, *shlex.split(extra)]))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "1,0"], "argument --concurrency: expected positive integers separated by commas, got '1,0'"),
        (["--concurrency", "a"], "argument --concurrency: expected positive integers"),
        (["--concurrency", "2.5"], "argument --concurrency: expected positive integers"),
        (["--rate", "2,-1"], "argument --rate: expected positive numbers separated by commas"),
        (["--rate", "inf"], "argument --rate: expected positive numbers"),
        (["--sweep", "1"], "argument --sweep: expected at least 2 steps"),
        (["--concurrency", "1", "--rate", "2"], "argument --rate: not allowed with argument --concurrency"),
        (["--prompt-tokens", "0"], "argument --prompt-tokens: expected a positive integer, got '0'"),
        (["--output-stdev", "-1"], "argument --output-stdev: expected an integer >= 0, got '-1'"),
        (["--requests", "x"], "argument --requests: expected a positive integer"),
        (["--seconds", "0"], "argument --seconds: expected a positive number, got '0'"),
        (["--extra-body", "{bad"], "argument --extra-body: not valid JSON"),
        (["--extra-body", "[1]"], "argument --extra-body: expected a JSON object"),
        (["--api", "embeddings"], "argument --api: invalid choice"),
    ],
)
def test_bad_values_exit_2_naming_the_option(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args([*BASE, *args])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_bad_url_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["bench", "--url", "localhost:8000", "--model", "m"])
    assert exc.value.code == 2
    assert "argument --url: expected an http:// or https:// URL, got 'localhost:8000'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--prompt-tokens", "32", "--prompt-min", "40"], "--prompt-min: 40 is above --prompt-tokens 32"),
        (["--output-tokens", "32", "--output-max", "8"], "--output-max: 8 is below --output-tokens 32"),
        (["--concurrency", "1,2,1"], "--concurrency: each value may appear only once, got 1,2,1"),
        (["--concurrency", "2", "--rate-type", "poisson"], "--rate-type: applies to --rate and --sweep"),
    ],
)
def test_bad_combinations_exit_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run, "missing_dependencies", list)  # pretend guidellm is installed: validation comes next
    assert main([*BASE, *args]) == 2
    assert f"error: {message}" in capsys.readouterr().err


def test_without_guidellm_exit_2_pointing_at_the_runners_venv(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = run.importlib.util.find_spec
    monkeypatch.setattr(run.importlib.util, "find_spec", lambda name: None if name == "guidellm" else real(name))
    assert main(BASE) == 2
    err = capsys.readouterr().err
    assert "needs guidellm" in err and "runners venv" in err and "inference-backend[bench]" in err


def test_defaults() -> None:
    cfg = parse()
    assert cfg.kind == "concurrency" and cfg.targets == (1.0, 2.0, 4.0, 8.0)
    assert cfg.requests == config.DEFAULT_REQUESTS and cfg.seconds is None
    assert cfg.processor == "m" and cfg.api == "completions"
    assert parse("--seconds 5").requests is None  # a time bound alone: no request bound added
    assert parse("--processor /models/tok").processor == "/models/tok"
    assert config.url("http://h:8000/v1/") == "http://h:8000"


def test_concurrency_scenario(tmp_path: Path) -> None:
    cfg = parse(
        "--concurrency 1,2 --requests 6 --seconds 30 --prompt-tokens 64 --prompt-stdev 8 --prompt-min 32 "
        """--output-tokens 16 --extra-body '{"ignore_eos": true, "top_k": 5}' --timeout 20"""
    )
    sc = config.scenario(cfg, tmp_path / "guidellm.json")
    spec = sc["spec"]
    assert spec["profile"] == {"kind": "concurrent"}
    assert sc["benchmarks"] == [{"profile.streams": 1}, {"profile.streams": 2}]
    assert spec["constraints"] == [{"kind": "max_requests", "count": 6}, {"kind": "max_duration", "seconds": 30.0}]
    assert spec["backend"] == {
        "kind": "openai_http",
        "target": "http://127.0.0.1:9",
        "model": "m",
        "request_format": "/v1/completions",
        "extras": {"body": {"ignore_eos": True, "top_k": 5}},
        "timeout": 20.0,
    }
    # A zero stdev is left out (guidellm rejects 0; no stdev means a fixed length); absent clips are left out.
    assert spec["data"] == [
        {
            "kind": "synthetic_text",
            "prompt_tokens": 64,
            "prompt_tokens_stdev": 8,
            "prompt_tokens_min": 32,
            "output_tokens": 16,
        }
    ]
    assert spec["tokenizer"] == {"kind": "huggingface_auto", "model": "m"}
    assert spec["outputs"] == [{"kind": "json", "path": str(tmp_path / "guidellm.json")}]
    json.dumps(sc)


def test_rate_and_sweep_scenarios(tmp_path: Path) -> None:
    sc = config.scenario(parse("--rate 2,4.5 --rate-type poisson --api chat"), tmp_path / "r.json")
    assert sc["spec"]["profile"] == {"kind": "poisson"}
    assert sc["benchmarks"] == [{"profile.rate": 2.0}, {"profile.rate": 4.5}]
    assert sc["spec"]["backend"]["request_format"] == "/v1/chat/completions"
    assert "extras" not in sc["spec"]["backend"]
    sc = config.scenario(parse("--sweep 5"), tmp_path / "r.json")
    assert sc["spec"]["profile"] == {"kind": "sweep", "sweep_size": 5, "strategy_type": "constant"}
    assert sc["benchmarks"] == [None]


def test_guidellm_command_and_load_summary(tmp_path: Path) -> None:
    cmd = config.guidellm_command(tmp_path / "s.json", progress=False, python="/py")
    assert cmd == ["/py", "-m", "guidellm", "run", "--scenario", str(tmp_path / "s.json"), "--disable-console"]
    assert "--disable-console" not in config.guidellm_command(tmp_path / "s.json", progress=True)
    load = config.load_summary(parse("""--prompt-stdev 3 --extra-body '{"ignore_eos": true}'"""))
    assert load["promptTokens"] == 256 and load["promptStdev"] == 3 and load["outputTokens"] == 128
    assert load["outputStdev"] == 0 and load["extraBody"] == {"ignore_eos": True}


class _Models(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"object": "list", "data": [{"id": "served", "object": "model"}]}).encode()
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def models_server() -> Iterator[str]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Models)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_preflight(models_server: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run.preflight(models_server, "served") is None
    assert capsys.readouterr().err == ""
    assert run.preflight(models_server, "other") is None  # a warning only: some servers accept any name
    assert "lists served, not --model other" in capsys.readouterr().err
    dead = f"http://127.0.0.1:{free_port()}"
    reason = run.preflight(dead, "served", timeout=5)
    assert reason is not None and reason.startswith(f"cannot reach {dead}: ") and "refused" in reason


def test_dead_server_exits_1_before_starting_guidellm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run, "missing_dependencies", list)
    dead = f"http://127.0.0.1:{free_port()}"
    assert main(["bench", "--url", dead, "--model", "m", "--out", str(tmp_path / "out")]) == 1
    assert f"error: cannot reach {dead}" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_first_error() -> None:
    raw = json.loads((Path(__file__).parent / "data/bench/wrong-model.json").read_text())
    assert "404 Not Found" in (run.first_error(raw) or "")
    assert run.first_error({"benchmarks": [{"requests": {"errored": []}}]}) is None
