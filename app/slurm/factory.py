"""The scheduler the settings ask for: Slurm's commands (RECOVERY_SLURM_API=cli) or slurmrestd (rest)."""

from __future__ import annotations

from app.infra.config import Settings, SettingsError
from app.slurm.adapter import Scheduler
from app.slurm.cli_scheduler import CliScheduler


def build_scheduler(settings: Settings) -> Scheduler:
    """CliScheduler or RestScheduler; SettingsError when `rest` lacks RECOVERY_SLURMRESTD_URL or has a bad one."""
    if settings.slurm_api != "rest":
        return CliScheduler(settings)
    from app.slurm.rest_scheduler import RestScheduler  # httpx is only needed for the REST adapter

    if not settings.slurmrestd_url:
        raise SettingsError("RECOVERY_SLURM_API=rest needs RECOVERY_SLURMRESTD_URL (http://host:6820 or unix:/path)")
    try:
        return RestScheduler(settings)
    except ValueError as exc:
        raise SettingsError(f"RECOVERY_SLURMRESTD_URL: {exc}") from None
