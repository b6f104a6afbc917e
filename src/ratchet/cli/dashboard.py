"""``ratchet dashboard [--host 127.0.0.1] [--port N] [--ledger PATH]``: the live, read-only web page."""

from __future__ import annotations

from ratchet.cli.common import UsageError, add_ledger_option, recorded_ledger

DEFAULT_PORT = 8765


def register(sub, parser_class) -> None:
    p = sub.add_parser("dashboard", help="serve a live, read-only page of the ledger (runs, plots, sources)",
                       description="Serve the ledger on a local web page that follows it live: runs and "
                       "campaigns, a leaderboard per task, each run's plots, every attempt's source and verdict. "
                       "Read-only; candidate code is shown, never run. Ctrl-C stops it.")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 picks a free one)")
    add_ledger_option(p)
    p.set_defaults(func=cmd_dashboard)


def cmd_dashboard(args) -> int:
    from ratchet.report.dashboard import make_server

    ledger = recorded_ledger(args.ledger)
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port} is not a port number (0 to 65535)")
    try:
        server = make_server(ledger, args.host, args.port)
    except OSError as exc:
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    host, port = server.server_address[:2]
    print(f"ratchet dashboard: http://{host}:{port}/ (ledger {ledger}, read-only; Ctrl-C stops)", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        server.dashboard.close()
    return 0
