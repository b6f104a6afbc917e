"""The ``ratchet`` command: parses, calls the library, prints. No logic a library user would need."""

from __future__ import annotations

import argparse
import json
import os
import sys

EXIT_USAGE = 2


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not argparse's usage block
        raise UsageError(f"{message} (see '{self.prog} --help')")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ratchet", description=(
        "Ratchet: autoresearch for the GPU kernels of LLM inference. A trusted judge checks every "
        "candidate kernel on fresh inputs and held-out shapes and times it against the task's reference."))
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    ev = sub.add_parser("eval", help="judge one candidate kernel against a task", description=(
        "Judge CANDIDATE on TASK: correctness on public and held-out shapes in every dtype, guards against "
        "reward hacks, then timing interleaved with the reference. Exit 0 pass, 1 fail, 2 error or bad usage."))
    ev.add_argument("task", metavar="TASK", help="built-in task name (see 'ratchet tasks'), task file, or KernelBench problem file")
    ev.add_argument("candidate", metavar="CANDIDATE", help="candidate file defining kernel(...) (or a KernelBench ModelNew file)")
    ev.add_argument("--config", metavar="JSON", help="one point of the candidate's SPACE, e.g. '{\"BLOCK\": 1024}'")
    ev.add_argument("--device", choices=["cpu", "cuda"], help="where to judge (default: cuda if present, else cpu)")
    ev.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    ev.add_argument("--allow", action="append", default=[], metavar="OP",
                    help="allow a forbidden op by its profiler name (repeatable)")
    ev.add_argument("--no-timing", action="store_true", help="check correctness only")
    ev.add_argument("--run", metavar="RUN", help="record the attempt in RUN (proposer 'agent') and apply the "
                    "keep rule; the run's task file and device judge it (see 'ratchet program')")
    ev.add_argument("--ncu", action="store_true", help="if the candidate passes on a GPU, profile one call of it "
                    "with Nsight Compute (DRAM and SM throughput, occupancy, registers, spills) to explain its "
                    "bottleneck class; never changes the verdict ($RATCHET_NCU: path to ncu, or off)")
    ev.add_argument("--idea", type=int, metavar="ID", help="with --run: the idea this attempt tries")
    ev.add_argument("--ledger", metavar="PATH", help="with --run: ledger file (default: $RATCHET_LEDGER or "
                    ".ratchet/ledger.sqlite)")
    ev.set_defaults(func=cmd_eval)

    rn = sub.add_parser("run", help="run the ratchet on a task: propose, judge, keep only real wins", description=(
        "Propose candidates (by default: tune every seed's SPACE with Optuna), judge each, keep a new best only "
        "when it is faster beyond noise on the task's shapes. Stops at --target, the budget or Ctrl-C; every "
        "attempt is in the ledger, and --resume RUN continues a stopped or killed run."))
    rn.add_argument("task", metavar="TASK", nargs="?", help="built-in task name or task file (not with --resume)")
    rn.add_argument("--seed", action="append", default=[], metavar="FILE",
                    help="start from this candidate file (repeatable; default: the task's seeds for the device)")
    rn.add_argument("--proposer", choices=["tune", "llm"], default="tune",
                    help="what proposes the next attempt: tune (search each seed's SPACE) or llm (a model writes "
                    "candidate files, the tuner tunes their SPACE)")
    llm = rn.add_argument_group("--proposer llm", "key from OPENAI_API_KEY or ANTHROPIC_API_KEY; the openai "
                                "provider also honours OPENAI_BASE_URL")
    llm.add_argument("--llm-provider", choices=["openai", "anthropic"], default="openai",
                     help="openai: any OpenAI-compatible chat endpoint (OpenAI, vLLM, SGLang); anthropic: the "
                     "Messages API (default: openai)")
    llm.add_argument("--llm-model", metavar="NAME", help="the model the endpoint serves (required with --proposer llm)")
    llm.add_argument("--llm-base-url", metavar="URL", help="endpoint, e.g. http://localhost:8000/v1 for a local vLLM "
                     "(default: $OPENAI_BASE_URL, else the provider's API)")
    llm.add_argument("--llm-max-tokens-total", type=int, metavar="N",
                     help="start no model call once N tokens (in + out) were spent")
    llm.add_argument("--llm-max-cost", type=float, metavar="USD",
                     help="start no model call once this much was spent (needs the prices)")
    llm.add_argument("--llm-price-in", type=float, default=0.0, metavar="USD",
                     help="price per million input tokens (default 0: cost unknown)")
    llm.add_argument("--llm-price-out", type=float, default=0.0, metavar="USD",
                     help="price per million output tokens (default 0: cost unknown)")
    rn.add_argument("--sampler", choices=["tpe", "random", "grid"], default="tpe", help="the tuner's search strategy")
    rn.add_argument("--target", metavar="SPEEDUP", help="stop when the best reaches this speedup, e.g. 3x")
    budget = rn.add_mutually_exclusive_group()
    budget.add_argument("--budget", type=int, metavar="N", help="stop after N attempts")
    budget.add_argument("--time", metavar="DURATION",
                        help="stop proposing after this long, e.g. 90s, 20m, 2h; evaluations already in flight (up to 3 "
                             "per GPU) still finish and are recorded")
    rn.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda if present, else cpu")
    rn.add_argument("--gpus", metavar="LIST", help="GPU indices to judge on in parallel, e.g. 0,1 (default: 0)")
    rn.add_argument("--no-ncu", action="store_true", help="do not profile kept attempts with Nsight Compute "
                    "(by default each new best on a GPU is profiled once where ncu works, to explain its "
                    "bottleneck class; same as RATCHET_NCU=off)")
    rn.add_argument("--resume", metavar="RUN", help="continue a stopped or killed run")
    rn.add_argument("--ledger", metavar="PATH", help="ledger file (default: $RATCHET_LEDGER or .ratchet/ledger.sqlite)")
    rn.set_defaults(func=cmd_run)

    rs = sub.add_parser("runs", help="list the runs in the ledger", description="List runs: id, task, status, "
                        "attempts and best speedup.")
    rs.add_argument("--json", action="store_true", help="print a JSON list")
    rs.add_argument("--ledger", metavar="PATH", help="ledger file")
    rs.set_defaults(func=cmd_runs)

    sh = sub.add_parser("show", help="show one run: its attempts, best history and failures",
                        description="Show a run: settings, every attempt with verdict and speedup, the best's history.")
    sh.add_argument("run", metavar="RUN")
    sh.add_argument("--json", action="store_true", help="print the run and its attempts as JSON")
    sh.add_argument("--ledger", metavar="PATH", help="ledger file")
    sh.set_defaults(func=cmd_show)

    bs = sub.add_parser("best", help="write a run's best candidate as a standalone file",
                        description="Write the best candidate of RUN, its config baked in, to FILE; "
                        "'ratchet eval TASK FILE' judges it as it is.")
    bs.add_argument("run", metavar="RUN")
    bs.add_argument("-o", "--output", required=True, metavar="FILE")
    bs.add_argument("--ledger", metavar="PATH", help="ledger file")
    bs.set_defaults(func=cmd_best)

    ts = sub.add_parser("tasks", help="list the built-in tasks and their seeds",
                        description="List built-in tasks with their shapes, dtypes and seed candidates.")
    ts.add_argument("--json", action="store_true", help="print a JSON list")
    ts.set_defaults(func=cmd_tasks)

    hw = sub.add_parser("hw", help="show this machine's GPU: what torch reports and its datasheet lead",
                        description="Show the detected device (read-only, nothing measured) merged with its datasheet "
                        "sheet, and the cached measured ceilings if any. --device-name shows a sheet without hardware.")
    hw.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    hw.add_argument("--device-name", metavar="NAME", help="show the sheet for NAME (e.g. H200) instead of detecting")
    hw.add_argument("--audit", action="store_true", help=(
        "read clocks, power limit, persistence, PCIe link, ECC, MIG, CPU governor, NUMA and THP, and say what "
        "an owner of the bare metal could change and what it tends to buy (changes nothing)"))
    hw.set_defaults(func=cmd_hw)

    from ratchet.commands import register_all

    register_all(sub, _Parser)
    return parser


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def cmd_eval(args) -> int:
    from contextlib import ExitStack

    from ratchet import agents_api
    from ratchet.candidate import CandidateError, load_candidate, parse_config
    from ratchet.judge import JudgeOptions, evaluate
    from ratchet.judge.verdict import Reason, Verdict
    from ratchet.ledger import LedgerError
    from ratchet.report.console import print_verdict
    from ratchet.task import TaskError, load_task

    with ExitStack() as stack:
        ledger = run = None
        try:
            if args.run:
                if args.allow or args.no_timing:
                    raise UsageError("--allow and --no-timing cannot be used with --run: a run's judge is fixed")
                ledger = stack.enter_context(open_ledger(args.ledger, create=False))
                run = ledger.get_run(args.run)
            elif args.idea is not None or args.ledger:
                raise UsageError("--idea and --ledger go with --run RUN")
            device = resolve_device(args.device or (run and run["device"]))
            task = agents_api.task_for_run(run, args.task) if run else load_task(args.task)
            candidate = load_candidate(args.candidate)
            config = candidate.resolve_config(parse_config(args.config))
            if run:
                agents_api.check_attempt(ledger, run, device, candidate, config, args.idea)
        except (UsageError, TaskError, CandidateError, LedgerError) as exc:
            if args.json:  # programs reading stdout still get their one object
                bad = Verdict("error", [Reason("bad_input", str(exc))], task=args.task, candidate=args.candidate)
                print(json.dumps(bad.to_json()))
            raise
        options = JudgeOptions(device=device, allow=tuple(args.allow), time_it=not args.no_timing)
        verdict = evaluate(task, candidate, config, options)
        counters = None
        if args.ncu:  # after the verdict, with nothing else on the GPU: this process judged alone
            from ratchet.ncu import profile_judged

            counters = profile_judged(task, candidate, config, verdict.verdict, device).to_json()
        recorded = {}
        if run:
            recorded = agents_api.record(ledger, run["id"], candidate, config, verdict.to_json(with_times=True),
                                         args.idea)
            if counters and counters["available"]:
                from ratchet.record import attach_counters

                seq = recorded["attempt_seq"]
                attempt = next(a for a in ledger.attempts(run["id"]) if a["seq"] == seq)
                attach_counters(ledger, attempt["id"], counters)
    if args.json:
        print(json.dumps({**verdict.to_json(), **recorded, **({"counters": counters} if counters else {})}))
    else:
        print_verdict(verdict, counters=counters)
        if recorded:
            best = "none"
            if recorded["best_seq"]:
                best = f"{recorded['best_speedup']:.3f}x (attempt {recorded['best_seq']})"
            print(f"recorded as attempt {recorded['attempt_seq']} of run {recorded['run']}: "
                  f"{'KEPT' if recorded['kept'] else 'not kept'} ({recorded['keep_reason']}); best {best}")
    if verdict.verdict == "error":
        first = verdict.reasons[0]
        print(f"ratchet: error: {first.code}: {first.detail}", file=sys.stderr)
    return verdict.exit_code


def resolve_device(requested: str | None) -> str:
    import torch

    device = requested or default_device()
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is present on this machine (use --device cpu)")
    return device


def parse_speedup(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text.lower().removesuffix("x"))
    except ValueError:
        raise UsageError(f"--target '{text}' is not a speedup like 3x or 1.5") from None
    if value <= 0:
        raise UsageError("--target must be positive")
    return value


def parse_duration(text: str | None) -> float | None:
    if text is None:
        return None
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    try:
        if text[-1].lower() in units:
            value = float(text[:-1]) * units[text[-1].lower()]
        else:
            value = float(text)
    except (ValueError, IndexError):
        raise UsageError(f"--time '{text}' is not a duration like 90s, 20m or 2h") from None
    if value <= 0:
        raise UsageError("--time must be positive")
    return value


def parse_gpus(text: str | None, device: str) -> list[int] | None:
    if text is None:
        return None
    import torch

    if device != "cuda":
        raise UsageError("--gpus needs --device cuda")
    try:
        gpus = [int(g) for g in text.split(",") if g.strip()]
    except ValueError:
        raise UsageError(f"--gpus '{text}' is not a list of GPU indices like 0,1") from None
    bad = [g for g in gpus if not 0 <= g < torch.cuda.device_count()]
    if not gpus or bad:
        raise UsageError(f"--gpus {text}: this machine has {torch.cuda.device_count()} GPU(s)")
    if len(set(gpus)) != len(gpus):
        # Each GPU's evaluations share one device lock; a GPU listed twice would time two at once.
        raise UsageError(f"--gpus {text}: list each GPU once")
    return gpus


def open_ledger(path: str | None, create: bool = True):
    from ratchet.ledger import Ledger, default_ledger_path

    return Ledger(default_ledger_path(path), create=create)


def cmd_run(args) -> int:
    from ratchet.run_command import RunRequest, start_or_resume
    from ratchet.search.llm_client import LLMSetupError

    if args.resume and args.task:
        raise UsageError("give either TASK or --resume RUN, not both")
    if not args.resume and not args.task:
        raise UsageError("run needs a TASK (or --resume RUN)")
    device = resolve_device(args.device)
    if args.no_ncu:  # read by ratchet.ncu.find_ncu in the loop: no profile in this process
        os.environ["RATCHET_NCU"] = "off"
    request = RunRequest(task=args.task, seeds=tuple(args.seed), proposer=args.proposer, sampler=args.sampler,
                         target=parse_speedup(args.target), budget=args.budget, seconds=parse_duration(args.time),
                         device=device, gpus=tuple(parse_gpus(args.gpus, device) or ()), resume=args.resume,
                         llm=llm_settings(args))
    with open_ledger(args.ledger) as ledger:
        try:
            return start_or_resume(ledger, request)
        except LLMSetupError as exc:
            raise UsageError(str(exc)) from None


def llm_settings(args):
    """The --llm-* flags as LLMSettings (checked: model, key, prices), or None for another proposer."""
    from ratchet.search.llm_client import LLMSettings, LLMSetupError

    given = [f for f in ("llm_model", "llm_base_url", "llm_max_tokens_total", "llm_max_cost") if getattr(args, f)]
    given += [f for f in ("llm_price_in", "llm_price_out") if getattr(args, f)]
    given += ["llm_provider"] if args.llm_provider != "openai" else []
    if args.proposer != "llm" or args.resume:
        if given and not args.resume:
            raise UsageError(f"--{given[0].replace('_', '-')} goes with --proposer llm")
        return None
    settings = LLMSettings(model=args.llm_model or "", provider=args.llm_provider, base_url=args.llm_base_url,
                           price_in_per_mtok=args.llm_price_in, price_out_per_mtok=args.llm_price_out,
                           max_tokens_total=args.llm_max_tokens_total, max_cost_usd=args.llm_max_cost)
    try:
        settings.check()
    except LLMSetupError as exc:
        raise UsageError(str(exc)) from None
    return settings


def cmd_runs(args) -> int:
    from ratchet.ledger import default_ledger_path

    if not default_ledger_path(args.ledger).exists():
        runs = []
    else:
        with open_ledger(args.ledger, create=False) as ledger:
            runs = ledger.list_runs()
    if args.json:
        print(json.dumps(runs))
        return 0
    if not runs:
        print("no runs yet (start one with 'ratchet run TASK')")
    for r in runs:
        best = f"{r['best_speedup']:.3f}x" if r["best_speedup"] else "-"
        print(f"{r['id']}  {r['task']:<16} {r['status']:<8} {r['attempts']:>4} attempts  best {best:<8} "
              f"{r['device']}  {r['created_at']}")
    return 0


def cmd_show(args) -> int:
    from ratchet.report.console import best_bottlenecks, print_run

    with open_ledger(args.ledger, create=False) as ledger:
        run = ledger.get_run(args.run)
        attempts = ledger.attempts(args.run)
        history = ledger.best_history(args.run)
        ideas = ledger.ideas(run["task"])
    if args.json:
        slim = [{k: v for k, v in a.items() if k not in ("source", "shapes")} for a in attempts]
        best = next((a for a in attempts if history and a["id"] == history[-1]["attempt_id"]), None)
        print(json.dumps({"run": run, "attempts": slim, "best_history": history, "ideas": ideas,
                          "best_bottlenecks": best_bottlenecks(best) if best else []}))
    else:
        print_run(run, attempts, history, ideas)
    return 0


def cmd_best(args) -> int:
    from ratchet.ledger import write_standalone

    with open_ledger(args.ledger, create=False) as ledger:
        ledger.get_run(args.run)
        best = ledger.best(args.run)
    if best is None:
        raise UsageError(f"run '{args.run}' has no passing attempt yet")
    path = write_standalone(best, args.output)
    print(f"wrote {path} (attempt {best['seq']}, speedup {best['speedup']:.3f}x, config {best['config']})")
    return 0


def cmd_tasks(args) -> int:
    from ratchet.task import builtin_task_names, load_task

    rows = []
    for name in builtin_task_names():
        task = load_task(name)
        rows.append({"name": name, "seeds": [str(p) for p in task.seeds()],
                     "dtypes": [str(d).removeprefix("torch.") for d in task.dtypes],
                     "gpu_shapes": len(task.gpu.public), "cpu_shapes": len(task.cpu.public),
                     "description": task.description})
    if args.json:
        print(json.dumps(rows))
    else:
        for row in rows:
            print(f"{row['name']:<18} {', '.join(row['dtypes']):<24} {row['gpu_shapes']} GPU / {row['cpu_shapes']} CPU "
                  f"shapes, {len(row['seeds'])} seeds")
    return 0


def cmd_hw(args) -> int:
    from ratchet.hardware.sheets import SHEETS, find_sheet

    if getattr(args, "audit", False):
        return _cmd_hw_audit(args)
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
    print(out["note"])
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


def main(argv: list[str] | None = None) -> int:
    from ratchet.candidate import CandidateError
    from ratchet.ledger import LedgerError
    from ratchet.task import TaskError

    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return EXIT_USAGE
        return args.func(args)
    except (UsageError, TaskError, CandidateError, LedgerError) as exc:
        print(f"ratchet: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("ratchet: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
