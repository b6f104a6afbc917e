"""``ratchet check TASK CANDIDATE --arch sm_90``: compile the candidate's kernels for a GPU's architecture
on a machine without that GPU (``ratchet.agents.compile_check``); never judged, never recorded."""

from __future__ import annotations

import json


def register(sub, parser_class) -> None:
    ck = sub.add_parser("check", help="compile a candidate's Triton kernels (and CUDA C++) for a GPU architecture, "
                        "no GPU needed", description=(
                            "Call the candidate's kernel(...) on the task's CPU shapes (--shapes gpu: its GPU "
                            "shapes, so branches taken only at GPU sizes compile too) with every Triton launch "
                            "replaced by a compile for --arch (Triton to PTX, then ptxas, with the launch's own "
                            "types and constexprs; every config of an autotuned kernel) and CUDA C++ given to "
                            "ratchet.cuda_build.load_cached or load_inline compiled with nvcc where it is "
                            "installed. Catches code that Triton's interpreter accepts and its compiler refuses. "
                            "Says nothing about correctness or speed. Exit 0 all compiled, 1 a kernel did not, "
                            "2 the check could not run."))
    ck.add_argument("task", metavar="TASK", help="built-in task name or task file")
    ck.add_argument("candidate", metavar="CANDIDATE", help="candidate file defining kernel(...)")
    ck.add_argument("--arch", default="sm_90", metavar="SM", help="target architecture (default: sm_90, the H100 "
                    "and H200)")
    ck.add_argument("--config", metavar="JSON", help="one point of the candidate's SPACE (default: its first values)")
    ck.add_argument("--shapes", choices=["cpu", "gpu"], default="cpu",
                    help="the task's shape set to launch on (default: cpu). gpu: the public GPU shapes, then "
                    "the held-out ranges' lowest and highest corners (a corner over 2 GiB of inputs is "
                    "skipped, with a note), their inputs made in host memory (large shapes take host memory "
                    "and seconds each; launches never run). The kernel sees CPU tensors either way: a branch "
                    "taken only when x.is_cuda is never compiled")
    ck.add_argument("--shape", action="append", default=[], metavar="JSON",
                    help="launch this shape of the --shapes set instead of the whole set, e.g. '{\"B\": 1, \"S\": 1}' "
                    "to compile only the path one size takes while tuning it (repeatable; dims left out take the "
                    "set's first public shape's)")
    ck.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    ck.set_defaults(func=cmd_check)


def cmd_check(args) -> int:
    import sys

    from ratchet.agents.compile_check import CheckError, check_candidate, parse_arch
    from ratchet.candidate import load_candidate, parse_config
    from ratchet.cli.common import UsageError
    from ratchet.cli.eval import chosen_shapes
    from ratchet.task import load_task

    try:
        parse_arch(args.arch)
    except CheckError as exc:
        raise UsageError(str(exc)) from None
    task = load_task(args.task)  # a bad task or candidate is one line before any subprocess starts
    candidate = load_candidate(args.candidate)
    config = candidate.resolve_config(parse_config(args.config))
    chosen = chosen_shapes(args.shape, task, "cuda" if args.shapes == "gpu" else "cpu", no_timing=True)
    report = check_candidate(task.source_path or args.task, candidate.path, args.arch, config, shapes=args.shapes,
                             chosen=chosen)
    if args.json:
        print(json.dumps(report.to_json()))
    else:
        for k in report.kernels:
            status = "ok" if k.ok else "FAILED"
            shared = f", {k.shared_bytes} B shared" if k.shared_bytes else ""
            usage = (f", {k.registers} registers, {k.spill_bytes} B spilled, {k.blocks_per_sm} block(s)/SM"
                     if k.registers is not None else "")
            print(f"{status:6} {k.kernel}{k.signature}{shared}{usage}" + (f": {k.message}" if k.message else ""))
        for note in report.notes:
            print(f"note: {note}")
        if report.ok and report.kernels:
            print(f"{len(report.kernels)} kernel compile(s) for {report.arch}: all compiled")
    if report.error:
        print(f"ratchet: error: {report.error}", file=sys.stderr)
        return 2
    failed = [k for k in report.kernels if not k.ok]
    if failed:
        first = failed[0]
        print(f"ratchet: {first.kernel} does not compile for {report.arch}: {first.message}", file=sys.stderr)
        return 1
    return 0
