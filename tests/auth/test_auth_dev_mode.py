"""Unauthenticated dev mode exists only on a loopback bind, and says so loudly."""

import logging

import pytest

from app.auth import DevModeRefused, DevVerifier, TokenVerifier, build_authenticator, check_dev_mode
from app.infra.config import Settings, SettingsError


@pytest.mark.parametrize(
    "bind", ["0.0.0.0:8000", "[::]:8000", "10.1.2.3:8000", "192.168.1.5:80", "example.org:8000", "myhost:8000"]
)
def test_dev_mode_refused_off_loopback(bind, caplog):
    with caplog.at_level(logging.WARNING, logger="recovery.auth"), pytest.raises(DevModeRefused) as refused:
        check_dev_mode(Settings.build(dev_no_auth=True, bind=bind))
    assert "not a loopback address" in str(refused.value)
    assert isinstance(refused.value, SettingsError)
    assert "AUTHENTICATION IS DISABLED" not in caplog.text
    with pytest.raises(DevModeRefused):
        build_authenticator(Settings.build(dev_no_auth=True, bind=bind))


@pytest.mark.parametrize("bind", ["127.0.0.1:8000", "127.9.8.7:1", "localhost:8000", "[::1]:8000"])
def test_dev_mode_allowed_on_loopback_with_warning(bind, caplog):
    with caplog.at_level(logging.WARNING, logger="recovery.auth"):
        assert check_dev_mode(Settings.build(dev_no_auth=True, bind=bind)) is True
    warnings = [
        r for r in caplog.records if r.levelno == logging.WARNING and "AUTHENTICATION IS DISABLED" in r.getMessage()
    ]
    assert len(warnings) == 1


def test_dev_mode_off_is_silent_and_uses_oidc(caplog):
    with caplog.at_level(logging.INFO, logger="recovery.auth"):
        assert check_dev_mode(Settings.build(bind="0.0.0.0:8000")) is False
    assert caplog.records == []
    authenticator = build_authenticator(Settings.build(oidc_issuer="https://idp.example.org/realms/hpc"))
    assert isinstance(authenticator, TokenVerifier)


def test_build_authenticator_in_dev_mode(caplog):
    with caplog.at_level(logging.WARNING, logger="recovery.auth"):
        assert isinstance(build_authenticator(Settings.build(dev_no_auth=True)), DevVerifier)
    assert caplog.text.count("AUTHENTICATION IS DISABLED") == 1
