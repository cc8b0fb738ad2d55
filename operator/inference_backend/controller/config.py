"""The operator's configuration: one object, built once from the flags (the environment gives their defaults, as the
chart sets it) by ``run``, handed to the startup handler through kopf's memo, and read from there by every part.

Every setting and its default is written here and nowhere else.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass

from inference_backend import autoscaling, images
from inference_backend.render import HOST_PATH_PREFIXES

UNSCHEDULABLE_GRACE = 300.0
"""The default grace period (--unschedulable-grace-seconds): five minutes covers a cluster autoscaler adding a node
(typically 1-3 minutes for a GPU node) before the backend moves elsewhere."""
WORKERS = 8
"""Reconciles running at once (--workers)."""
DEBOUNCE = 1.0
"""Seconds a pass over every backend (a node or Model change) waits for more triggers to fold in
(--debounce-seconds)."""


@dataclass(frozen=True)
class Config:
    """What the operator's reconciles depend on, besides the cluster."""

    workers: int = WORKERS
    debounce: float = DEBOUNCE
    unschedulable_grace: float = UNSCHEDULABLE_GRACE
    """Seconds every pod of a placement may stay unschedulable (for want of nodes, not volumes) before the placement
    is selected again elsewhere."""
    scaling: autoscaling.Settings = autoscaling.DEFAULT
    """The Prometheus the ScaledObjects of spec.autoscaling query, and how they select a backend's series."""
    image_policy: images.Policy = images.EMPTY
    """The registry mirror, image overrides and pull secrets applied to every rendered pod template."""
    host_paths: tuple[str, ...] = HOST_PATH_PREFIXES
    """The node paths a spec.model.cache.hostPath may name (itself or below)."""


DEFAULT = Config()


def add_arguments(parser: argparse.ArgumentParser, env: Mapping[str, str]) -> None:
    """The flags of :class:`Config`, each defaulting to its environment variable (the chart's way to set it)."""
    parser.add_argument(
        "--workers",
        type=int,
        default=int(env.get("IB_WORKERS", WORKERS)),
        help=f"reconciles running at once (default {WORKERS}; env IB_WORKERS)",
    )
    parser.add_argument(
        "--debounce-seconds",
        type=float,
        default=float(env.get("IB_DEBOUNCE_SECONDS", DEBOUNCE)),
        help="seconds a pass over every backend (after a node or Model change) waits for more changes to fold in "
        f"(default {DEBOUNCE:g}; env IB_DEBOUNCE_SECONDS)",
    )
    parser.add_argument(
        "--unschedulable-grace-seconds",
        type=float,
        default=float(env.get("IB_UNSCHEDULABLE_GRACE_SECONDS", UNSCHEDULABLE_GRACE)),
        help="seconds every pod of a placement may stay unschedulable for want of nodes (not volumes) before the "
        f"backend is placed elsewhere (default {UNSCHEDULABLE_GRACE:.0f}; env IB_UNSCHEDULABLE_GRACE_SECONDS)",
    )
    parser.add_argument(
        "--prometheus-address",
        default=env.get("IB_PROMETHEUS_ADDRESS") or autoscaling.DEFAULT_PROMETHEUS,
        help="the Prometheus the KEDA ScaledObjects of spec.autoscaling query (serverAddress; default "
        f"{autoscaling.DEFAULT_PROMETHEUS}; env IB_PROMETHEUS_ADDRESS)",
    )
    parser.add_argument(
        "--autoscaling-label-matchers",
        default=env.get("IB_AUTOSCALING_LABEL_MATCHERS") or autoscaling.DEFAULT_MATCHERS,
        help="PromQL label matchers selecting one backend's engine series, with {namespace}, {name} and {instance} "
        f"filled in (default {autoscaling.DEFAULT_MATCHERS}; env IB_AUTOSCALING_LABEL_MATCHERS)",
    )
    parser.add_argument(
        "--engine-scrape-annotations",
        action=argparse.BooleanOptionalAction,
        default=env.get("IB_ENGINE_SCRAPE_ANNOTATIONS", "true") != "false",
        help="prometheus.io/* annotations on the engine pods, for annotation discovery; --no-engine-scrape-annotations "
        "where a PodMonitor scrapes them, so no pod is scraped twice (default on; env IB_ENGINE_SCRAPE_ANNOTATIONS)",
    )
    add_host_path_argument(parser, env)
    images.add_arguments(parser, env)


def add_host_path_argument(parser: argparse.ArgumentParser, env: Mapping[str, str] | None = None) -> None:
    """--host-path-prefix (repeatable; env IB_HOST_PATH_PREFIXES, comma-separated, as the chart sets it)."""
    raw = (env or {}).get("IB_HOST_PATH_PREFIXES")
    default = [p for p in raw.split(",") if p] if raw is not None else list(HOST_PATH_PREFIXES)
    parser.add_argument(
        "--host-path-prefix",
        action="append",
        dest="host_path_prefixes",
        default=None,
        metavar="PATH",
        help="a node path spec.model.cache.hostPath may name, itself or below (repeatable; default "
        f"{', '.join(HOST_PATH_PREFIXES)}; env IB_HOST_PATH_PREFIXES, comma-separated, empty: none)",
    )
    parser.set_defaults(host_path_default=tuple(default))


def host_paths(args: argparse.Namespace) -> tuple[str, ...]:
    given = getattr(args, "host_path_prefixes", None)
    return tuple(given) if given is not None else tuple(getattr(args, "host_path_default", HOST_PATH_PREFIXES))


def from_args(args: argparse.Namespace) -> Config:
    """The configuration the flags give; images.ImagePolicyError names a malformed image policy."""
    return Config(
        workers=args.workers,
        debounce=args.debounce_seconds,
        unschedulable_grace=args.unschedulable_grace_seconds,
        scaling=autoscaling.Settings(
            prometheus_address=args.prometheus_address or autoscaling.DEFAULT_PROMETHEUS,
            label_matchers=args.autoscaling_label_matchers or autoscaling.DEFAULT_MATCHERS,
            scrape_annotations=args.engine_scrape_annotations,
        ),
        image_policy=images.from_args(args),
        host_paths=host_paths(args),
    )
