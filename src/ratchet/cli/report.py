"""``ratchet report RUN|CAMPAIGN -o FILE.html``: one self-contained HTML file (plotly.js inline)."""

from __future__ import annotations

from ratchet.cli.common import UsageError, add_ledger_option, recorded_ledger


def register(sub, parser_class) -> None:
    p = sub.add_parser("report", help="write a run's or a campaign's HTML report (opens with no network)",
                       description="Write one self-contained HTML file for RUN (progress, every attempt by "
                       "outcome, failures by reason, the best per shape and on the roofline, its lineage, the "
                       "tuner's landscape) or CAMPAIGN (Amdahl table, each op's run, gates, stacking waterfall).")
    p.add_argument("target", metavar="RUN|CAMPAIGN")
    p.add_argument("-o", "--output", required=True, metavar="FILE.html")
    add_ledger_option(p)
    p.set_defaults(func=cmd_report)


def cmd_report(args) -> int:
    from ratchet.report.html import write_report

    ledger = recorded_ledger(args.ledger)
    try:
        path = write_report(ledger, args.target, args.output)
    except OSError as exc:
        raise UsageError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)")
    return 0
