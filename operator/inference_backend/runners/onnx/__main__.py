"""Entry point: python -m inference_backend.runners.onnx (console script ib-onnxruntime-server)."""

from __future__ import annotations

import logging
import sys

from inference_backend.runners.onnx.args import build_parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    logging.basicConfig(level=args.log_level.upper(), format=fmt)
    from inference_backend.runners.common.server import serve, served_name
    from inference_backend.runners.onnx import runner

    return serve(args, lambda metrics: runner.load(args, metrics), served_name(args))


if __name__ == "__main__":
    sys.exit(main())
