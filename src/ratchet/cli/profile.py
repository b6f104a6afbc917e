"""``ratchet profile MODEL``: which ops of a workload's decode and prefill steps matter, the Amdahl
bound on what speeding each up can buy, the built-in tasks worth a run, and (``--extract DIR``) task
files for ops with no task (``ratchet.e2e.profile``)."""

from __future__ import annotations

import json
import math
import sys

TABLE_ROWS = 15  # ops shown per phase (the rest are summed in one row; --json has them all)
SHOWN_SHAPES = 3


def register(sub, parser_class) -> None:
    p = sub.add_parser(
        "profile", help="profile a workload's decode and prefill: time per op, Amdahl bounds, tasks worth a run",
        description=(
            "Run MODEL's decode steps and a prefill under torch.profiler (eager, so every op is visible; on "
            "CUDA the decode step is also timed as a CUDA graph replay) and split each step's time among the "
            "registry's ops (each mapped to its built-in task, with the shapes the workload runs) and every other "
            "op (GEMMs, attention, MoE experts, copies), grouped by profiler op name and input shapes. For each: "
            "its share of the step and Amdahl's bound on the whole step's speedup if the op took no time or ran "
            "2x faster. Then the built-in tasks worth a run, by share (decode x 1, prefill x 0.5), the ops "
            "with no task, and the model's own modules (an MoE block, a GELU MLP) that run ops no task or op "
            "extractor covers, each with its share and Amdahl bounds. --extract DIR writes a task file, with a "
            "seed that runs its reference, for each op with no task that Ratchet can rebuild (F.linear GEMMs, "
            "bmm, MoE grouped GEMM, prefill attention) and for each such module: its reference runs the "
            "module's own class on the profiled inputs with the weights as arguments."))
    from ratchet.cli.common import MODEL_HELP

    p.add_argument("workload", metavar="MODEL", help=MODEL_HELP)
    p.add_argument("--size", choices=["full", "tiny"], help="built-in workloads: full: real widths in bf16 (needs a "
                   "GPU); tiny: small, fp32, for a CPU (default: full on cuda, tiny on cpu); a transformers config "
                   "says its own widths")
    p.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda if present, else cpu")
    p.add_argument("--batch", type=int, metavar="N", help="decode rows (default: 8 full, 2 tiny)")
    p.add_argument("--context", type=int, metavar="N", help="cached tokens before the decode steps (default: 4096 "
                   "full, 32 tiny)")
    p.add_argument("--prefill", type=int, metavar="N", help="tokens of the one prefill prompt; 0 skips prefill "
                   "(default: 2048 full, 32 tiny)")
    p.add_argument("--steps", type=int, metavar="N", help="decode steps, and prefills, profiled; each op's time "
                   "is the least over them (default: 5 full, 3 tiny)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    p.add_argument("--extract", metavar="DIR", help="write DIR/<workload>_<op>/task.py (and seeds/) for the ops "
                   "with no built-in task that can be rebuilt, and DIR/<workload>_<ModuleClass>/ for the modules "
                   "with no task")
    p.add_argument("--force", action="store_true", help="with --extract: replace task files that exist")
    p.add_argument("--apply", metavar="PKG", help="the folder of a 'ratchet export' package (its pyproject.toml's "
                   "folder): run its apply(model) first, so the profile shows where the step goes with the "
                   "package's kernels in (transformers models)")
    p.set_defaults(func=cmd_profile)


def cmd_profile(args) -> int:
    from ratchet.cli.common import UsageError, resolve_device
    from ratchet.e2e.extract import extract_tasks
    from ratchet.e2e.extract_module import extract_module_tasks
    from ratchet.e2e.profile import DEFAULTS, ProfileError, profile_workload

    if args.force and not args.extract:
        raise UsageError("--force goes with --extract DIR")
    if args.apply:  # refused before anything is built
        from ratchet.e2e.exported import PackageError, package_dir
        from ratchet.e2e.models import ModelError, kind_of

        try:
            package_dir(args.apply)
            if kind_of(args.workload) != "transformers":
                raise UsageError("--apply takes a transformers model (a directory or config.json): an exported "
                                 "package applies to those")
        except (PackageError, ModelError) as exc:
            raise UsageError(str(exc)) from None
    device = resolve_device(args.device)
    size = args.size or ("full" if device == "cuda" else "tiny")
    settings = {k: DEFAULTS[size][k] if getattr(args, k) is None else getattr(args, k)
                for k in ("batch", "context", "prefill", "steps")}
    try:  # the settings are checked before anything is built
        prof = profile_workload(args.workload, size, device, settings["batch"], settings["context"],
                                settings["prefill"], settings["steps"], apply=args.apply,
                                progress=lambda msg: print(f"ratchet profile: {msg}", file=sys.stderr, flush=True))
    except ProfileError as exc:
        raise UsageError(str(exc)) from None
    except (MemoryError, RuntimeError) as exc:  # torch.OutOfMemoryError is a RuntimeError
        if not any(word in str(exc).lower() for word in ("out of memory", "allocate")):
            raise
        raise UsageError(f"out of memory profiling {args.workload} ({size}) at batch {settings['batch']}, context "
                         f"{settings['context']}, prefill {settings['prefill']}: use smaller numbers") from None
    extracted, skipped = [], []
    if args.extract:
        try:
            extracted = extract_tasks(prof, args.extract, force=args.force)
            modules, skipped = extract_module_tasks(prof, args.extract, force=args.force)
            extracted += modules
        except OSError as exc:
            raise UsageError(f"cannot write under {args.extract}: {exc.strerror or exc}") from None
    if args.json:
        out = prof.to_json()
        if args.extract:
            out["extracted"] = [vars(e) for e in extracted]
            out["not_extracted"] = [vars(s) for s in skipped]
        print(json.dumps(out))
        return 0
    print_profile(prof)
    if args.extract:
        print_extracted(extracted, args.extract)
        for s in skipped:
            print(f"not extracted: {s.name}: {s.why}")
    return 0


# -- printing --------------------------------------------------------------------------------------------
def _x(value: float) -> str:
    return "unbounded" if not math.isfinite(value) else f"{value:.3f}x"


def _pct(share: float) -> str:
    return f"{100 * share:.1f}%"


def _shapes(op) -> str:
    shown = [f"{s.label} {s.dtype or ''}".strip() for s in op.shapes[:SHOWN_SHAPES]]
    more = len(op.shapes) - SHOWN_SHAPES
    return "; ".join(shown) + (f"; +{more} more" if more > 0 else "")


def print_profile(prof, console=None) -> None:
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    from ratchet.e2e.exported import PACKAGE_PREFIX
    from ratchet.report.terminal import make_console

    console = console or make_console()
    console.print(f"[bold]ratchet profile[/] {prof.workload} ({prof.size}, {prof.device}, {prof.dtype})")
    for phase in prof.phases:
        setting = ", ".join(f"{k} {v}" for k, v in phase.setting.items())
        extra = f"; unprofiled eager {phase.unprofiled_step_us:.0f} µs" if phase.unprofiled_step_us else ""
        if phase.graph_step_us:
            extra += f"; CUDA graph {phase.graph_step_us:.0f} µs"
        table = Table(title=escape(f"{phase.name} ({setting}): step {phase.step_us:.0f} µs [{phase.basis}]{extra}"))
        # Calls and times per step, averaged over the profiled steps: an op some steps skip has a fraction.
        for col, justify in (("op", "left"), ("task", "left"), ("calls", "right"), ("µs", "right"),
                             ("share", "right"), ("if free", "right"), ("if 2x", "right"), ("shapes", "left")):
            table.add_column(col, justify=justify, overflow="fold")
        shown = phase.ops[:TABLE_ROWS]
        for op in shown:
            task = op.task or ("(package)" if op.name.startswith(PACKAGE_PREFIX) else "-")
            table.add_row(Text(op.name), Text(task), _calls(op.calls), f"{op.time_us:.1f}", _pct(op.share),
                          _x(op.speedup_if_free), _x(op.speedup_if_2x), Text(_shapes(op)))
        rest = phase.ops[TABLE_ROWS:]
        if rest:
            t = sum(o.time_us for o in rest)
            table.add_row(Text(f"({len(rest)} more ops)"), "", "", f"{t:.1f}", _pct(sum(o.share for o in rest)),
                          "", "", "")
        table.add_row(Text("(no op: Python, gaps, profiler)"), "", "", f"{phase.other_us:.1f}",
                      _pct(phase.other_share), "", "", "")
        console.print(table)
        for note in phase.notes:
            console.print(f"  note: {note}")
    console.print("[bold]Tasks worth a run[/] (by share: decode x 1, prefill x 0.5; bounds: the step's speedup if "
                  "the op took no time / ran 2x faster)")
    for i, c in enumerate(prof.worth_a_run, 1):
        console.print(Text(f"{i}. {c.name}: {_pct(c.score)}  " + _by_phase(c)))
        for phase, shapes in c.shapes.items():
            for s in shapes:
                judged = ("in its public shapes" if s["in_task_public"] else
                          "in its held-out ranges" if s["in_task_held_out"] else "NOT in its shape set")
                dtype = "" if s["dtype_judged"] else f", {s['dtype']} not judged"
                console.print(Text(f"     {phase}: {shape_text(s['shape'])} {s['dtype']}: {judged} "
                                   f"({prof.device} set){dtype}"))
    if prof.no_task:
        console.print("[bold]Ops with no task[/] (from 1% of a step)")
        for c in prof.no_task:
            how = f"--extract writes task '{task_stem(prof.workload)}_{c.extractor}'" if c.extractor else "no extractor"
            console.print(Text(f"- {c.name} ({c.family}): {_pct(c.score)}  {_by_phase(c)}; {how}"))
    if prof.modules_no_task:
        console.print("[bold]Modules with no task[/] (from 1% of a step, running ops no task or op extractor "
                      "covers; --extract writes a task whose reference is the module itself)")
        for m in prof.modules_no_task:
            where = ", ".join(m.paths[:2]) + (f", +{len(m.paths) - 2} more" if len(m.paths) > 2 else "")
            console.print(Text(f"- {m.name} ({where}): {_pct(m.score)}  {_by_phase(m)}"))
            for phase, labels in m.inputs.items():
                ops = ", ".join(o.removeprefix("aten::") for o in m.uncovered_ops[phase])
                console.print(Text(f"     {phase}: ({'; '.join(labels)}); uncovered: {ops} "
                                   f"({100 * m.uncovered_shares[phase]:.2f}% of the step)"))
    if prof.modules_not_remade:
        console.print("[bold]Modules no task can be made of[/] (as large, their calls cannot be remade)")
        for name, paths, score, why in prof.modules_not_remade:
            where = ", ".join(paths[:2]) + (f", +{len(paths) - 2} more" if len(paths) > 2 else "")
            console.print(Text(f"- {name} ({where}): {_pct(score)} of a step in ops no task covers; its forward {why}"))
    for note in prof.notes:
        console.print(f"note: {note}")


def _calls(calls: float) -> str:
    return f"{calls:g}" if float(calls).is_integer() else f"{calls:.2f}"


def task_stem(workload: str) -> str:
    from ratchet.e2e.extract import _stem

    return _stem(workload)


def shape_text(shape) -> str:
    from ratchet.e2e.profile import shape_label

    return shape_label(shape)


def _by_phase(c) -> str:
    return "; ".join(f"{ph} {_pct(s)} (if free {_x(c.speedup_if_free[ph])}, 2x {_x(c.speedup_if_2x[ph])})"
                     for ph, s in c.shares.items())


def print_extracted(extracted, out_dir) -> None:
    if not extracted:
        print(f"--extract: no op with no task here can be rebuilt as a task; nothing written to {out_dir}")
        return
    for e in extracted:
        verb = "wrote" if e.written else "kept (exists; --force replaces it)"
        print(f"{verb} {e.path}: {e.family}, {len(e.shapes)} profiled shape(s), {e.dtype}; check it with "
              f"'ratchet eval {e.path} {e.seed} --device cpu'")
