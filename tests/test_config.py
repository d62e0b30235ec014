"""Settings: one table, read from the environment, documented in README."""

import re
from pathlib import Path

import pytest

from app.infra.config import SETTINGS, Settings, SettingsError

README = Path(__file__).resolve().parent.parent / "README.md"


def test_defaults_give_embedded_sqlite(tmp_path: Path) -> None:
    settings = Settings.from_env({"RECOVERY_DATA_DIR": str(tmp_path)})
    assert settings.database_url == f"sqlite+aiosqlite:///{tmp_path}/recovery.db"
    assert settings.acknowledge_scheduler_actions is False
    assert settings.managed_partitions == ("*",)


def test_every_table_row_matches_a_dataclass_default() -> None:
    defaults = Settings()
    for setting in SETTINGS:
        if setting.attr in {"data_dir", "database_url"}:
            continue
        assert getattr(defaults, setting.attr) == setting.parse(setting.default), setting.attr


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
