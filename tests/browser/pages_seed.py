"""Seed data and page measures shared by the dashboard's browser tests."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from app.evidence.models import Anomaly
from app.jobs import service as jobs
from tests.factories import T0, dashboard_registration, seed_history

OVERFLOW = "document.documentElement.scrollWidth - document.documentElement.clientWidth"


async def seed_pages(sessions: Any, log: Path) -> Any:
    """A history with a hang on a long log and 30 refused jobs, for the pages' layout."""
    seeded = await seed_history(sessions)
    log.write_text("".join(f"iteration {n} loss 2.{n % 10}\n" for n in range(1, 400)))
    async with sessions() as session, session.begin():
        session.add(
            Anomaly(
                attempt_id=seeded.attempt_ids[0],
                event_key="browser-hang",
                kind="NO_PROGRESS",
                category="NO_OUTPUT_TRAININGLOOP",
                detector="noprogress",
                message="no output in train.out for 600 s",
                log_path=str(log),
                line_number=200,
                line="iteration 200 loss 2.0",
                source_time=T0 + dt.timedelta(minutes=20),
                detected_at=T0 + dt.timedelta(minutes=30),
                details={"lastOutputAt": (T0 + dt.timedelta(minutes=20)).isoformat()},
            )
        )
        for n in range(30):
            await jobs.register_job(
                session,
                registration=dashboard_registration(
                    9000 + n, enrolment="UNMANAGED_PARTITION", enrolment_reason="partition debug is not managed"
                ),
            )
    return seeded
