"""The pure parts of the engine-profile harness (bench/): readers of real captured output, the rendered args and
their local mapping, the llama-bench command. No heavy dependencies (runs in `make unit`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import procstats
from bench.bench_model import PRESETS
from bench.gguf_convert import is_plain_gpt2_pretokenizer
from bench.profile_render import localize, render

DATA = Path(__file__).parent / "data" / "bench"


def test_parse_status_of_a_real_process() -> None:
    st = procstats.parse_status((DATA / "proc-status-llama-server.txt").read_text())
    assert st["VmHWM"] == 180_056 * 1024
    assert st["VmRSS"] == 180_056 * 1024
    assert st["VmPeak"] >= st["VmHWM"]
    assert "Threads" not in st  # only sizes with a unit


def test_tree_memory_sums_a_process_and_its_children(tmp_path: Path) -> None:
    """A fake /proc: 10 -> 11 -> 12 (threads' children files), 13 unrelated; VmHWM/VmRSS summed over 10, 11, 12."""
    status = (DATA / "proc-status-sleep.txt").read_text()
    for pid, kids in ((10, {"10": "11", "20": ""}), (11, {"11": "12 "}), (12, {"12": ""}), (13, {"13": ""})):
        for tid, children in kids.items():
            task = tmp_path / str(pid) / "task" / tid
            task.mkdir(parents=True)
            (task / "children").write_text(children)
        (tmp_path / str(pid) / "status").write_text(status)
    assert procstats.tree(10, tmp_path) == [10, 11, 12]
    one = procstats.parse_status(status)
    mem = procstats.tree_memory(10, tmp_path)
    assert mem == {"vmHwmBytes": 3 * one["VmHWM"], "vmRssBytes": 3 * one["VmRSS"], "processes": 3}
    assert procstats.tree_memory(99, tmp_path) == {"vmHwmBytes": 0, "vmRssBytes": 0, "processes": 0}


def test_parse_llama_kv_from_a_real_llama_server_log() -> None:
    # llama-server -m ib-bench-30m-f32.gguf -np 8 -c 4096 ... at LLAMA_ARG_LOG_VERBOSITY=4
    caches = procstats.parse_llama_kv((DATA / "llama-server-b11312-v4.log").read_text())
    assert len(caches) == 1
    kv = caches[0]
    # 8 layers x 4 KV heads x 64 dims x 2 (K, V) x 2 bytes (f16) = 8192 bytes per cell; 8 streams of 512 cells
    assert (kv["cellsPerStream"], kv["streams"], kv["layers"], kv["kType"], kv["vType"]) == (512, 8, 8, "f16", "f16")
    assert kv["bytes"] == 8 * 512 * 8192 == kv["kBytes"] + kv["vBytes"]


def test_parse_runner_kv_lines() -> None:
    lines = (DATA / "runner-kv-lines.log").read_text().splitlines()
    onnx, torch = (procstats.parse_runner_kv(line) for line in lines)
    assert onnx is not None and torch is not None
    assert (onnx["budgetTokens"], onnx["bytesPerToken"], onnx["maxModelLen"]) == (35543492, 512, 512)
    assert torch["budgetBytes"] == 35543642 * 512
    assert procstats.parse_runner_kv("model ready in 1.0s") is None


def test_parse_llama_bench_json() -> None:
    tests = procstats.parse_llama_bench((DATA / "llama-bench-b11312.json").read_text())
    assert [t["test"] for t in tests] == ["pp128", "tg64"]
    for t in tests:
        assert t["tokensPerSecond"] > 0 and t["repetitions"] == 3 and t["threads"] == 2
        assert t["buildNumber"] == 11312


def test_parse_prometheus_sums_label_sets() -> None:
    text = 'vllm:kv_cache_usage_perc{model_name="a"} 0.25\nvllm:kv_cache_usage_perc{model_name="b"} 0.5\nother 3\n'
    assert procstats.parse_prometheus(text, "vllm:kv_cache_usage_perc") == 0.75
    assert procstats.parse_prometheus(text, "absent") is None


def test_cpu_model() -> None:
    cpu = procstats.cpu_model((DATA / "cpuinfo-first-cpu.txt").read_text())
    assert cpu["model"] == "Intel(R) Xeon(R) Processor"
    assert cpu["logicalCpus"] == 1 and "avx2" in cpu["simd"]


def test_gguf_convert_accepts_only_the_plain_gpt2_pretokenizer() -> None:
    tok = json.loads((DATA / "bench-tokenizer-head.json").read_text())
    assert is_plain_gpt2_pretokenizer(tok)
    assert not is_plain_gpt2_pretokenizer(tok | {"pre_tokenizer": tok["pre_tokenizer"] | {"add_prefix_space": True}})
    assert not is_plain_gpt2_pretokenizer(tok | {"pre_tokenizer": {"type": "Metaspace"}})
    assert not is_plain_gpt2_pretokenizer(tok | {"normalizer": {"type": "NFC"}})


@pytest.mark.parametrize("engine", ["pytorch", "onnxruntime", "llamacpp"])
def test_only_paths_host_port_threads_are_mapped(engine: str, tmp_path: Path) -> None:
    m = PRESETS["cpu"]
    body, rendered = render(engine, m, "cpu", 8)
    assert body["hardware"] == {"accelerator": "cpu"} and body["batching"]["maxBatchSize"] == 8
    loc = localize(engine, rendered, model_path=tmp_path / "m", port=1234, threads=2, llama_cache=tmp_path / "c")
    flags = {d.get("flag") or d["env"] for d in loc.mapped}
    model_flag, thread_flag = ("-m", "-t") if engine == "llamacpp" else ("--model", "--threads")
    assert flags <= {model_flag, "--host", "--port", thread_flag, "LLAMA_CACHE"}
    assert len(loc.args) == len(rendered.args)
    changed = {i for i, (a, b) in enumerate(zip(rendered.args, loc.args, strict=True)) if a != b}
    assert {rendered.args[i - 1] for i in changed} <= {model_flag, "--host", "--port", thread_flag}
    assert loc.args[loc.args.index("--port") + 1] == "1234"
    assert loc.args[loc.args.index(model_flag) + 1] == str(tmp_path / "m")
    if engine == "llamacpp":  # 8 slots of the model's context, continuous batching, all on CPU
        a = rendered.args
        assert (a[a.index("-np") + 1], a[a.index("-c") + 1], a[a.index("-ngl") + 1]) == ("8", str(8 * m.context), "0")
        assert "-cb" in a


def test_llama_bench_takes_the_servers_threads_and_batch_flags() -> None:
    from bench.engine_profiles.llama import llama_bench_argv

    server = [
        "-m",
        "x.gguf",
        "-np",
        "8",
        "-c",
        "4096",
        "-t",
        "2",
        "-ngl",
        "0",
        "-b",
        "512",
        "-ub",
        "256",
        "-ctk",
        "q8_0",
        "-ctv",
        "q8_0",
        "--flash-attn",
        "on",
        "--metrics",
    ]
    argv = llama_bench_argv(Path("llama-bench"), Path("m.gguf"), server, 128, 64, 3)
    assert argv[:11] == ["llama-bench", "-m", "m.gguf", "-p", "128", "-n", "64", "-r", "3", "-o", "json"]
    assert argv[11:] == ["-t", "2", "-ngl", "0", "-b", "512", "-ub", "256", "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on"]


def test_bench_model_parameter_count_matches_llama2_7b() -> None:
    # Llama-2-7B: 6,738,415,616 parameters (hidden 4096, 32 layers, intermediate 11008, vocab 32000, untied)
    assert PRESETS["llama2-7b"].parameters() == 6_738_415_616


def test_cpu_busy_seconds_excludes_idle_and_iowait() -> None:
    line = (DATA / "proc-stat-cpu-line.txt").read_text()  # cpu  598588 0 45751 1562166 511 0 1150 7426 0 0
    assert procstats.cpu_busy_seconds(line, 100) == (598588 + 45751 + 1150 + 7426) / 100


def test_stat_cpu_seconds_counts_the_process_and_its_reaped_children() -> None:
    stat = (DATA / "proc-pid-stat.txt").read_text()  # python3 that spun, and waited for a child that spun
    assert stat.split()[1] == "(python3)"
    assert procstats.stat_cpu_seconds(stat, 100) == (20 + 2 + 37 + 4) / 100
    assert procstats.stat_cpu_seconds("1 (a) b) c) R " + " ".join(stat.split()[3:]), 100) == 0.63
