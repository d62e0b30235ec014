"""Makes the oidc_provider fixture available here even before tests/conftest.py registers the plugin."""

import pytest

PLUGIN = "tests.plugins.oidc_provider"


def pytest_configure(config: pytest.Config) -> None:
    # tests/conftest.py is meant to list PLUGIN in pytest_plugins; this only fills the gap until it does.
    if not config.pluginmanager.has_plugin(PLUGIN):
        config.pluginmanager.import_plugin(PLUGIN)
