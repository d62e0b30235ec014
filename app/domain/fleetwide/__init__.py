"""Across jobs: recovery budgets, node reputation, goodput, notification targets."""
