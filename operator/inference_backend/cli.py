"""The ``inference-backend`` command: offline ``select`` and ``render`` for GitOps pre-merge checks and tests.

Also ``model inspect`` (a Model from a model's files), ``fetch`` (model weights), ``bench`` (load test of a served
model, see docs/bench.md) and ``operator``.

Exit status: 0 when every input is satisfiable, 3 when one is not, 2 for invalid input (the message names the
field; no traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from inference_backend.api import InferenceBackend
from inference_backend.bench.run import add_arguments as add_bench_arguments
from inference_backend.controller.config import add_host_path_argument, host_paths
from inference_backend.facts import duplicate_nodes, group_nodes
from inference_backend.manifests import ManifestError, load, registry
from inference_backend.selection import Decision, InvalidSpec, select

if TYPE_CHECKING:
    from inference_backend.modelinfo.adapter import Limits

EXIT_OK, EXIT_INVALID, EXIT_UNSATISFIABLE = 0, 2, 3


def _inputs(args: argparse.Namespace) -> tuple[list[InferenceBackend], list, dict]:  # type: ignore[type-arg]
    ibs, models, _ = load(args.file)
    if not ibs:
        raise ManifestError(f"{args.file}: no InferenceBackend found")
    _, _, nodes = load(args.nodes)
    twice = duplicate_nodes(nodes)
    if twice:
        raise ManifestError(
            f"{args.nodes}: node {twice[0]} is listed twice (a node name is unique in a cluster; "
            "counting it twice would double its capacity): remove the copy"
        )
    for path in args.models or []:
        models += load(path)[1]
    return ibs, models, group_nodes(nodes)


def _decide(ib: InferenceBackend, models: list, cluster: dict) -> Decision:  # type: ignore[type-arg]
    namespace = ib.metadata.namespace or "default"
    try:
        return select(ib.spec, cluster, registry(models, namespace))
    except InvalidSpec as exc:
        raise ManifestError(f"InferenceBackend {ib.metadata.name}: {exc}") from exc


def format_text(name: str, decision: Decision) -> str:
    lines = [f"InferenceBackend {name}: " + (f"backend {decision.backend}" if decision.backend else "NOT SATISFIABLE")]
    lines += [f"  {i}. {r}" for i, r in enumerate(decision.reasons, 1)]
    if decision.rejected:
        lines.append("  rejected:")
        lines += [f"    - {b}: {r}" for b, r in decision.rejected]
    if decision.unsupported:
        lines.append("  not supported by the engine:")
        lines += [f"    - {u}" for u in decision.unsupported]
    return "\n".join(lines)


def cmd_select(args: argparse.Namespace) -> int:
    ibs, models, cluster = _inputs(args)
    status = EXIT_OK
    for ib in ibs:
        decision = _decide(ib, models, cluster)
        if not decision.satisfiable:
            status = EXIT_UNSATISFIABLE
        if args.output == "json":
            obj = {"name": ib.metadata.name, "namespace": ib.metadata.namespace or "default", **decision.to_json()}
            print(json.dumps(obj, sort_keys=True))
        else:
            print(format_text(ib.metadata.name, decision))
    return status


def cmd_render(args: argparse.Namespace) -> int:
    """Multi-document YAML of what the operator would apply (render.render, the same code path)."""
    from inference_backend import images
    from inference_backend.autoscaling import Settings
    from inference_backend.render import render_result, to_yaml

    scaling = Settings(args.prometheus_address, args.autoscaling_label_matchers)
    try:
        policy = images.from_args(args)
    except images.ImagePolicyError as exc:
        raise ManifestError(f"image policy: {exc}") from exc

    ibs, models, cluster = _inputs(args)
    status = EXIT_OK
    out: list[str] = []
    for ib in ibs:
        decision = _decide(ib, models, cluster)
        if not decision.satisfiable:
            status = EXIT_UNSATISFIABLE
            print(format_text(ib.metadata.name, decision), file=sys.stderr)
            continue
        try:
            result = render_result(ib, decision, scaling=scaling, image_policy=policy, host_paths=host_paths(args))
        except InvalidSpec as exc:
            raise ManifestError(f"InferenceBackend {ib.metadata.name}: {exc}") from exc
        for note in result.unsupported:
            print(f"# {ib.metadata.name}: not supported by {decision.backend}: {note}", file=sys.stderr)
        out.append(to_yaml(list(result.objects)))
    sys.stdout.write("".join(out))
    return status


def _adapter_limits(args: argparse.Namespace) -> Limits:
    from inference_backend.modelinfo.adapter import Limits

    modules = tuple(m for m in (args.target_modules or "").split(",") if m)
    return Limits(args.max_rank, args.adapter_format, modules, args.rank, args.base_architecture, not args.no_dora)


def cmd_fetch(args: argparse.Namespace) -> int:
    from inference_backend.fetch import FetchError, fetch
    from inference_backend.modelinfo.adapter import check_adapter
    from inference_backend.modelinfo.errors import InspectError

    try:
        fetch(args.uri, args.dir, fmt=args.format, include=args.include or (), workers=args.workers)
        if args.adapter:
            check_adapter(args.dir, _adapter_limits(args))
    except (FetchError, InspectError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return EXIT_OK


def cmd_adapter_check(args: argparse.Namespace) -> int:
    from inference_backend.modelinfo.adapter import check_adapter
    from inference_backend.modelinfo.errors import InspectError

    try:
        check_adapter(args.dir, _adapter_limits(args))
    except InspectError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return EXIT_OK


def cmd_adapter_sync(args: argparse.Namespace) -> int:
    """The adapters sidecar (docs/adapters.md): fetch, check and load the ConfigMap's adapters for ever."""
    import dataclasses
    import logging
    import pathlib

    from inference_backend import sidecar
    from inference_backend.fetch import fetch
    from inference_backend.modelinfo.adapter import check_adapter

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    limits = _adapter_limits(args)

    def fetch_one(w: sidecar.Wanted) -> None:
        fetch(w.uri, w.path)
        check_adapter(w.path, dataclasses.replace(limits, rank=w.rank))

    sync = sidecar.Sync(pathlib.Path(args.config), args.engine.rstrip("/"), args.served_name, fetch_one)
    sidecar.run(sync, args.port, args.interval)
    return EXIT_OK


def _adapter_flags(p: argparse.ArgumentParser, required: bool) -> None:
    p.add_argument(
        "--max-rank",
        type=int,
        required=required,
        default=1024 if not required else None,
        help="the engine's LoRA rank limit",
    )
    p.add_argument("--adapter-format", choices=("peft", "gguf"), default="peft", help="the adapter files it loads")
    p.add_argument("--target-modules", help="the modules it adapts, comma-separated (default: any)")
    p.add_argument("--rank", type=int, help="the rank spec.adapters[].rank declares (checked equal)")
    p.add_argument("--base-architecture", help="the served model's architecture (checked against the adapter's)")
    p.add_argument("--no-dora", action="store_true", help="the engine serves no DoRA adapters")


def cmd_model_inspect(args: argparse.Namespace) -> int:
    """Print the Model read from a Hugging Face directory, a GGUF file or an ONNX model (docs/model-inspect.md)."""
    from pathlib import Path

    from inference_backend.modelinfo import InspectError, inspect_path
    from inference_backend.modelinfo.adapter import is_adapter

    if is_adapter(Path(args.path)):
        return _inspect_adapter(args)
    try:
        found = inspect_path(args.path, uri=args.uri, name=args.name, namespace=args.namespace)
    except InspectError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    if args.output == "json":
        print(json.dumps(found.wire(), indent=2))
    else:
        sys.stdout.write(found.to_yaml())
    return EXIT_OK


def _inspect_adapter(args: argparse.Namespace) -> int:
    """A LoRA adapter: the spec.adapters entry it makes, with where each fact was read (docs/adapters.md)."""
    from pathlib import Path

    import yaml

    from inference_backend.modelinfo import InspectError, default_name, default_uri
    from inference_backend.modelinfo.adapter import entry, read_adapter

    try:
        facts = read_adapter(args.path)
        doc = entry(facts, args.name or default_name(Path(args.path)), args.uri or default_uri(Path(args.path)))
    except InspectError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    info = {
        "format": facts.format,
        "baseModel": facts.base_model,
        "baseArchitecture": facts.base_architecture,
        "targetModulesRegex": facts.target_modules_regex,
        "dora": facts.use_dora or None,
        "alpha": facts.alpha,
    }
    if args.output == "json":
        print(json.dumps({"adapter": doc, "facts": {k: v for k, v in info.items() if v is not None}}, indent=2))
        return EXIT_OK
    lines = [f"# LoRA adapter read from {facts.path} by `inference-backend model inspect`: a spec.adapters entry"]
    lines += [f"#   {k}: {v}" for k, v in facts.sources.items()]
    lines += [f"# {k}: {v}" for k, v in info.items() if v is not None]
    sys.stdout.write("\n".join(lines) + "\n" + yaml.safe_dump([doc], sort_keys=False))
    return EXIT_OK


def _fetch_parsers(sub: Any) -> None:
    """`fetch` and `adapter check` (the init containers' commands)."""
    fet = sub.add_parser("fetch", help="copy model weights (s3://, gs://, hf://, https://) into a directory")
    fet.add_argument("uri", help="a file or a prefix: s3://bucket/key, gs://bucket/prefix/, hf://org/repo")
    fet.add_argument("dir", help="destination directory (created if missing)")
    fet.add_argument(
        "--format",
        choices=("safetensors", "pytorch", "onnx", "gguf"),
        help="hf:// repositories: the weights to download besides configs and tokenizers "
        "(default: safetensors, else PyTorch .bin/.pt)",
    )
    fet.add_argument(
        "--include",
        action="append",
        metavar="GLOB",
        help="only files matching GLOB (relative path or base name; repeatable)",
    )
    fet.add_argument(
        "--workers", type=int, default=None, help="objects downloaded at a time (default: env IB_FETCH_WORKERS, else 8)"
    )
    fet.add_argument(
        "--adapter",
        action="store_true",
        help="the URI is a LoRA adapter: check its files against the limits below once fetched",
    )
    _adapter_flags(fet, required=False)
    fet.set_defaults(func=cmd_fetch)
    ada = sub.add_parser("adapter", help="LoRA adapter helpers: `adapter check DIR` (an adapter on a volume)")
    ada_sub = ada.add_subparsers(dest="adapter_command", required=True)
    chk = ada_sub.add_parser(
        "check",
        help="check a LoRA adapter's files against an engine's limits (the init container of pvc:// and "
        "oci:// adapters)",
    )
    chk.add_argument("dir", help="the adapter: a PEFT directory, or a directory holding one GGUF adapter file")
    _adapter_flags(chk, required=True)
    chk.set_defaults(func=cmd_adapter_check)
    syn = ada_sub.add_parser(
        "sync",
        help="the adapters sidecar: fetch, check and load (and unload) the adapters a ConfigMap lists, on the "
        "engine's run-time endpoints, for ever",
    )
    syn.add_argument("config", help="the ConfigMap's adapters.json, as mounted")
    syn.add_argument("--engine", required=True, help="the engine's URL (http://127.0.0.1:8000)")
    syn.add_argument("--served-name", required=True, help="the base model's served name (left out of the adapters)")
    syn.add_argument("--port", type=int, default=8090, help="GET /ready and GET /adapters")
    syn.add_argument("--interval", type=float, default=5.0, help="seconds between two passes")
    _adapter_flags(syn, required=True)
    syn.set_defaults(func=cmd_adapter_sync)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="inference-backend", description=__doc__.splitlines()[0] if __doc__ else "")
    sub = parser.add_subparsers(dest="command", required=True)
    sel = sub.add_parser("select", help="run the selection tree on InferenceBackend manifests against a node list")
    ren = sub.add_parser("render", help="print the Kubernetes objects the operator would apply (multi-doc YAML)")
    for p in (sel, ren):
        p.add_argument("-f", "--file", required=True, help="YAML with InferenceBackend(s) (and optionally Models)")
        p.add_argument(
            "--nodes",
            required=True,
            help="a kind: List of v1 Nodes (and the ResourceSlices of GPU DRA "
            "drivers), as `kubectl get nodes,resourceslices -o yaml`",
        )
        p.add_argument("--models", action="append", help="YAML with Model objects (repeatable)")
    sel.add_argument("-o", "--output", choices=("json", "text"), default="text")
    from inference_backend.autoscaling import DEFAULT_MATCHERS, DEFAULT_PROMETHEUS

    ren.add_argument(
        "--prometheus-address",
        default=DEFAULT_PROMETHEUS,
        help="serverAddress of the ScaledObjects of spec.autoscaling, as the operator's flag",
    )
    ren.add_argument(
        "--autoscaling-label-matchers",
        default=DEFAULT_MATCHERS,
        help="PromQL label matchers of one backend's series, as the operator's flag",
    )
    from inference_backend import images

    images.add_arguments(ren)
    add_host_path_argument(ren, os.environ)
    sel.set_defaults(func=cmd_select)
    ren.set_defaults(func=cmd_render)
    _fetch_parsers(sub)
    ben = sub.add_parser("bench", help="load-test an OpenAI-compatible endpoint with guidellm (JSON, PNG, table)")
    add_bench_arguments(ben)
    ben.set_defaults(func=cmd_bench)
    mod = sub.add_parser("model", help="model registry helpers: `model inspect PATH` prints a Model from the artifact")
    ins = mod.add_subparsers(dest="model_command", required=True).add_parser(
        "inspect", help="print a Model read from a Hugging Face directory, a GGUF file or an ONNX model"
    )
    ins.add_argument("path", help="a Hugging Face model directory, a .gguf file, a .onnx file or a directory with one")
    ins.add_argument("--uri", help="spec.uri (where the operator fetches the weights); default: from a hub cache path")
    ins.add_argument("--name", help="metadata.name (default: the directory or file name as a DNS label)")
    ins.add_argument("--namespace", help="metadata.namespace (default: none, kubectl's current namespace)")
    ins.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
    ins.set_defaults(func=cmd_model_inspect)
    op = sub.add_parser("operator", help="run the operator (kopf) against the current kubeconfig or in-cluster")
    op.set_defaults(func=cmd_operator)
    try:
        from inference_backend.controller.run import add_arguments
    except ImportError:  # the operator extra is not installed: the offline commands still work
        return parser
    add_arguments(op)
    return parser


def cmd_bench(args: argparse.Namespace) -> int:
    from inference_backend.bench.run import run as run_bench

    return run_bench(args)


def cmd_operator(args: argparse.Namespace) -> int:
    from inference_backend.controller.run import run

    return run(args)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return int(args.func(args))
    except (ManifestError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID


if __name__ == "__main__":
    raise SystemExit(main())
