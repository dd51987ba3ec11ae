"""python -m polestar.train [--steps N ...] [--export DIR]: train (or resume) the embedded model."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from polestar.threads import quiet_openmp

quiet_openmp()  # before torch loads (the trainer imports it)

from polestar.cli_args import add_config_args, config_from_args  # noqa: E402
from polestar.train.trainer import TrainConfig, export, train  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m polestar.train", description=__doc__)
    add_config_args(parser, TrainConfig)
    parser.add_argument("--until", type=int, default=None, help="stop after this many steps in total (resumable)")
    parser.add_argument("--export", type=Path, default=None, help="write the LLaDA-format checkpoint here when done")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    cfg = config_from_args(TrainConfig, args)
    run_dir = train(cfg, until=args.until)
    if args.export:
        export(run_dir, args.export)
        logging.info("exported to %s", args.export)


if __name__ == "__main__":
    main()
