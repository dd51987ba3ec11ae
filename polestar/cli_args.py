"""CLI flags generated from frozen config dataclasses: one flag per field, help from the field metadata."""

from __future__ import annotations

import argparse
import dataclasses
import typing


def add_config_args(parser: argparse.ArgumentParser, cls: type) -> None:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        kind = hints[f.name]
        help_text = f"{f.metadata.get('help', '')} (default: {f.default})"
        if kind is bool:
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        elif typing.get_origin(kind) is tuple:
            item = typing.get_args(kind)[0]
            parser.add_argument(flag, dest=f.name, type=item, nargs="+", default=None, help=help_text)
        else:
            base = next((t for t in typing.get_args(kind) if t is not type(None)), kind)
            parser.add_argument(flag, dest=f.name, type=base, default=None, help=help_text)


def config_from_args(cls: type, args: argparse.Namespace, **base):
    """An instance of `cls` with every flag the user gave overriding `base` and the field defaults."""
    values = dict(base)
    for f in dataclasses.fields(cls):
        given = getattr(args, f.name, None)
        if given is not None:
            values[f.name] = tuple(given) if isinstance(given, list) else given
    return cls(**values)
