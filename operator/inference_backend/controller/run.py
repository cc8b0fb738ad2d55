"""`inference-backend operator`: run the kopf operator (handlers in :mod:`inference_backend.controller.handlers`)."""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import sys

import kopf
from prometheus_client import start_http_server

from inference_backend import images
from inference_backend.controller import config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace (default)")
    scope.add_argument("-n", "--namespace", action="append", default=[], help="watch this namespace (repeatable)")
    parser.add_argument("--peering", help="kopf peering name for leader election (default: standalone)")
    parser.add_argument(
        "--priority",
        type=int,
        default=None,
        help="peering priority: the live replica with the highest one works, the others wait (default: random, so "
        "the replicas of one Deployment never tie: kopf pauses every operator on a tie)",
    )
    parser.add_argument("--metrics-port", type=int, default=8080, help="Prometheus metrics port (0 = off)")
    parser.add_argument("--liveness-port", type=int, default=0, help="serve /healthz on this port (0 = off)")
    config.add_arguments(parser, os.environ)
    parser.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")


def run(args: argparse.Namespace) -> int:
    from inference_backend.controller import handlers  # noqa: F401  (registers the handlers)

    try:
        cfg = config.from_args(args)
    except images.ImagePolicyError as exc:  # refuse to start rather than render images nobody can pull
        print(f"inference-backend operator: invalid image policy: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.metrics_port:
        start_http_server(args.metrics_port)
    liveness = f"http://0.0.0.0:{args.liveness_port}/healthz" if args.liveness_port else None
    if not cfg.image_policy.empty:
        logging.getLogger(__name__).info("image policy: %s", images.rendered_images(cfg.image_policy))
    priority = args.priority if args.priority is not None else secrets.randbelow(2**31 - 1) + 1
    logging.getLogger(__name__).info("peering %s with priority %d", args.peering or "(standalone)", priority)
    kopf.run(
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        peering_name=args.peering,
        standalone=args.peering is None,
        liveness_endpoint=liveness,
        priority=priority,
        memo=kopf.Memo(config=cfg),
    )
    return 0
