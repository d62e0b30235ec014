"""Colours follow what a person must do: a stopped run is not a green success, observe-only never looks pending."""

from __future__ import annotations

from tests.factories import OBSERVED, STOPPED, seed_stories
from tests.views.html import parse


async def test_terminate_is_not_green_and_observe_only_is_not_waiting(operator, sessions) -> None:
    await seed_stories(sessions)
    stopped = parse((await operator.get(f"/dashboard/jobs/{STOPPED}/attempts/0")).text).by_id("advice")
    assert stopped.find("span", class_="disp-stopped").text == "CONVERGED"
    assert "resolved" in stopped.text and "expires" not in stopped.text
    observed = parse((await operator.get(f"/dashboard/jobs/{OBSERVED}/attempts/0")).text).by_id("advice")
    assert observed.find("span", class_="disp-observe")
    advice = parse((await operator.get("/dashboard/advice")).text)
    approve = [b for b in advice.find_all("button") if b.attrs.get("value") == "approve"]
    assert approve and all(b.attrs.get("class") == "secondary" for b in approve)  # observe-only: not the primary look
    assert not advice.find_all("span", class_="disp-pending")
