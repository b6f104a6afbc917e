"""``ratchet mcp``: serve Ratchet to coding agents as MCP tools over stdio (``ratchet.agents.mcp_server``)."""

from __future__ import annotations


def register(sub, parser_class) -> None:
    from ratchet.cli.common import add_ledger_option

    mc = sub.add_parser("mcp", help="serve Ratchet to coding agents as MCP tools over stdio",
                        description="An MCP server over stdin/stdout with the tools brief, start_run, judge, "
                        "history, add_idea and list_ideas. Needs the MCP SDK (pip install 'ratchet[agents]').")
    add_ledger_option(mc)
    mc.add_argument("--device", choices=["cpu", "cuda"],
                    help="where judge runs without a run, and the device of new runs (default: cuda if present)")
    mc.add_argument("--device-name", metavar="NAME", help="with --device cuda: the GPU that will judge new runs, "
                    "e.g. H200, when this machine has none (its runs are judged on that machine)")
    mc.set_defaults(func=cmd_mcp)


def cmd_mcp(args) -> int:
    from ratchet.cli.common import UsageError, resolve_device
    from ratchet.run.ledger import default_ledger_path

    if args.device_name and args.device != "cuda":
        raise UsageError("--device-name names a GPU: it goes with --device cuda")
    device = args.device if args.device_name else resolve_device(args.device)
    try:
        from ratchet.agents.mcp_server import build_server

        server = build_server(default_ledger_path(args.ledger).resolve(), device, args.device_name)
    except ImportError as exc:
        raise UsageError(f"ratchet mcp needs the MCP Python SDK ({exc}); pip install 'ratchet[agents]'") from None
    server.run("stdio")
    return 0
