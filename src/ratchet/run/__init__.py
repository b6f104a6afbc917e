"""The run: the loop (propose -> judge -> keep or discard -> ledger), starting and resuming a run, the keep
rule, recording a judged attempt into a run (the one path the loop, ``ratchet eval --run`` and the MCP
server share), the executors that run evaluations (this machine's GPUs or CPU, or a Ray cluster) and
the ledger itself (SQLite, the source of every report)."""
