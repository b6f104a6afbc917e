"""Proposers: what produces the next candidate or config. Each is a small plugin behind the
``Proposer`` protocol in base.py; they see verdicts and the ledger, never the judge's internals."""
