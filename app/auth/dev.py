"""Development mode without authentication: allowed only on a loopback bind, and loud about it."""

from __future__ import annotations

import ipaddress
import logging

from app.auth.principal import DEV_PRINCIPAL, Principal
from app.infra.config import Settings, SettingsError

log = logging.getLogger("recovery.auth")


class DevModeRefused(SettingsError):
    """RECOVERY_DEV_NO_AUTH is on while the service would listen beyond loopback."""


def is_loopback_host(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 (with or without brackets) and `localhost`; never for 0.0.0.0 or ::."""
    host = host.strip().strip("[]").lower()
    if host in {"localhost", "localhost."}:
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False  # any other host name may resolve anywhere


def check_dev_mode(settings: Settings) -> bool:
    """True when unauthenticated dev mode is on (and warn loudly); DevModeRefused unless bound to loopback."""
    if not settings.dev_no_auth:
        return False
    host = settings.bind_host
    if not is_loopback_host(host):
        raise DevModeRefused(
            f"RECOVERY_DEV_NO_AUTH=true is refused: RECOVERY_BIND={settings.bind!r} listens on {host!r}, "
            "which is not a loopback address. Unauthenticated access is only allowed on 127.0.0.0/8, ::1 "
            "or localhost; bind there, or configure OIDC (RECOVERY_OIDC_ISSUER) and turn dev mode off."
        )
    log.warning(
        "AUTHENTICATION IS DISABLED (RECOVERY_DEV_NO_AUTH=true): every request on %s acts as user 'dev' "
        "with viewer and operator rights. Development only; never expose this port.",
        settings.bind,
    )
    return True


class DevVerifier:
    """Stands in for TokenVerifier in dev mode: every caller is the dev principal, no token needed."""

    requires_token = False

    def __init__(self, settings: Settings) -> None:
        if not check_dev_mode(settings):
            raise SettingsError("DevVerifier needs RECOVERY_DEV_NO_AUTH=true")
        self.principal = DEV_PRINCIPAL

    async def verify(self, token: str) -> Principal:
        return self.principal

    async def aclose(self) -> None:
        return None
