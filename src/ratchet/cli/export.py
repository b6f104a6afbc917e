"""``ratchet export CAMPAIGN|RUN -o DIR``: the gated kernels as an installable package (see
``ratchet.e2e.export``)."""

from __future__ import annotations


def register(sub, parser_class) -> None:
    from ratchet.cli.common import add_ledger_option

    p = sub.add_parser("export", help="write the gated kernels of a campaign or run as an installable package",
                       description="Write DIR/pyproject.toml and a package holding every kernel of CAMPAIGN (or RUN) "
                       "that passed its gate: each a torch custom op dispatched by shape (the kernel inside the "
                       "shape ranges the judge passed, the original op outside), apply(model) for transformers "
                       "models, a Hugging Face kernels layer layout, a manifest and a test that re-checks every "
                       "kernel where the package is installed. 'pip install DIR' installs it.")
    p.add_argument("ident", metavar="CAMPAIGN|RUN", help="a campaign id (ratchet optimize) or a run id")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="where to write the package")
    add_ledger_option(p)
    p.set_defaults(func=cmd_export)


def cmd_export(args) -> int:
    from ratchet.cli.common import UsageError, gates_dir, open_ledger
    from ratchet.e2e.export import ExportError, export

    with open_ledger(args.ledger, create=False) as ledger:
        try:
            out = export(ledger, args.ident, args.output, gates_dir(args.ledger))
        except ExportError as exc:
            raise UsageError(str(exc)) from None
        except OSError as exc:
            raise UsageError(f"cannot write under {args.output}: {exc.strerror or exc}") from None
    print(f"wrote {out}/pyproject.toml; install with 'pip install {out}', check with "
          f"'python -m pytest --pyargs {next(out.glob('ratchet_export_*')).name}.test_installed'")
    return 0
