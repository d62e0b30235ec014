"""Several clusters in one installation: each cluster's own settings from RECOVERY_CLUSTERS_FILE (TOML).

    [clusters.alpha]                 # the cluster's name (stored on its jobs; its lease is worker:alpha)
    environment = "prod"
    slurm_conf = "/etc/slurm-alpha/slurm.conf"

    [clusters.beta]
    slurm_api = "rest"
    slurmrestd_url = "http://beta-ctl:6820"
    slurmrestd_jwt_key = "/etc/recovery/beta-jwt.key"

Keys are the settings' names without the RECOVERY_ prefix, in lower case; anything not named takes
the installation's value (its environment variables). Installation-wide settings (database, HTTP,
authentication) cannot differ per cluster.
"""

from __future__ import annotations

import dataclasses
import tomllib
from typing import Any

from app.infra.config import SETTINGS, Settings, SettingsError

# One database, one HTTP server and one sign-in per installation.
INSTALLATION_WIDE = frozenset(
    {
        "data_dir",
        "database_url",
        "bind",
        "url_prefix",
        "dev_no_auth",
        "audit_views_enabled",
        "session_secret",
        "session_secret_file",
        "clusters_file",
        "cluster",
    }
)
_BY_ATTR = {setting.attr: setting for setting in SETTINGS}


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(item) for item in value)
    return str(value)


def load_clusters(path: str) -> dict[str, dict[str, Any]]:
    """The [clusters.NAME] tables of the file, each as {setting: parsed value}; SettingsError when unusable."""
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except OSError as exc:
        raise SettingsError(f"RECOVERY_CLUSTERS_FILE: cannot read {path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"RECOVERY_CLUSTERS_FILE: {path} is not TOML: {exc}") from None
    tables = data.get("clusters")
    if not isinstance(tables, dict) or not tables:
        raise SettingsError(f"RECOVERY_CLUSTERS_FILE: {path} has no [clusters.NAME] table")
    clusters: dict[str, dict[str, Any]] = {}
    for name, table in tables.items():
        if not isinstance(table, dict):
            raise SettingsError(f"RECOVERY_CLUSTERS_FILE: clusters.{name} must be a table")
        values: dict[str, Any] = {}
        for key, raw in table.items():
            attr = key.lower().removeprefix("recovery_")
            if attr in INSTALLATION_WIDE:
                raise SettingsError(f"RECOVERY_CLUSTERS_FILE: clusters.{name}.{key} is installation-wide")
            setting = _BY_ATTR.get(attr)
            if setting is None or attr.startswith("oidc_"):
                raise SettingsError(f"RECOVERY_CLUSTERS_FILE: clusters.{name}.{key} is not a per-cluster setting")
            try:
                values[attr] = setting.parse(_text(raw))
            except SettingsError as exc:
                raise SettingsError(f"RECOVERY_CLUSTERS_FILE: clusters.{name}.{key}: {exc}") from None
        clusters[str(name)] = values
    return clusters


def cluster_settings(settings: Settings, name: str) -> Settings:
    """The settings of one cluster: the installation's, with the cluster's table (if a clusters file is set)."""
    if not settings.clusters_file:
        return dataclasses.replace(settings, cluster=name)
    clusters = load_clusters(settings.clusters_file)
    if name not in clusters:
        raise SettingsError(
            f"cluster {name!r} is not in RECOVERY_CLUSTERS_FILE {settings.clusters_file} "
            f"(it has {', '.join(sorted(clusters))})"
        )
    return dataclasses.replace(settings, cluster=name, **clusters[name])


def every_cluster(settings: Settings) -> list[Settings]:
    """One Settings per cluster of the clusters file, or just the installation's single cluster."""
    if not settings.clusters_file:
        return [settings]
    return [cluster_settings(settings, name) for name in load_clusters(settings.clusters_file)]
