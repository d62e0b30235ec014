"""Fleet-wide trust: recovery budgets, restart storms, node reputation across jobs (and drains)."""
