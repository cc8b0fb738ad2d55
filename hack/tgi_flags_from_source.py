#!/usr/bin/env python3
"""Generate tests/contracts/data/tgi-3.3.7-launcher.json from the saved launcher reference doc.

The TGI launcher (text-generation-launcher, a clap CLI) cannot run here, so its flag contract is taken
from its own reference doc, docs/source/reference/launcher.md, which upstream generates from
`text-generation-launcher --help`. The doc is saved verbatim (plus an attribution header) in
tests/contracts/data/tgi-launcher.md; this script turns it into JSON deterministically:

    python hack/tgi_flags_from_source.py            # rewrite the JSON
    python hack/tgi_flags_from_source.py --check    # exit 1 if the JSON is stale

tests/contracts/test_tgi_contract_data.py asserts the committed JSON equals build() output.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "contracts" / "data"
SOURCE_MD = DATA / "tgi-launcher.md"
OUT_JSON = DATA / "tgi-3.3.7-launcher.json"

TGI_VERSION = "3.3.7"
SOURCE = {
    "repository": "huggingface/text-generation-inference",
    "path": "docs/source/reference/launcher.md",
    "commit": "032fc4c4cf2572fdcfa08ae992987ac770267c98",
    "saved_as": "tests/contracts/data/tgi-launcher.md",
    "how": (
        "No network access to GitHub. The file was read through a stored index of public repositories "
        "(read_file). The index holds 19 versions of launcher.md and 442 of launcher/src/main.rs, but "
        "only lets us open versions whose commit id we know; the v3.3.7 tag commit could not be "
        "identified from it. 032fc4c4 is the newest version we could open: it has every flag of the "
        "3.0.x line (compressed-tensors quantization, --payload-limit, --enable-prefill-logprobs, "
        "--usage-stats, --lora-adapters). Flags added between that commit and v3.3.7 (if any) are "
        "MISSING here, so check_tgi_args() would wrongly reject them; nothing in this file is known to "
        "have been removed by v3.3.7. Replace tgi-launcher.md with the v3.3.7 copy and re-run this "
        "script when it can be fetched."
    ),
    "version_verified": False,
}

# Env vars the TGI server/launcher read that are not launcher flags, with where each was seen.
EXTRA_ENV: dict[str, dict[str, Any]] = {
    "PREFIX_CACHING": {
        "purpose": "enable/disable prefix caching (launcher resolves a default, exports it to the shards)",
        "values": ["0", "1", "true", "false"],
        "read_by": [
            'launcher/src/main.rs resolve_attention(): std::env::var("PREFIX_CACHING")'
            ' (commit 009c4e0b945b2c111368afdc2c9813c32db0a9b7); defaults to "true", forced to "0" for'
            " VLMs, seq2seq, lora adapters, paged attention, unsupported head dims",
            "server/text_generation_server/models/globals.py (3.x): PREFIX_CACHING = "
            'os.environ["PREFIX_CACHING"].lower() in {"1", "true"} -- not opened (stored version is'
            " older), from memory",
        ],
        "verified": True,
    },
    "ATTENTION": {
        "purpose": "attention backend",
        "values": ["flashinfer", "flashdecoding", "paged"],
        "read_by": [
            'launcher/src/main.rs resolve_attention(): std::env::var("ATTENTION") (commit 009c4e0b); '
            'default "flashinfer", fallback "flashdecoding" (or "paged" below compute capability 8)',
        ],
        "verified": True,
    },
    "USE_PREFIX_CACHING": {
        "purpose": "older (2.x) name of PREFIX_CACHING",
        "values": ["0", "1", "true", "false"],
        "read_by": ["not found in any stored TGI source we could open; TGI 3.x reads PREFIX_CACHING"],
        "verified": False,
    },
    "PREFILL_CHUNKING": {
        "purpose": "chunked prefill on/off (3.x server)",
        "values": ["0", "1", "true", "false"],
        "read_by": ["server/text_generation_server/models/globals.py (3.x), from memory, not opened"],
        "verified": False,
    },
}

# Flags whose clap type is Vec<_> (may be repeated); from launcher/src/main.rs (`cors_allow_origin:
# Vec<String>`, seen at commits 009c4e0b and d957e326).
REPEATABLE = {"--cors-allow-origin"}

_SECTION = re.compile(r"^## (?P<name>[A-Z0-9_]+)\n```shell\n(?P<body>.*?)\n```", re.M | re.S)
_HEAD = re.compile(r"^\s*(?:(?P<short>-[A-Za-z]), )?(?P<long>--[a-z0-9-]+)(?: <(?P<meta>[A-Z0-9_]+)>)?\s*$")
_ENV = re.compile(r"\[env: (?P<env>[A-Z0-9_]+)=\]")
_DEFAULT = re.compile(r"\[default: (?P<default>[^\]]*)\]")
_POSSIBLE = re.compile(r"\[possible values: (?P<values>[^\]]*)\]")
_POSSIBLE_ITEM = re.compile(r"^\s*- (?P<value>[a-z0-9_-]+):", re.M)


def parse(md: str) -> list[dict[str, Any]]:
    flags: list[dict[str, Any]] = []
    for m in _SECTION.finditer(md):
        body = m.group("body")
        head = _HEAD.match(body.splitlines()[0])
        if head is None:
            raise ValueError(f"cannot parse flag line of section {m.group('name')}: {body.splitlines()[0]!r}")
        choices: list[str] | None = None
        if pm := _POSSIBLE.search(body):
            choices = [v.strip() for v in pm.group("values").split(",")]
        elif "Possible values:" in body:
            choices = _POSSIBLE_ITEM.findall(body.split("Possible values:", 1)[1])
        env = _ENV.search(body)
        default = _DEFAULT.search(body)
        flags.append(
            {
                "long": head.group("long"),
                "short": head.group("short"),
                "env": env.group("env") if env else None,
                "takes_value": head.group("meta") is not None,
                "value_name": head.group("meta"),
                "choices": choices,
                "default": default.group("default") if default else None,
                "repeatable": head.group("long") in REPEATABLE,
            }
        )
    if not flags:
        raise ValueError("no flags found")
    return flags


def build() -> dict[str, Any]:
    md = SOURCE_MD.read_text(encoding="utf-8")
    return {
        "engine": "text-generation-inference",
        "binary": "text-generation-launcher",
        "version": TGI_VERSION,
        "generated_by": "hack/tgi_flags_from_source.py",
        "source": SOURCE,
        "positional_args": False,
        "flags": parse(md),
        "env_vars": EXTRA_ENV,
    }


def render() -> str:
    return json.dumps(build(), indent=2, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="fail if the committed JSON is stale")
    ns = ap.parse_args(argv)
    text = render()
    if ns.check:
        if not OUT_JSON.exists() or OUT_JSON.read_text(encoding="utf-8") != text:
            print(f"{OUT_JSON} is stale: run hack/tgi_flags_from_source.py", file=sys.stderr)
            return 1
        return 0
    OUT_JSON.write_text(text, encoding="utf-8")
    print(f"wrote {OUT_JSON.relative_to(ROOT)} ({len(build()['flags'])} flags)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
