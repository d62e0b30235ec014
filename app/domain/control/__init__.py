"""Carrying a decision out against Slurm: job states, attempt identity, the step planner, twins, watchdog."""
