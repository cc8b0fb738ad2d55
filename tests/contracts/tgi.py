"""Contract checks for text-generation-launcher (TGI) args.

Checked against tests/contracts/data/tgi-3.3.7-launcher.json.

The launcher cannot run here; its clap flag table is generated from its own reference doc by
hack/tgi_flags_from_source.py. ``check_tgi_args`` mirrors what clap would reject, plus our own rules.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data"
TGI_VERSION = "3.3.7"


@cache
def tgi_contract(version: str = TGI_VERSION) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / f"tgi-{version}-launcher.json").read_text(encoding="utf-8"))
    return data


Spec = dict[str, Any]


def _flags(version: str) -> tuple[dict[str, Spec], dict[str, Spec], dict[str, Spec]]:
    by_long: dict[str, dict[str, Any]] = {}
    by_short: dict[str, dict[str, Any]] = {}
    by_env: dict[str, dict[str, Any]] = {}
    for f in tgi_contract(version)["flags"]:
        by_long[f["long"]] = f
        if f["short"]:
            by_short[f["short"]] = f
        if f["env"]:
            by_env[f["env"]] = f
    return by_long, by_short, by_env


def check_tgi_args(
    args: Sequence[str], env: Mapping[str, str] | None = None, *, version: str = TGI_VERSION
) -> list[str]:
    """Return the problems text-generation-launcher (or our conventions) would have with ``args``/``env``.

    Checks: unknown flag, missing value, value given to a boolean flag, enum value not among the
    choices, repeated single-value flag, stray positional argument, any short flag (we always render
    long names; ``-p`` in particular: use ``--port``), and enum-valued env vars (e.g. KV_CACHE_DTYPE)
    plus the non-flag env vars listed in the JSON's ``env_vars`` (ATTENTION, PREFIX_CACHING, ...).
    An empty list means the args are accepted.
    """
    by_long, by_short, by_env = _flags(version)
    errors: list[str] = []
    seen: dict[str, int] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg.startswith("--"):
            name, eq, inline = arg.partition("=")
            spec = by_long.get(name)
            if spec is None:
                errors.append(f"unknown flag {name!r} (not a text-generation-launcher {version} flag)")
                continue
        elif arg.startswith("-") and len(arg) > 1:
            name, eq, inline = arg[:2], "", arg[2:]
            spec = by_short.get(name)
            if spec is None:
                errors.append(f"unknown short flag {name!r}")
                continue
            errors.append(f"short flag {name!r} used: render the long form {spec['long']!r}")
            if inline:
                eq = "="
        else:
            errors.append(f"unexpected positional argument {arg!r} (the launcher takes none)")
            continue
        long = spec["long"]
        seen[long] = seen.get(long, 0) + 1
        if seen[long] == 2 and not spec["repeatable"]:
            errors.append(f"{long} given more than once")
        if not spec["takes_value"]:
            if eq:
                errors.append(f"{long} is a boolean flag and takes no value (got {inline!r})")
            continue
        if eq:
            value = inline
        elif i < len(args) and not args[i].startswith("--"):
            value = args[i]
            i += 1
        else:
            errors.append(f"{long} requires a value <{spec['value_name']}>")
            continue
        if spec["choices"] is not None and value not in spec["choices"]:
            errors.append(f"{long}: invalid value {value!r}; possible values: {', '.join(spec['choices'])}")
    for key, value in (env or {}).items():
        spec = by_env.get(key)
        if spec is not None and spec["choices"] is not None and value not in spec["choices"]:
            choices = ", ".join(spec["choices"])
            errors.append(f"env {key}: invalid value {value!r}; possible values: {choices}")
        extra = tgi_contract(version)["env_vars"].get(key)
        if extra is not None:
            if not extra["verified"]:
                where = extra["read_by"][0]
                errors.append(f"env {key}: not verified to be read by TGI {version} ({where})")
            elif value.lower() not in extra["values"]:
                known = ", ".join(extra["values"])
                errors.append(f"env {key}: invalid value {value!r}; known values: {known}")
    return errors
