"""The run: the loop (propose -> judge -> keep or discard -> ledger), starting and resuming a run, the keep
rule, recording a judged attempt into a run (the one path the loop, ``ratchet eval --run`` and the MCP
server share) and the ledger itself (SQLite, the source of every report)."""
