"""Subcommands that live in modules of their own. Each module has ``register(sub, parser_class)``,
which adds its parser(s) with ``set_defaults(func=...)``; ``ratchet.cli`` calls them in this order.
Adding a command is one module and one line here."""

from __future__ import annotations

import importlib

MODULES = (
    "ratchet.commands.idea",
    "ratchet.commands.context",
    "ratchet.commands.program",
    "ratchet.commands.mcp_server",
    "ratchet.commands.gate",
    "ratchet.commands.stack",
    "ratchet.commands.profile",
)


def register_all(sub, parser_class) -> None:
    for name in MODULES:
        importlib.import_module(name).register(sub, parser_class)
