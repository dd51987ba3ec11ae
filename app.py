"""python app.py [--model PATH_OR_ID] [--port N] [--host H] [--share]: start Polestar Studio."""

from __future__ import annotations

import argparse
import os

from app import create_app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default=os.environ.get("POLESTAR_MODEL"),
                        help="checkpoint directory or hub id (default: the embedded model; env POLESTAR_MODEL)")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", 7860)))
    parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    parser.add_argument("--share", action="store_true", help="open a public gradio.live link")
    args = parser.parse_args()
    demo = create_app(args.model, args.device)
    demo.queue(default_concurrency_limit=4).launch(server_name=args.host, server_port=args.port, share=args.share)


if __name__ == "__main__":
    main()
