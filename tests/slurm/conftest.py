"""Slurm tests use the real lab; the fixture lives in a plugin so other folders can use it too."""

from tests.plugins.slurm_lab import slurm_lab  # noqa: F401  (memoised: safe alongside pytest_plugins)
