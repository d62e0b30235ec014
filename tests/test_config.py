"""Settings: one table, read from the environment, documented in README."""

import ast
import re
from dataclasses import fields
from pathlib import Path

import pytest

from app.infra.config import OTHER_VARIABLES, SETTINGS, Settings, SettingsError

README = Path(__file__).resolve().parent.parent / "README.md"


def test_defaults_give_embedded_sqlite(tmp_path: Path) -> None:
    settings = Settings.from_env({"RECOVERY_DATA_DIR": str(tmp_path)})
    assert settings.database_url == f"sqlite+aiosqlite:///{tmp_path}/recovery.db"
    assert settings.acknowledge_scheduler_actions is False
    assert settings.managed_partitions == ("*",)


def test_every_default_shown_as_text_reads_back_as_the_typed_default() -> None:
    """The table is generated from the typed fields: each default's text (README) parses to the default itself."""
    assert [s.attr for s in SETTINGS] == [f.name for f in fields(Settings)]
    for setting in SETTINGS:
        assert setting.parse(setting.default_text) == setting.default, setting.attr
    assert Settings.from_env({}, data_dir="/d") == Settings.build(data_dir="/d")
    assert Settings.from_env({"RECOVERY_FAST_PATHS": "off"}).fast_paths is False
    assert Settings.from_env({"RECOVERY_FAST_PATHS": "on"}).fast_paths is True


def test_values_are_parsed_and_validated() -> None:
    s = Settings.from_env(
        {
            "RECOVERY_MANAGED_PARTITIONS": "gpu, canary",
            "RECOVERY_SITE_MAX_REQUEUE": "5",
            "RECOVERY_URL_PREFIX": "mission-control/api/",
            "RECOVERY_ACKNOWLEDGE_SCHEDULER_ACTIONS": "true",
        }
    )
    assert s.managed_partitions == ("gpu", "canary")
    assert s.site_max_requeue == 5
    assert s.url_prefix == "/mission-control/api"
    assert s.partition_managed("canary") and not s.partition_managed("debug")
    with pytest.raises(SettingsError, match="RECOVERY_SITE_MAX_REQUEUE"):
        Settings.from_env({"RECOVERY_SITE_MAX_REQUEUE": "many"})
    with pytest.raises(SettingsError, match="RECOVERY_WATCHDOG_MODE"):
        Settings.from_env({"RECOVERY_WATCHDOG_MODE": "sometimes"})


def test_acknowledgment_ceiling_also_read_from_slurm_advisor_name() -> None:
    assert Settings.from_env({"SLURM_ADVISOR_ACKNOWLEDGE_SCHEDULER_ACTIONS": "true"}).acknowledge_scheduler_actions
    both = {"RECOVERY_ACKNOWLEDGE_SCHEDULER_ACTIONS": "false", "SLURM_ADVISOR_ACKNOWLEDGE_SCHEDULER_ACTIONS": "true"}
    assert Settings.from_env(both).acknowledge_scheduler_actions is False


def test_settings_cannot_change_after_read() -> None:
    settings = Settings.from_env({})
    with pytest.raises(AttributeError):
        settings.cluster = "other"  # type: ignore[misc]


def test_readme_documents_every_setting() -> None:
    readme = README.read_text()
    missing = [s.env for s in SETTINGS if not re.search(rf"`{s.env}`", readme)]
    assert not missing, f"README.md does not document: {missing}"


def test_every_recovery_variable_the_code_names_is_a_setting_or_documented_as_not_one() -> None:
    """A RECOVERY_* name in app/, worker/ or views/ (a string or a keyword, e.g. an environment a lab is given) is in
    the settings table or in OTHER_VARIABLES (client, lab, tests), and every OTHER_VARIABLES entry is still used."""
    root = Path(__file__).resolve().parent.parent
    named: set[str] = set()
    for folder in ("app", "worker", "views"):
        for path in (root / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    named.update(re.findall(r"^RECOVERY_[A-Z0-9_]*[A-Z0-9]$", node.value))
                elif isinstance(node, ast.keyword) and node.arg:
                    named.update(re.findall(r"^RECOVERY_[A-Z0-9_]*[A-Z0-9]$", node.arg))
    settings = {s.env for s in SETTINGS}
    others = {name for name, _, _ in OTHER_VARIABLES}
    assert named - settings - others == set()
    assert not others & settings
    used_anywhere = named | set(re.findall(r"RECOVERY_[A-Z0-9_]+", (root / "tests" / "fault_worker.py").read_text()))
    assert others <= used_anywhere, others - used_anywhere
