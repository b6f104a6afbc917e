"""``ratchet gate RUN --workload MODEL``: is the run's best kernel a win for the whole model step?
Exit 0 when it passes, 1 when it does not, 2 on bad usage (see ``ratchet.e2e.gate``)."""

from __future__ import annotations

import json


def register(sub, parser_class) -> None:
    gate = sub.add_parser("gate", help="put a run's best kernel into a workload: no setting slower, same logits",
                          description="Put the best kernel of RUN into workload W and compare it with the "
                          "workload without it: decode at every context and batch of the grid with CUDA graphs on "
                          "(on a CPU: eager steps, graph capture simulated), and prefill. A setting fails when the "
                          "step is slower beyond noise, the logits differ beyond the task's tolerance carried "
                          "through the model, or the kernel breaks graph capture. A module task's kernel (from "
                          "'ratchet profile --extract') goes in as the forward of the model's modules of its class. "
                          "Keep the grid's batches and lengths inside the shapes the run judged: the 'judged' "
                          "column counts the op's calls there, where an exported package runs the kernel. The "
                          "outcome is written next to the ledger (gates/), where 'ratchet stack' finds it. Exit 0 "
                          "pass, 1 fail, 2 bad usage.")
    from ratchet.cli.common import MODEL_HELP, add_grid_options, add_ledger_option

    gate.add_argument("run", metavar="RUN", help="the run whose best kernel to gate")
    gate.add_argument("--workload", required=True, metavar="MODEL", help="the model whose step to gate on: " + MODEL_HELP)
    gate.add_argument("--size", choices=["full", "tiny"], help="workload size (default: full on cuda, tiny on cpu)")
    gate.add_argument("--device", choices=["cpu", "cuda"], help="default: the run's device")
    add_grid_options(gate)
    gate.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    add_ledger_option(gate)
    gate.set_defaults(func=cmd_gate)


def cmd_gate(args) -> int:
    from dataclasses import replace

    from ratchet.cli.common import (UsageError, default_size, gates_dir, open_ledger, parse_ints, parse_prefill,
                                    resolve_device, stderr_progress)
    from ratchet.e2e.gate import GateError, GateRequest, default_grid, run_gate
    from ratchet.e2e.models import ModelError
    from ratchet.run.ledger import LedgerError

    try:
        with open_ledger(args.ledger, create=False) as ledger:
            run = ledger.get_run(args.run)
            device = resolve_device(args.device or run["device"])
            size = args.size or default_size(device)
            grid = default_grid(size)
            contexts = parse_ints(args.contexts, "--contexts")
            if contexts is not None:  # contexts given: exactly those, nothing added where memory allows
                grid = replace(grid, contexts=contexts, extra_contexts=())
            grid = replace(grid, batches=parse_ints(args.batches, "--batches") or grid.batches)
            prefill = parse_prefill(args.prefill)
            if prefill is not None:
                grid = replace(grid, prefill=prefill)
            request = GateRequest(run=args.run, workload=args.workload, size=size, device=device, grid=grid)
            result = run_gate(ledger, request, gates_dir(args.ledger), progress=stderr_progress(args.json))
    except (GateError, UsageError, LedgerError, ModelError) as exc:
        if args.json:  # programs reading stdout still get their one object
            print(json.dumps({"run": args.run, "workload": args.workload, "verdict": "error", "passed": False,
                              "reasons": [{"code": "bad_input", "detail": str(exc)}]}))
        raise UsageError(str(exc)) from None
    if args.json:
        print(json.dumps(result.to_json()))
    else:
        print_gate(result)
    return 0 if result.passed else 1


def _us(value) -> str:
    return "-" if value is None else f"{value:.1f}"


def print_gate(result) -> None:
    from ratchet.cli.common import print_table_head

    a = result.attempt
    print_table_head(f"ratchet gate {result.run}: {result.op} attempt {a['seq']} (sha {a['source_sha256'][:12]}, "
                     f"config {a['config']}) in {result.workload} ({result.size}, {result.device}: "
                     f"{result.device_name})",
                     f"{'setting':<22} {'graphs':<9} {'baseline us':>12} {'kernel us':>12} {'ratio':>7} {'noise':>6} "
                     f"{'logits err/allowed':>19} {'judged':>7}  verdict")
    for s in result.settings:
        c = s.comparison
        ratio = f"{c.ratio:.3f}" if c else "-"
        noise = f"{100 * c.noise:.1f}%" if c else "-"
        logits = f"{s.logits_err:.1e}/{s.logits_budget:.1e}" if s.logits_err is not None else "-"
        base = f"{_us(s.baseline.median_us)}" if s.baseline else "-"
        kern = f"{_us(s.kernel.median_us)}" if s.kernel else "-"
        verdict = s.verdict + (f" ({s.reason})" if s.reason else "")
        judged = f"{s.calls_judged[0]}/{s.calls_judged[1]}" if s.calls_judged else "-"
        print(f"{s.label:<22} {s.graphs:<9} {base:>12} {kern:>12} {ratio:>7} {noise:>6} {logits:>19} {judged:>7}  {verdict}")
    print("- ratio: kernel us / baseline us, the whole step (under 1: faster with the kernel); noise: the baseline's "
          "own spread, never under the device's floor (8% on a CPU, 1% on a GPU); judged: the op's calls in a step "
          "inside the shapes the judge passed, of all its calls")
    pinned = sorted({op for s in result.settings for op in s.pinned})
    if pinned:
        print(f"- {', '.join(pinned)} pinned at the baseline's outputs in every run of a setting (a router's near-ties "
              f"would otherwise flip experts and compare luck, not the kernel)")
    for note in result.notes:
        print(f"- {note}")
    if result.passed:
        print(f"PASS: no setting slower beyond noise, logits match; recorded in {result.gate_file}")
    else:
        print("FAIL: " + "; ".join(f"{r['code']}: {r['detail']}" for r in result.reasons))
        print(f"recorded in {result.gate_file}")
