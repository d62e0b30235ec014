"""Lab tests use the same session-wide lab as the Slurm tests."""

from tests.plugins.slurm_lab import slurm_lab  # noqa: F401  (memoised: safe alongside pytest_plugins)
