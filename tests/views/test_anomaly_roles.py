"""Job Details' anomaly table marks the root cause, its consequences and lines printed after Recovery acted."""

from __future__ import annotations

from app.evidence.models import Anomaly
from tests.factories import seed_history
from tests.views.html import parse


async def test_the_anomaly_table_marks_roles_and_fingerprints(viewer, sessions) -> None:
    seeded = await seed_history(sessions)
    rows = [
        ("CRASH", "HOST_OOM", {"role": "root cause", "fingerprint": "fp-0123456789ab", "signature": "HOST_OOM: x"}),
        ("CRASH", "PYTHON_TRACEBACK", {"role": "consequence", "knownConsequence": True}),
        ("AFTER_RECOVERY_ACTED", "PYTHON_TRACEBACK", {"afterRecoveryActed": {"step": "requeue_hold"}}),
    ]
    async with sessions() as session, session.begin():
        for number, (kind, category, details) in enumerate(rows):
            session.add(
                Anomaly(
                    attempt_id=seeded.attempt_ids[0],
                    event_key=f"roles-{number}",
                    kind=kind,
                    category=category,
                    detector="signature",
                    line_number=100 + number,
                    details=details,
                )
            )
    page = parse((await viewer.get("/dashboard/jobs/4242/attempts/0")).text)
    roles = [div.text.strip() for div in page.find_all("div", class_="role")]
    assert {"root cause", "consequence", "after Recovery acted"} <= set(roles)
    assert [span.text.strip() for span in page.find_all("span", class_="fingerprint")] == ["fp-0123456789ab"]
