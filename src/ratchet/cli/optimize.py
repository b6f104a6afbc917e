"""``ratchet optimize MODEL``: one campaign (profile, runs in Amdahl order, gate, stack), resumable
(see ``ratchet.e2e.campaign``)."""

from __future__ import annotations

import json
import os


def register(sub, parser_class) -> None:
    from ratchet.cli.common import MODEL_HELP, add_executor_flags, add_grid_options, add_ledger_option

    p = sub.add_parser("optimize", help="make a model faster: profile it, run the ops worth it, gate and stack the "
                       "kernels, all in one resumable campaign", description=(
                           "Profile MODEL, pick the ops worth a run in Amdahl order and share the budget by the gain "
                           "each can still give, run each (the task's seeds, or the plain-torch start of an "
                           "extracted op or module task), gate every kept kernel on MODEL (decode at the chosen contexts and "
                           "batches, CUDA graphs on a GPU, prefill, logits), stack the gated ones, and stop at the "
                           "target or the budget. Everything is in the ledger; a killed campaign resumes with "
                           "--resume CAMPAIGN where it stopped."))
    p.add_argument("model", metavar="MODEL", nargs="?", help=MODEL_HELP)
    p.add_argument("--target", metavar="SPEEDUP", help="stop proposing once the model's projected speed-up reaches "
                   "this, e.g. 1.5x")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--budget", type=int, metavar="N", help="attempts over the whole campaign (default 24)")
    budget.add_argument("--time", metavar="DURATION", help="time for the runs, e.g. 20m, 8h, shared like the budget")
    p.add_argument("--proposer", choices=["tune", "llm"], default="tune", help="what proposes each run's attempts")
    p.add_argument("--llm-model", metavar="NAME", help="with --proposer llm: the model the endpoint serves "
                   "(OPENAI_BASE_URL / OPENAI_API_KEY are honoured)")
    p.add_argument("--llm-base-url", metavar="URL", help="with --proposer llm: the endpoint")
    add_grid_options(p)
    p.add_argument("--ops", metavar="LIST", help="only these ops: task names (rmsnorm, decode_attention, ...), "
                   "extracted families (linear, grouped_mm, prefill_attention, bmm) or the classes of the model's "
                   "modules with no task (GemmaMLP, Qwen3MoeSparseMoeBlock; `ratchet profile MODEL` lists them)")
    p.add_argument("--seed", action="append", default=[], metavar="OP=FILE",
                   help="a candidate file of your own (an agent's kernel) for op OP (named as --ops names it), "
                        "judged first in its run, beside the op's seeds or plain-torch start; repeatable. Every "
                        "file given is judged: the op gets at least one attempt per file, past its share of "
                        "--budget if need be")
    p.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda if present, else cpu")
    p.add_argument("--size", choices=["full", "tiny"], help="built-in workloads' size (default: full on cuda, tiny "
                   "on cpu)")
    p.add_argument("--profile-batch", type=int, metavar="N", help="decode rows profiled (default: the largest of "
                   "--batches, else per size); the ops' tasks are made from the calls profiled")
    p.add_argument("--profile-context", type=int, metavar="N", help="context profiled (default: the largest of "
                   "--contexts, else per size); the prefill profiled is --prefill's longest (none: no prefill)")
    add_executor_flags(p)
    p.add_argument("--resume", metavar="CAMPAIGN", help="continue a stopped or killed campaign")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object on stdout at the end")
    p.add_argument("--no-ncu", action="store_true", help="do not profile kept attempts with Nsight Compute")
    add_ledger_option(p)
    p.set_defaults(func=cmd_optimize)


def cmd_optimize(args) -> int:
    from ratchet.cli.common import (UsageError, default_size, executor_choice, gates_dir, open_ledger, parse_duration,
                                    parse_ints, parse_prefill, parse_speedup, resolve_device)
    from ratchet.e2e.campaign import Campaign, CampaignError, CampaignRequest, resume_campaign, start_campaign
    from ratchet.report.terminal import make_console
    from ratchet.run.executor import ExecutorError

    if bool(args.resume) == bool(args.model):
        raise UsageError("give either MODEL or --resume CAMPAIGN")
    if args.resume and args.seed:
        raise UsageError("--seed is for a new campaign: a resumed one keeps the files it started with")
    if args.budget is not None and args.budget < 1:
        raise UsageError("--budget must be at least 1")
    if args.no_ncu:
        os.environ["RATCHET_NCU"] = "off"
    choice = executor_choice(args)
    console = make_console(stderr=args.json)
    with open_ledger(args.ledger) as ledger:
        try:
            if args.resume:
                resume_campaign(ledger, args.resume)
                cid = args.resume
            else:
                device = resolve_device(args.device)
                llm = None
                if args.proposer == "llm":
                    if not args.llm_model:
                        raise UsageError("--proposer llm needs --llm-model NAME")
                    llm = {"model": args.llm_model, "base_url": args.llm_base_url}
                profile = {k: v for k, v in (("batch", args.profile_batch), ("context", args.profile_context))
                           if v is not None}
                request = CampaignRequest(
                    model=args.model, device=device, size=args.size or default_size(device),
                    target=parse_speedup(args.target), budget=args.budget, seconds=parse_duration(args.time),
                    proposer=args.proposer, contexts=parse_ints(args.contexts, "--contexts"),
                    batches=parse_ints(args.batches, "--batches"), prefill=parse_prefill(args.prefill),
                    ops=tuple(o.strip() for o in args.ops.split(",") if o.strip()) if args.ops else None,
                    profile=profile, llm=llm, seeds=_user_seeds(args.seed), **({"executor": choice.kind, "address": choice.address}
                                                 if choice is not None else {}))
                cid = start_campaign(ledger, request)
                console.print(f"campaign {cid} started: {args.model} on {device}; resume with "
                              f"'ratchet optimize --resume {cid}'", highlight=False)
            # Given with --resume: the campaign's runs go on on that executor (another cluster, say).
            campaign = Campaign(ledger, cid, gates_dir(args.ledger), console, executor=choice if args.resume else None)
            summary = campaign.run()
        except (CampaignError, ExecutorError) as exc:
            raise UsageError(str(exc)) from None
        except KeyboardInterrupt:
            console.print(f"stopped; resume with: ratchet optimize --resume {cid}")
            return 130
    if args.json:
        print(json.dumps(summary, default=str))
    return 0


def _user_seeds(given: list[str]) -> tuple[tuple[str, str], ...]:
    """--seed OP=FILE values as (op, absolute path), each file checked to load as a candidate."""
    from ratchet.candidate import CandidateError, load_candidate
    from ratchet.cli.common import UsageError

    out = []
    for item in given:
        op, sep, path = item.partition("=")
        if not sep or not op.strip() or not path.strip():
            raise UsageError(f"--seed {item}: expected OP=FILE, e.g. Qwen3MoeSparseMoeBlock=moe.py")
        try:
            load_candidate(path.strip())
        except CandidateError as exc:
            raise UsageError(f"--seed {item}: {exc}") from None
        out.append((op.strip(), str(os.path.abspath(path.strip()))))
    return tuple(out)
