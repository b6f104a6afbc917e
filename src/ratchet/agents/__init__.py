"""What outside agents and LLM proposers work from: the brief (``brief.py``), ``program.md`` for coding
agents, the MCP server, and ``api.py``, the one way an agent's file is judged into a run."""

# The brief's default bound in characters; here so that the CLI's --help can show it without importing torch.
DEFAULT_MAX_CHARS = 24000
