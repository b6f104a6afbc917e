"""``ratchet stack MODEL [RUN ...]``: promoted kernels, then CUDA graphs, then torch.compile, each
layer's gain attributed in a waterfall (see ``ratchet.e2e.stack``)."""

from __future__ import annotations

import json


def register(sub, parser_class) -> None:
    stack = sub.add_parser("stack", help="apply gated kernels, CUDA graphs and torch.compile in order; attribute "
                           "each layer's gain", description="Measure one decode setting of MODEL layer by layer, "
                           "all in one interleaved session: eager, then each RUN's best kernel (only when its gate "
                           "passed on this workload, size and device for the run's current best), then CUDA "
                           "graphs (GPU), then torch.compile. Each layer is credited with the time it saves over "
                           "the layer below, so the savings sum to the whole. Also measured: torch.compile with "
                           "CUDA graphs without Ratchet's kernels, the reference the final tokens/s are compared "
                           "with.")
    from ratchet.cli.common import MODEL_HELP, add_ledger_option

    stack.add_argument("workload", metavar="MODEL", help=MODEL_HELP)
    stack.add_argument("runs", metavar="RUN", nargs="*", help="runs whose gated best kernels to stack, in order")
    stack.add_argument("--size", choices=["full", "tiny"], help="workload size (default: full on cuda, tiny on cpu)")
    stack.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda if present, else cpu")
    stack.add_argument("--context", type=int, metavar="N", help="cached tokens per row (default: full 8192, tiny 256)")
    stack.add_argument("--batch", type=int, metavar="N", help="rows decoded per step (default: full 32, tiny 4)")
    stack.add_argument("--no-compile", action="store_true", help="leave out the torch.compile layer and reference "
                       "(compiling takes minutes on a CPU)")
    stack.add_argument("--compile-mode", default="default", choices=["default", "max-autotune-no-cudagraphs"],
                       help="torch.compile mode of the compile layer and the reference (default: default)")
    stack.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    add_ledger_option(stack)
    stack.set_defaults(func=cmd_stack)


def cmd_stack(args) -> int:
    from contextlib import ExitStack

    from ratchet.cli.common import UsageError, default_size, gates_dir, open_ledger, resolve_device, stderr_progress
    from ratchet.run.ledger import default_ledger_path
    from ratchet.e2e.models import ModelError
    from ratchet.e2e.stack import StackError, StackRequest, default_setting, run_stack

    device = resolve_device(args.device)
    size = args.size or default_size(device)
    batch, context = default_setting(size)
    for flag, value in (("--context", args.context), ("--batch", args.batch)):
        if value is not None and value < 1:
            raise UsageError(f"{flag} must be a positive whole number")
    request = StackRequest(workload=args.workload, runs=tuple(args.runs), size=size, device=device,
                           batch=args.batch or batch, context=args.context or context, compile=not args.no_compile,
                           compile_mode=args.compile_mode)
    path = default_ledger_path(args.ledger)
    if args.runs and not path.exists():
        raise UsageError(f"no ledger at {path}, so no run to stack")
    with ExitStack() as stack:
        ledger = stack.enter_context(open_ledger(args.ledger, create=False)) if path.exists() else _NoLedger()
        try:
            result = run_stack(ledger, request, gates_dir(args.ledger), progress=stderr_progress(args.json))
        except (StackError, ModelError) as exc:
            raise UsageError(str(exc)) from None
    if args.json:
        print(json.dumps(result.to_json()))
    else:
        print_stack(result)
    return 0


class _NoLedger:
    """Stands in for the ledger when no run is given and none exists: nothing is read from it."""


def print_stack(result) -> None:
    from ratchet.cli.common import print_table_head

    data = result.to_json()
    print_table_head(f"ratchet stack: {result.workload} ({result.size}, {result.device}: {result.device_name}), "
                     f"decode batch {result.batch} at context {result.context}",
                     f"{'layer':<48} {'step us':>10} {'IQR us':>8} {'saved us':>9} {'gain':>7} {'vs eager':>9} "
                     f"{'tokens/s':>10}  vs below")
    for layer in result.layers:
        t = layer.timing
        saved = "-" if layer.saved_us is None else f"{layer.saved_us:.1f}"
        gain = "-" if layer.gain is None else f"{layer.gain:.3f}x"
        print(f"{layer.name:<48} {t.median_us:>10.1f} {t.iqr_us:>8.1f} {saved:>9} {gain:>7} "
              f"{layer.speedup_vs_eager:>8.3f}x {layer.tokens_per_s:>10.1f}  {layer.vs_below or ''}")
    print(f"{'= whole stack (sum of savings)':<48} {'':>10} {'':>8} {result.total_saved_us:>9.1f} {'':>7} "
          f"{data['speedup_vs_eager']:>8.3f}x")
    ref = result.reference
    if ref is not None:
        print(f"reference: {ref.name}: {ref.timing.median_us:.1f} us/step, {ref.tokens_per_s:.1f} tokens/s; "
              f"the stack is {data['speedup_vs_reference']:.3f}x its speed")
    for note in result.notes:
        print(f"- {note}")
