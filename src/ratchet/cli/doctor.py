"""``ratchet doctor``: check a ledger and repair what can be repaired, one line per finding."""

from __future__ import annotations


def register(sub, parser_class) -> None:
    from ratchet.cli.common import add_ledger_option

    dr = sub.add_parser("doctor", help="check a ledger and repair what can be repaired", description=(
        "Check the ledger: SQLite integrity, schema version, orphan rows, best pointers, duplicate attempts, runs "
        "marked running whose process is gone. Repair what can be repaired without dropping recorded attempts "
        "(restore a damaged file from its newest backup, remove bad best pointers, mark dead runs stopped) and "
        "say what was found and done, one line each. Exit 0: healthy or repaired; 1: problems remain."))
    add_ledger_option(dr)
    dr.set_defaults(func=cmd_doctor)


def cmd_doctor(args) -> int:
    from ratchet.run.doctor import examine
    from ratchet.run.ledger import default_ledger_path

    path = default_ledger_path(args.ledger)
    report = examine(path)
    for finding in report.findings:
        print(f"{finding.kind:<8} {finding.text}")
    problems = len(report.problems)
    repaired = sum(1 for f in report.findings if f.kind == "repaired")
    if problems:
        print(f"ledger {path}: {problems} problem(s) remain")
    elif repaired:
        print(f"ledger {path}: repaired ({repaired} repair(s))")
    else:
        print(f"ledger {path}: healthy")
    return report.exit_code
