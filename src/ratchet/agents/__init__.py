"""What outside agents and LLM proposers work from: the brief (``brief.py``), ``program.md`` for coding
agents, the MCP server, ``api.py``, the one way an agent's file is judged into a run, the judge's timing
facts as agents read them (``judge_facts.py``), and ``ratchet check``'s compile check without a GPU
(``compile_check.py``)."""

# The brief's default bound in characters; here so that the CLI's --help can show it without importing torch.
DEFAULT_MAX_CHARS = 24000
