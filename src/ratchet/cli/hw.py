"""``ratchet hw``: the detected device, its datasheet sheet and the cached measured ceilings (with their date
and key); ``--remeasure`` renews this machine's ceilings; ``--audit`` reads settings."""

from __future__ import annotations

import json

from ratchet.cli.common import UsageError


def register(sub, parser_class) -> None:
    hw = sub.add_parser("hw", help="show this machine's GPU: what torch reports and its datasheet lead",
                        description="Show the detected device (read-only, nothing measured) merged with its datasheet "
                        "sheet, and the cached measured ceilings if any. --device-name shows a sheet without hardware.")
    hw.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    hw.add_argument("--device-name", metavar="NAME", help="show the sheet for NAME (e.g. H200) instead of detecting")
    hw.add_argument("--audit", action="store_true", help=(
        "read clocks, power limit, persistence, PCIe link, ECC, MIG, CPU governor, NUMA and THP, and say what "
        "an owner of the bare metal could change and what it tends to buy (changes nothing)"))
    hw.add_argument("--remeasure", action="store_true", help=(
        "measure this machine's ceilings again (the CPU, and the GPU when there is one) as the judge's workers "
        "time, and replace the cached entries (not cached when the machine is too busy to trust the numbers)"))
    hw.set_defaults(func=cmd_hw)



def cmd_hw(args) -> int:
    from ratchet.hardware.sheets import SHEETS, find_sheet

    if getattr(args, "audit", False):
        if getattr(args, "remeasure", False):
            raise UsageError("--audit reads settings and measures nothing; it does not take --remeasure")
        return _cmd_hw_audit(args)
    if getattr(args, "remeasure", False):
        if args.device_name:
            raise UsageError("--remeasure measures this machine; it does not take --device-name")
        return _cmd_hw_remeasure(args)
    if args.device_name:
        sheet = find_sheet(args.device_name)
        if sheet is None:
            raise UsageError(f"no sheet for device '{args.device_name}' (known: {', '.join(SHEETS)})")
        out = {"device": sheet.name, "detected": None, "sheet": sheet.to_json(),
               "note": "datasheet lead only: no hardware was read"}
    else:
        from ratchet.hardware.detect import detect

        detected = detect()
        sheet = find_sheet(detected["device"])
        out = {"device": detected["device"], "detected": detected, "sheet": sheet.to_json() if sheet else None}
        if detected["device"] is None:
            out["note"] = detected["note"]
        elif sheet is None:
            out["note"] = "no sheet for this device; the numbers above are what torch reports"
        else:
            out["note"] = "sheet values are datasheet leads; the judge measures the real ceilings"
    out["cached_ceilings"] = _cached_entries()
    if args.json:
        print(json.dumps(out))
        return 0
    detected, sheet_json = out["detected"] or {}, out["sheet"] or {}
    try:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"ratchet hw: {out['device'] or 'no GPU'}")
        table.add_column("field")
        table.add_column("detected")
        table.add_column("sheet (datasheet lead)")
        keys = [k for k in detected if k not in ("ceilings", "note")] + [k for k in sheet_json if k != "notes"]
        for key in dict.fromkeys(keys):
            table.add_row(key, _hw_cell(detected.get(key)), _hw_cell(sheet_json.get(key)))
        if detected.get("ceilings"):
            table.add_row("measured ceilings (cached)", _hw_cell(detected["ceilings"]), "")
        Console().print(table)
    except ImportError:
        for key, value in {**sheet_json, **detected}.items():
            if key != "notes":
                print(f"{key}: {_hw_cell(value)}")
    for note in sheet_json.get("notes", []):
        print(f"- {note}")
    _print_cached(out["cached_ceilings"])
    print(out["note"])
    return 0


def _cached_entries() -> list[dict]:
    """Every entry of the ceilings cache, newest first: its key, date, rates and whether the judge uses it."""
    from ratchet.hardware.ceilings import entry_problem, read_cache

    rows = []
    for key, entry in read_cache().items():
        problem = entry_problem(key, entry)
        rows.append({"key": key, "measured_at": entry.get("measured_at"), "copy_tbps": entry.get("copy_tbps"),
                     "matmul_tflops": entry.get("matmul_tflops"), "threads": entry.get("threads"),
                     "usable": problem is None, "problem": problem, "measured_unix": entry.get("measured_unix", 0)})
    rows.sort(key=lambda r: r["measured_unix"] if isinstance(r["measured_unix"], (int, float)) else 0, reverse=True)
    for row in rows:
        del row["measured_unix"]
    return rows


def _print_cached(rows: list[dict]) -> None:
    from ratchet.hardware.ceilings import cache_path

    if not rows:
        print(f"No measured ceilings cached in {cache_path()} (the judge measures them at its first timing; "
              "`ratchet hw --remeasure` does it now).")
        return
    print(f"Measured ceilings cached in {cache_path()}:")
    for r in rows:
        state = "used by the judge" if r["usable"] else f"not used: {r['problem']}"
        print(f"- {r['measured_at']}: copy {_rate(r['copy_tbps'])} TB/s, matmul {_rate(r['matmul_tflops'])} "
              f"TFLOP/s ({state}) [{r['key']}]")


def _rate(value) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) else "?"


def _cmd_hw_remeasure(args) -> int:
    import torch

    from ratchet.hardware.ceilings import remeasure_ceilings

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    measured = []
    for device in devices:
        c = remeasure_ceilings(device, attempts=3)
        measured.append({"device": device, "key": c.key, "measured_at": c.measured_at, "copy_tbps": c.copy_tbps,
                         "matmul_tflops": c.matmul_tflops, "threads": c.threads, "spread": c.spread,
                         "cached": c.trusted, "busy": c.busy or None, "method": c.method})
    if args.json:
        print(json.dumps({"remeasured": measured}))
        return 0
    for m in measured:
        kept = "cached" if m["cached"] else f"NOT cached ({m['busy']}); try again on a quieter machine"
        threads = f"{m['threads']} thread(s)" if m["threads"] else "GPU"
        print(f"{m['device']}: copy {m['copy_tbps']:.4g} TB/s, matmul {m['matmul_tflops']:.4g} TFLOP/s "
              f"({threads}, rounds within {m['spread']:.0%}, {m['measured_at']}): {kept}")
    return 0


def _cmd_hw_audit(args) -> int:
    from ratchet.hardware.audit import report

    if args.device_name:
        raise UsageError("--audit reads this machine; it does not take --device-name")
    out = report()
    if args.json:
        print(json.dumps(out))
        return 0
    readings = out["readings"]
    rows: list[tuple[str, str]] = []
    for gpu in readings["gpus"]:
        label = f"GPU {gpu['index']}"
        for key, value in gpu.items():
            if key not in ("index", "notes") and value is not None:
                rows.append((f"{label} {key}", _audit_cell(value)))
    for key, value in readings["host"].items():
        if key != "notes" and value is not None:
            rows.append((key, _audit_cell(value)))
    notes = [*readings["notes"], *readings["host"]["notes"],
             *(f"GPU {g['index']} {n}" for g in readings["gpus"] for n in g.get("notes", []))]
    try:
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        console = Console()
        table = Table(title=f"ratchet hw --audit: readings at {readings['taken_at']}")
        table.add_column("reading")
        table.add_column("value", overflow="fold")
        for row in rows:
            table.add_row(*map(Text, row))
        console.print(table)
        if out["findings"]:
            ft = Table(title="what an owner could change (Ratchet changes nothing)", show_lines=True)
            for col, ratio in (("finding", 3), ("tends to buy", 4), ("who and how", 3)):
                ft.add_column(col, ratio=ratio, overflow="fold")
            for f in out["findings"]:
                who = "the host's owner" if f["only_bare_metal"] else "you"
                ft.add_row(Text(f"{f['what']}\nnow: {f['now']}\ncould be: {f['could_be']}"), Text(f["tends_to_buy"]),
                           Text(f"{who}: {f['command_hint']}"))
            console.print(ft)
    except ImportError:
        for row in rows:
            print(f"{row[0]}: {row[1]}")
        for f in out["findings"]:
            print(f"* {f['what']}: {f['now']} -> {f['could_be']}; {f['tends_to_buy']} "
                  f"[{'the host owner' if f['only_bare_metal'] else 'you'}: {f['command_hint']}]")
    if not out["findings"]:
        print("No findings: nothing read here suggests a change.")
    for note in notes:
        print(f"- {note}")
    print(out["note"])
    return 0


def _audit_cell(value) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_audit_cell(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value)) if value else "none"
    return str(value)


def _hw_cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    return str(value)

