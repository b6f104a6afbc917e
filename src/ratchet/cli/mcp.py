"""``ratchet mcp``: serve Ratchet to coding agents as MCP tools over stdio (``ratchet.agents.mcp_server``)."""

from __future__ import annotations


def register(sub, parser_class) -> None:
    mc = sub.add_parser("mcp", help="serve Ratchet to coding agents as MCP tools over stdio",
                        description="An MCP server over stdin/stdout with the tools brief, start_run, judge, "
                        "history, add_idea and list_ideas. Needs the MCP SDK (pip install 'ratchet[agents]').")
    mc.add_argument("--ledger", metavar="PATH", help="ledger file (default: $RATCHET_LEDGER or .ratchet/ledger.sqlite)")
    mc.add_argument("--device", choices=["cpu", "cuda"],
                    help="where judge runs without a run, and the device of new runs (default: cuda if present)")
    mc.set_defaults(func=cmd_mcp)


def cmd_mcp(args) -> int:
    from ratchet.cli.common import UsageError, resolve_device
    from ratchet.run.ledger import default_ledger_path

    device = resolve_device(args.device)
    try:
        from ratchet.agents.mcp_server import build_server

        server = build_server(default_ledger_path(args.ledger).resolve(), device)
    except ImportError as exc:
        raise UsageError(f"ratchet mcp needs the MCP Python SDK ({exc}); pip install 'ratchet[agents]'") from None
    server.run("stdio")
    return 0
