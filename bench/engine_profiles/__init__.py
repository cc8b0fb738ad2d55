"""Engine profiles, measured: the same model served by the PyTorch runner (safetensors), our ONNX Runtime server
(ONNX) and llama-server (GGUF), each started with the args the operator renders, loaded by `inference-backend bench`.

    make bench-engines          (the CPU profiles of this machine, under flock /tmp/ib-bench.lock)
    $(hack/runners-venv)/bin/python -m bench.engine_profiles --preset cpu --out bench/results --label cpu
    bench/gpu/h200.sh [--reduced] (the 7B shape on one GPU; --reduced: the tiny model on CPU, same code path)

Steps: bench model (bench/bench_model.py) -> per engine: render (bench/profile_render.py) -> start the real
process -> /health -> greedy tokens on a fixed prompt (all formats must agree with transformers) -> warm-up ->
`inference-backend bench` at each concurrency -> peak RSS (VmHWM of the server's process tree), KV cache size (from
the server's own log) -> stop. Then llama-bench on the same GGUF with the same threads, and llama-server's own
timings at concurrency 1 for comparison. Every step has a time budget; a step that cannot run is recorded as
skipped with its reason, and the rest goes on. Writes OUT/LABEL/<engine>.json, OUT/LABEL/llama-bench.json,
OUT/LABEL-profiles.json (combined, with provenance) and OUT/LABEL-profiles.png.
"""

# The modules, in the order a run uses them (this docstring is also the --help text):
#   cli.py         the command line (`python -m bench.engine_profiles`, __main__.py), and the Run it builds
#   run.py         Run: prerequisites, bandwidth, the model in each format, one engine after the other, the outputs
#   per_engine.py  everything that differs per engine: the format (from its card), a Launcher per local engine
#   serving.py     a server as a local process: start, /health, HTTP, stop; transformers' greedy reference
#   load.py        the load (`inference-backend bench`) and the fixed prompts
#   llama.py       llama.cpp's tools beside llama-server: llama-bench, server timings, KV probe, CUDA build
#   machine.py     copy bandwidth and the decode bound, CPU time of other work on the machine
#   report.py      the combined JSON, the table, the decode bounds, the plot
#   steps.py       the time budget, the step log, Skip
