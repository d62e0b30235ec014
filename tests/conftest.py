"""Test configuration shared by every test folder."""

pytest_plugins = ["tests.plugins.database"]
