"""python app.py [--model PATH_OR_ID] [--port N] [--host H] [--share]: start Polestar Studio."""

from __future__ import annotations

import argparse
import os

from polestar.threads import quiet_openmp

quiet_openmp()  # before torch loads

from app import create_app  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default=os.environ.get("POLESTAR_MODEL"),
                        help="checkpoint directory or hub id (default: the embedded model; env POLESTAR_MODEL)")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    # a Hugging Face Space sets GRADIO_SERVER_NAME=0.0.0.0 and GRADIO_SERVER_PORT so the app listens on its
    # external interface; explicit flags still win
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT") or os.environ.get("GRADIO_SERVER_PORT")
                                                        or 7860))
    parser.add_argument("--host", default=os.environ.get("HOST") or os.environ.get("GRADIO_SERVER_NAME") or "127.0.0.1")
    parser.add_argument("--share", action="store_true", help="open a public gradio.live link")
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    demo = create_app(args.model, args.device)
    demo.queue(default_concurrency_limit=4).launch(server_name=args.host, server_port=args.port, share=args.share)


if __name__ == "__main__":
    main()
