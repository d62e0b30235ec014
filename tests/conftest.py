"""Test configuration shared by every test folder."""

pytest_plugins = [
    "tests.plugins.database",
    "tests.plugins.own_postgres",
    "tests.plugins.slurm_lab",
    "tests.plugins.slurmrestd",
    "tests.plugins.oidc_provider",
    "tests.plugins.parallel",
    "tests.plugins.fast_paths",
]
