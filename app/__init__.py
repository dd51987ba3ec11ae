"""Polestar Studio, the Gradio app: `create_app()` builds it; nothing loads at import."""

from __future__ import annotations


def create_app(model_path: str | None = None, device: str | None = None):
    from app.ui import create_app as build

    return build(model_path, device)


__all__ = ["create_app"]
