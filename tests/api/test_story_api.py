"""The story sentence through GraphQL (Attempt.story, Job.story, Workflow.story) and REST, and /v1/installation."""

from __future__ import annotations

from tests.api.helpers import run_graphql
from tests.factories import OBSERVED, RECOVERED, STOPPED, seed_stories

QUERY = """
query Story($jobId: Int!) {
  job(jobId: $jobId) {
    story { sentence outcome attemptIndex }
    attempts(first: 5) { nodes { attemptIndex story { outcome decided result nextAttemptIndex } } }
  }
  workflows(first: 10) { nodes { key story { outcome } } }
}
"""


async def test_graphql_and_rest_tell_the_same_story(client, sessions) -> None:
    await seed_stories(sessions)
    body = await run_graphql(client, QUERY, {"jobId": RECOVERED})
    job = body["data"]["job"]
    assert job["story"]["outcome"] == "recovered" and job["story"]["attemptIndex"] == 0
    first = job["attempts"]["nodes"][0]["story"]
    assert first["nextAttemptIndex"] == 1 and first["result"].startswith("attempt 1 started on gpu-b03")
    outcomes = {w["key"]: w["story"]["outcome"] for w in body["data"]["workflows"]["nodes"]}
    assert outcomes == {"wf-recovered": "recovered", "wf-stopped": "stopped", "wf-observed": "observe only"}
    rest = (await client.get(f"/v1/jobs/by-scheduler-id/{RECOVERED}")).json()["attempts"]
    assert rest[0]["story"]["sentence"] == job["story"]["sentence"]
    stopped = (await client.get(f"/v1/jobs/by-scheduler-id/{STOPPED}")).json()["attempts"][0]["story"]
    assert stopped["outcome"] == "stopped" and stopped["result"].startswith(
        "stopped: resubmit (sbatch the same script)"
    )
    observed = (await client.get("/v1/workflows", params={"outcome": "observe only"})).json()["workflows"]
    assert [w["workflowId"] for w in observed] == ["wf-observed"] and observed[0]["outcome"] == "observe only"
    assert (await client.get("/v1/workflows", params={"outcome": "sideways"})).status_code == 400
    assert OBSERVED
    by_outcome = await run_graphql(client, '{ workflows(filter: {outcome: "stopped"}) { nodes { key } } }')
    assert [w["key"] for w in by_outcome["data"]["workflows"]["nodes"]] == ["wf-stopped"]
    by_job = await run_graphql(client, f'{{ workflows(filter: {{search: "{OBSERVED}"}}) {{ nodes {{ key }} }} }}')
    assert [w["key"] for w in by_job["data"]["workflows"]["nodes"]] == ["wf-observed"]
    info = (await client.get("/v1/installation")).json()
    assert info["environment"] == "test-env" and info["managedPartitions"] == ["*"] and info["version"]
