"""``ratchet run TASK``: the loop (propose, judge, keep), started or resumed."""

from __future__ import annotations

import os

from ratchet.cli.common import (UsageError, add_executor_flags, add_ledger_option, executor_choice, open_ledger,
                                parse_duration, parse_gpus, parse_speedup, resolve_device)


def register(sub, parser_class) -> None:
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
    add_llm_flags(rn)
    rn.add_argument("--sampler", choices=["tpe", "random", "grid"], default="tpe", help="the tuner's search strategy")
    rn.add_argument("--target", metavar="SPEEDUP", help="stop when the best reaches this speedup, e.g. 3x")
    budget = rn.add_mutually_exclusive_group()
    budget.add_argument("--budget", type=int, metavar="N", help="stop after N attempts")
    budget.add_argument("--time", metavar="DURATION",
                        help="stop proposing after this long, e.g. 90s, 20m, 2h; evaluations already in flight (up to 3 "
                             "per GPU) still finish and are recorded")
    rn.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda if present, else cpu")
    rn.add_argument("--gpus", metavar="LIST", help="GPU indices to judge on in parallel, e.g. 0,1 (default: 0)")
    add_executor_flags(rn)
    rn.add_argument("--no-ncu", action="store_true", help="do not profile kept attempts with Nsight Compute "
                    "(by default each new best on a GPU is profiled once where ncu works, to explain its "
                    "bottleneck class; same as RATCHET_NCU=off)")
    rn.add_argument("--resume", metavar="RUN", help="continue a stopped or killed run")
    add_ledger_option(rn)
    rn.set_defaults(func=cmd_run)



def add_llm_flags(parser) -> None:
    """The --llm-* flags of ``ratchet run --proposer llm`` (shared with scripts that drive runs the same way)."""
    llm = parser.add_argument_group("--proposer llm", "key from OPENAI_API_KEY or ANTHROPIC_API_KEY; the openai "
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


def cmd_run(args) -> int:
    from ratchet.run.executor import ExecutorError
    from ratchet.run.run_command import RunRequest, start_or_resume
    from ratchet.search.llm_client import LLMSetupError

    if args.resume and args.task:
        raise UsageError("give either TASK or --resume RUN, not both")
    if not args.resume and not args.task:
        raise UsageError("run needs a TASK (or --resume RUN)")
    choice = executor_choice(args)
    # On a cluster the GPUs are the cluster's: the driver's machine need not have one.
    device = args.device if choice is not None and choice.kind == "ray" and args.device else resolve_device(args.device)
    if args.no_ncu:  # read by ratchet.diagnose.ncu.find_ncu in the loop: no profile in this process
        os.environ["RATCHET_NCU"] = "off"
    request = RunRequest(task=args.task, seeds=tuple(args.seed), proposer=args.proposer, sampler=args.sampler,
                         target=parse_speedup(args.target), budget=args.budget, seconds=parse_duration(args.time),
                         device=device, gpus=tuple(parse_gpus(args.gpus, device) or ()), resume=args.resume,
                         llm=llm_settings(args), executor=choice)
    with open_ledger(args.ledger) as ledger:
        try:
            return start_or_resume(ledger, request)
        except (LLMSetupError, ExecutorError) as exc:
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

