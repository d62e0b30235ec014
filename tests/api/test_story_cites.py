"""GraphQL and REST cite the anomaly the Advice was decided on, and show each anomaly's role and fingerprint."""

from __future__ import annotations

from sqlalchemy import select, update

from app.advice.models import Advice
from app.api.ids import to_global_id
from app.evidence.models import Anomaly
from app.jobs.models import Attempt
from tests.api.helpers import run_graphql
from tests.factories import RECOVERED, seed_stories

QUERY = """
query Cites($jobId: Int!) {
  job(jobId: $jobId) {
    attempts(first: 1) {
      nodes {
        story { happened anomalyId fingerprint }
        anomalies(first: 10) { nodes { id kind role fingerprint fingerprintText } }
      }
    }
  }
}
"""


async def test_the_story_cites_the_decided_anomaly_not_the_newest(client, sessions) -> None:
    await seed_stories(sessions)
    async with sessions() as session, session.begin():
        attempt = await session.scalar(
            select(Attempt).where(Attempt.slurm_job_id == RECOVERED, Attempt.attempt_index == 0)
        )
        assert attempt is not None
        decided = await session.scalar(select(Anomaly.id).where(Anomaly.attempt_id == attempt.id))
        await session.execute(
            update(Anomaly)
            .where(Anomaly.id == decided)
            .values(details={"role": "root cause", "fingerprint": "fp-0123456789ab", "signature": "XID: Xid 79"})
        )
        newer = Anomaly(
            attempt_id=attempt.id,
            event_key="cites-newer",
            kind="CRASH",
            category="PYTHON_TRACEBACK",
            detector="signature",
            node="gpu-b01",
            line_number=900,
            line="srun: error: gpu-b01: task 0: Terminated",
            details={"role": "consequence", "knownConsequence": True},
        )
        kept = Anomaly(
            attempt_id=attempt.id,
            event_key="cites-after",
            kind="AFTER_RECOVERY_ACTED",
            category="PYTHON_TRACEBACK",
            detector="signature",
            line_number=901,
            details={"afterRecoveryActed": {"step": "requeue_hold"}},
        )
        session.add_all([newer, kept])
        await session.flush()
        await session.execute(update(Advice).where(Advice.attempt_id == attempt.id).values(anomaly_id=decided))
    body = await run_graphql(client, QUERY, {"jobId": RECOVERED})
    [node] = body["data"]["job"]["attempts"]["nodes"]
    story = node["story"]
    assert story["anomalyId"] == to_global_id("Anomaly", decided) and story["fingerprint"] == "fp-0123456789ab"
    assert story["happened"].startswith("Attempt 0 crashed (Xid 79) on gpu-b02 at line 812"), story
    roles = {a["kind"]: (a["role"], a["fingerprint"]) for a in node["anomalies"]["nodes"]}
    assert roles["AFTER_RECOVERY_ACTED"] == ("after Recovery acted", None)
    assert sorted(a["role"] for a in node["anomalies"]["nodes"] if a["kind"] == "CRASH") == [
        "consequence",
        "root cause",
    ]
    rest = (await client.get(f"/v1/jobs/by-scheduler-id/{RECOVERED}")).json()["attempts"][0]["story"]
    assert rest["cites"]["lineNumber"] == 812 and rest["cites"]["fingerprint"] == "fp-0123456789ab"
    assert rest["cites"]["role"] == "root cause" and rest["sentence"].startswith(story["happened"])
