"""A LoRA adapter's facts, read from its files: a PEFT directory (adapter_config.json, adapter_model.safetensors) or a
GGUF adapter (llama.cpp's convert_lora_to_gguf.py). Only headers are read, never the weights; the standard library
only (the fetch init container runs it in the operator image, which has no ``gguf`` package).

PEFT (huggingface/peft, src/peft/tuners/lora/config.py LoraConfig and src/peft/config.py PeftConfigMixin): ``peft_type``
LORA, ``r`` (rank), ``target_modules`` (a list, or a regular expression string), ``use_dora``,
``base_model_name_or_path``, and ``auto_mapping.base_model_class`` where PEFT records the base model's class.
GGUF (llama.cpp gguf-py constants.py): ``general.type`` "adapter", ``adapter.type`` "lora", ``general.architecture``
(the base model's llama.cpp architecture, which llama.cpp requires to match the model's); the rank is the inner
dimension of the ``*.lora_a`` tensors.
"""

from __future__ import annotations

import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from inference_backend.modelinfo.errors import InspectError, read_json
from inference_backend.modelinfo.safetensors_header import read_header

PEFT_CONFIG = "adapter_config.json"
PEFT_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")


@dataclass
class AdapterFacts:
    """What an adapter is, with where each fact was read."""

    path: str
    format: str
    """peft or gguf."""
    rank: int | None = None
    target_modules: tuple[str, ...] = ()
    """The adapted modules (a PEFT list), or one regular expression (``target_modules_regex``)."""
    target_modules_regex: str | None = None
    base_model: str | None = None
    """base_model_name_or_path (PEFT)."""
    base_architecture: str | None = None
    """The base model's class (PEFT auto_mapping.base_model_class) or llama.cpp architecture (GGUF)."""
    use_dora: bool = False
    alpha: float | None = None
    sources: dict[str, str] = field(default_factory=dict)
    file: str | None = None
    """The GGUF adapter file (for a directory holding one)."""


def is_adapter(path: Path) -> bool:
    """A PEFT directory, or a GGUF file (or a directory with one) whose general.type is adapter."""
    if path.is_dir() and (path / PEFT_CONFIG).is_file():
        return True
    gguf = _one_gguf(path)
    if gguf is None:
        return False
    try:
        return _gguf_kv(gguf).get("general.type") == "adapter"
    except InspectError:
        return False


def _one_gguf(path: Path) -> Path | None:
    if path.is_file() and path.suffix.lower() == ".gguf":
        return path
    if path.is_dir():
        found = sorted(path.glob("*.gguf"))
        return found[0] if len(found) == 1 else None
    return None


def read_adapter(path: str | Path) -> AdapterFacts:
    """The facts of the adapter at ``path``; InspectError naming the file when it is not a LoRA adapter."""
    path = Path(path)
    if not path.exists():
        raise InspectError(f"{path}: no such file or directory")
    if path.is_dir() and (path / PEFT_CONFIG).is_file():
        return _peft(path)
    gguf = _one_gguf(path)
    if gguf is not None:
        return _gguf(gguf)
    if path.is_dir() and len(list(path.glob("*.gguf"))) > 1:
        raise InspectError(f"{path}: several GGUF files: name the adapter file")
    raise InspectError(f"{path}: not a LoRA adapter: no {PEFT_CONFIG} (PEFT) and no GGUF adapter file")


def _peft(directory: Path) -> AdapterFacts:
    cfg_path = directory / PEFT_CONFIG
    cfg = read_json(cfg_path)
    peft_type = cfg.get("peft_type")
    if peft_type != "LORA":
        raise InspectError(f"{cfg_path}: peft_type {peft_type!r}: only LoRA adapters (LORA) are served")
    facts = AdapterFacts(str(directory), "peft")
    rank = cfg.get("r")
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        raise InspectError(f"{cfg_path}: r {rank!r} is not a positive integer rank")
    facts.rank, facts.sources["rank"] = rank, f"{PEFT_CONFIG} r"
    modules = cfg.get("target_modules")
    if isinstance(modules, str):
        facts.target_modules_regex = modules
        facts.sources["targetModules"] = f"{PEFT_CONFIG} target_modules (a regular expression)"
    elif isinstance(modules, list) and all(isinstance(m, str) for m in modules):
        facts.target_modules = tuple(sorted(set(modules)))
        facts.sources["targetModules"] = f"{PEFT_CONFIG} target_modules"
    facts.use_dora = cfg.get("use_dora") is True
    alpha = cfg.get("lora_alpha")
    facts.alpha = float(alpha) if isinstance(alpha, int | float) and not isinstance(alpha, bool) else None
    base = cfg.get("base_model_name_or_path")
    if isinstance(base, str) and base:
        facts.base_model, facts.sources["baseModel"] = base, f"{PEFT_CONFIG} base_model_name_or_path"
    auto = cfg.get("auto_mapping")
    if isinstance(auto, dict) and isinstance(auto.get("base_model_class"), str):
        facts.base_architecture = auto["base_model_class"]
        facts.sources["baseArchitecture"] = f"{PEFT_CONFIG} auto_mapping.base_model_class"
    _check_peft_weights(directory, facts)
    return facts


def _check_peft_weights(directory: Path, facts: AdapterFacts) -> None:
    """The weights are there; for safetensors, every lora_A's inner dimension is the configured rank (PEFT's
    ``rank_pattern`` may give single modules another rank: the largest one found is the adapter's rank)."""
    present = [directory / w for w in PEFT_WEIGHTS if (directory / w).is_file()]
    if not present:
        raise InspectError(f"{directory}: no adapter weights ({' or '.join(PEFT_WEIGHTS)})")
    if present[0].suffix != ".safetensors":
        return
    ranks = {t.shape[0] for t in read_header(present[0]) if ".lora_A." in t.name and len(t.shape) == 2}
    if not ranks:
        raise InspectError(f"{present[0]}: no lora_A tensors: not a LoRA adapter's weights")
    if max(ranks) != facts.rank:
        facts.rank = max(ranks)
        facts.sources["rank"] = f"{present[0].name}: the largest lora_A rank (rank_pattern in {PEFT_CONFIG})"


# ---- GGUF: the key/value section and the tensor table (GGUF v2/v3, little-endian) -------------------------------

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_MAX_STRING = 1 << 24
_MAX_COUNT = 1 << 26


def _read(f: BinaryIO, fmt: str) -> Any:
    size = struct.calcsize(fmt)
    data = f.read(size)
    if len(data) != size:
        raise InspectError("truncated GGUF header")
    return struct.unpack(fmt, data)[0]


def _string(f: BinaryIO) -> str:
    n = _read(f, "<Q")
    if n > _MAX_STRING:
        raise InspectError(f"corrupt GGUF header (a string of {n} bytes)")
    raw = f.read(n)
    if len(raw) != n:
        raise InspectError("truncated GGUF header")
    return raw.decode("utf-8", errors="replace")


def _value(f: BinaryIO, kind: int) -> Any:
    if kind in _SCALARS:
        return _read(f, _SCALARS[kind])
    if kind == _STRING:
        return _string(f)
    if kind == _ARRAY:
        inner, n = _read(f, "<I"), _read(f, "<Q")
        if n > _MAX_COUNT:
            raise InspectError(f"corrupt GGUF header (an array of {n} items)")
        return [_value(f, inner) for _ in range(n)]
    raise InspectError(f"corrupt GGUF header (value type {kind})")


def _gguf_header(path: Path) -> tuple[dict[str, Any], list[tuple[str, tuple[int, ...]]]]:
    try:
        with path.open("rb") as f:
            if f.read(4) != b"GGUF":
                raise InspectError(f"{path}: not a GGUF file")
            version = _read(f, "<I")
            if version not in (2, 3):
                raise InspectError(f"{path}: GGUF version {version} (2 and 3 are read)")
            n_tensors, n_kv = _read(f, "<Q"), _read(f, "<Q")
            if n_tensors > _MAX_COUNT or n_kv > _MAX_COUNT:
                raise InspectError(f"{path}: corrupt GGUF header")
            kv = {_string(f): _value(f, _read(f, "<I")) for _ in range(n_kv)}
            tensors = []
            for _ in range(n_tensors):
                name, n_dims = _string(f), _read(f, "<I")
                dims = tuple(_read(f, "<Q") for _ in range(min(n_dims, 8)))
                _read(f, "<I"), _read(f, "<Q")  # type, offset
                tensors.append((name, dims))
    except OSError as exc:
        raise InspectError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    except InspectError as exc:
        raise InspectError(str(exc) if str(exc).startswith(str(path)) else f"{path}: {exc}") from exc
    return kv, tensors


def _gguf_kv(path: Path) -> dict[str, Any]:
    return _gguf_header(path)[0]


def _gguf(path: Path) -> AdapterFacts:
    kv, tensors = _gguf_header(path)
    if kv.get("general.type") != "adapter" or kv.get("adapter.type") != "lora":
        raise InspectError(
            f"{path}: a GGUF file but not a LoRA adapter (general.type {kv.get('general.type')!r}, "
            f"adapter.type {kv.get('adapter.type')!r})"
        )
    facts = AdapterFacts(str(path), "gguf", file=path.name)
    # gguf-py stores a tensor's dimensions innermost first: lora_a is [n_embd, rank] in ggml order.
    ranks = {dims[1] for name, dims in tensors if name.endswith(".lora_a") and len(dims) >= 2}
    if not ranks:
        raise InspectError(f"{path}: no .lora_a tensors")
    facts.rank, facts.sources["rank"] = max(ranks), "GGUF .lora_a tensors (their second dimension)"
    modules = sorted(
        {
            name.removesuffix(".lora_a").removesuffix(".weight").rsplit(".", 1)[-1]
            for name, _ in tensors
            if name.endswith(".lora_a")
        }
    )
    facts.target_modules, facts.sources["targetModules"] = tuple(modules), "GGUF .lora_a tensor names"
    arch = kv.get("general.architecture")
    if isinstance(arch, str):
        facts.base_architecture, facts.sources["baseArchitecture"] = arch, "GGUF general.architecture"
    alpha = kv.get("adapter.lora.alpha")
    facts.alpha = float(alpha) if isinstance(alpha, int | float) else None
    return facts


def entry(facts: AdapterFacts, name: str, uri: str) -> dict[str, Any]:
    """The spec.adapters entry these facts make (what `model inspect` prints for an adapter)."""
    out: dict[str, Any] = {"name": name, "uri": uri}
    if facts.rank is not None:
        out["rank"] = facts.rank
    if facts.target_modules and facts.format == "peft":
        out["targetModules"] = list(facts.target_modules)
    return out


@dataclass(frozen=True)
class Limits:
    """What the engine the adapter is rendered for takes (engines/artifacts.py AdapterCheck, on the command line)."""

    max_rank: int
    adapter_format: str
    modules: tuple[str, ...] = ()
    rank: int | None = None
    base_architecture: str | None = None
    dora: bool = True


def problems(facts: AdapterFacts, limits: Limits) -> list[str]:
    """Why the engine cannot serve the adapter ([] when it can), each naming the fact and the limit."""
    out: list[str] = []
    if facts.format != limits.adapter_format:
        out.append(f"a {facts.format} adapter, and the engine loads {limits.adapter_format} adapters")
    if facts.rank is not None and facts.rank > limits.max_rank:
        out.append(
            f"rank {facts.rank} is above the engine's limit {limits.max_rank} (declare it in "
            "spec.adapters[].rank so that the limit covers it, where the engine allows)"
        )
    if limits.rank is not None and facts.rank is not None and facts.rank != limits.rank:
        out.append(f"rank {facts.rank}, and spec.adapters[].rank says {limits.rank}")
    if limits.modules and facts.target_modules:
        extra = sorted(set(facts.target_modules) - set(limits.modules))
        if extra:
            out.append(f"target modules {', '.join(extra)} are not ones the engine adapts")
    if facts.use_dora and not limits.dora:
        out.append("a DoRA adapter (use_dora), which the engine does not serve")
    base, want = facts.base_architecture, limits.base_architecture
    if base and want and facts.format == "peft" and base != want:
        out.append(f"trained on a {base} base model, and the served model is {want}")
    return out


def check_adapter(dest: str | Path, limits: Limits, out: TextIO | None = None) -> None:
    """The adapter in ``dest`` against the engine's ``limits``: InspectError naming each problem, so that the pod's
    init container (``inference-backend fetch --adapter``, ``adapter check``) fails with it before the engine
    starts. Here, not in fetch (the lowest layer, which knows no model format): fetch copies files, this reads them."""
    out = out or sys.stdout
    facts = read_adapter(dest)
    found = problems(facts, limits)
    if found:
        raise InspectError(f"{dest}: the adapter cannot be served: {'; '.join(found)}")
    modules = ", ".join(facts.target_modules) or facts.target_modules_regex or "?"
    print(
        f"adapter {dest}: {facts.format}, rank {facts.rank}, modules {modules}"
        + (f", base model {facts.base_model}" if facts.base_model else "")
        + ": within the engine's limits",
        file=out,
        flush=True,
    )
