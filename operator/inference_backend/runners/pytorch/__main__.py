"""Entry point: python -m inference_backend.runners.pytorch (console script ib-pytorch-runner)."""

from __future__ import annotations

import logging
import os
import sys

from inference_backend.runners.pytorch.args import build_parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Read by torch's CPU allocator once, at its first allocation: set before torch is imported (the flag wins over
    # an inherited value, so --no-huge-pages is always off).
    os.environ["THP_MEM_ALLOC_ENABLE"] = "1" if args.huge_pages else "0"
    fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    logging.basicConfig(level=args.log_level.upper(), format=fmt)
    from inference_backend.runners.common.server import serve, served_name
    from inference_backend.runners.pytorch import runner

    if args.draft_model:
        try:
            runner.check_draft_tokenizer(args.model, args.draft_model)
        except runner.IncompatibleDraft as exc:
            logging.getLogger("ib-pytorch-runner").error("refusing to start: %s", exc)
            return 2
    return serve(args, lambda metrics: runner.load(args, metrics), served_name(args))


if __name__ == "__main__":
    sys.exit(main())
