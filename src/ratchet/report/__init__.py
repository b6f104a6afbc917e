"""What people look at: the console views of verdicts and runs, and the live progress of a run."""
