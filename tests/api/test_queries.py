"""GraphQL queries on SQLite and PostgreSQL: lookups, filters, connections, global ids and cursors."""

from __future__ import annotations

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.api.ids import to_global_id
from app.domain.control.identity import attempt_uuid
from app.jobs import service as jobs
from tests.api.helpers import operation, run_graphql
from tests.factories import CLUSTER, seed_job, seed_many


async def test_job_with_attempts_policy_and_workflow(
    client: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession]
) -> None:
    async with sessions() as session, session.begin():
        await seed_job(
            session, slurm_job_id=4242, workflow_key="training-example", attempts=3, checkpoints=2, advice=True
        )
    body = await run_graphql(client, operation("JobAttempts"), {"jobId": 4242})
    job = body["data"]["job"]
    assert job["jobId"] == 4242 and job["workflow"]["key"] == "training-example"
    assert job["effectiveMode"] == "observe" and "ceiling" in job["modeReason"]
    assert job["policy"]["maxRequeueTimes"] == 2 and job["policy"]["logBasedTimeoutThresholdPretraining"] == 960
    assert job["policy"]["warnings"][0]["path"] == "$.APS.extra"
    attempts = job["attempts"]
    assert attempts["totalCount"] == 3
    assert [e["node"]["attemptIndex"] for e in attempts["edges"]] == [0, 1, 2]
    first = attempts["edges"][0]["node"]
    assert first["attemptRef"] == "4242-0" and first["heimdallJobId"] == attempt_uuid(CLUSTER, 4242, 0)
    assert first["state"] == "FAILED" and first["exitCode"] == 1 and first["nodes"] == ["node0"]

    # Page the job's attempts one at a time through the cursors.
    seen, after = [], None
    while True:
        page = (await run_graphql(client, operation("JobAttempts"), {"jobId": 4242, "first": 1, "after": after}))[
            "data"
        ]["job"]["attempts"]
        seen += [e["node"]["attemptIndex"] for e in page["edges"]]
        if not page["pageInfo"]["hasNextPage"]:
            break
        after = page["pageInfo"]["endCursor"]
    assert seen == [0, 1, 2]
    assert (await run_graphql(client, operation("JobAttempts"), {"jobId": 999999}))["data"]["job"] is None


async def test_job_by_scheduler_job_id_and_array_grouping(
    client: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession]
) -> None:
    # array 151: tasks 1-2 got ids 152-153, the last task (3) kept the array's id 151; 160 is no array
    async with sessions() as session, session.begin():
        for job_id, task in ((152, 1), (153, 2), (151, 3)):
            await seed_job(session, slurm_job_id=job_id, workflow_key="arr", array=(151, task))
        await seed_job(session, slurm_job_id=160, workflow_key="plain")
    task2 = (await run_graphql(client, operation("ArrayTask"), {"schedulerJobId": "151_2"}))["data"]["job"]
    names = (task2["jobId"], task2["schedulerJobId"], task2["arrayJobId"], task2["arrayTaskId"])
    assert names == (153, "151_2", 151, 2)
    assert [(t["jobId"], t["schedulerJobId"]) for t in task2["arrayTasks"]] == [
        (152, "151_1"),
        (153, "151_2"),
        (151, "151_3"),
    ]
    # the bare array id is the record of its last task, and says so
    master = (await run_graphql(client, operation("ArrayTask"), {"schedulerJobId": "151"}))["data"]["job"]
    assert (master["jobId"], master["schedulerJobId"]) == (151, "151_3")
    by_int = await run_graphql(client, "{ job(jobId: 151) { schedulerJobId arrayTaskId } }")
    assert by_int["data"]["job"] == {"schedulerJobId": "151_3", "arrayTaskId": 3}
    plain = (await run_graphql(client, operation("ArrayTask"), {"schedulerJobId": " 160 "}))["data"]["job"]
    assert (plain["schedulerJobId"], plain["arrayJobId"], plain["arrayTasks"]) == ("160", None, [])
    assert (await run_graphql(client, operation("ArrayTask"), {"schedulerJobId": "151_7"}))["data"]["job"] is None
    bad = await run_graphql(client, operation("ArrayTask"), {"schedulerJobId": "151_x"}, expect_errors=True)
    assert "schedulerJobId must be" in bad["errors"][0]["message"]
    both = await run_graphql(client, '{ job(jobId: 1, schedulerJobId: "1") { jobId } }', expect_errors=True)
    assert "exactly one" in both["errors"][0]["message"]


async def test_attempt_by_ref_uuid_and_index(
    client: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession]
) -> None:
    async with sessions() as session, session.begin():
        await seed_job(
            session, slurm_job_id=777, workflow_key="wf", attempts=2, checkpoints=3, anomalies=1, advice=True
        )
    by_ref = (await run_graphql(client, operation("AttemptDetails"), {"ref": "777-0"}))["data"]["attempt"]
    by_uuid = (await run_graphql(client, operation("AttemptDetails"), {"ref": attempt_uuid(CLUSTER, 777, 0).upper()}))[
        "data"
    ]["attempt"]
    assert by_ref == by_uuid
    assert by_ref["attemptIndex"] == 0 and by_ref["requeueEligible"] is True and by_ref["effectiveMode"] == "observe"
    assert [e["node"]["iteration"] for e in by_ref["checkpoints"]["edges"]] == [300, 200, 100]  # newest first
    anomaly = by_ref["anomalies"]["edges"][0]["node"]
    assert (anomaly["category"], anomaly["outlook"]) == ("CUDA_ERROR", "infrastructure")
    assert anomaly["blamedNodes"] == [{"node": "node0", "provenance": "line", "detail": None}]
    advice = by_ref["advice"]
    assert advice["operation"] == "RESTART" and advice["exclusions"] == ["node0"]
    milestone = advice["reconciliation"]["milestones"][0]
    assert milestone["step"] == "requeue_hold" and milestone["status"] == "SHADOW" and milestone["durationMs"] == 1.5
    by_index = await run_graphql(
        client, "query($j:Int!,$i:Int!){attempt(jobId:$j, attemptIndex:$i){attemptRef}}", {"j": 777, "i": 1}
    )
    assert by_index["data"]["attempt"]["attemptRef"] == "777-1"
    bad = await run_graphql(client, operation("AttemptDetails"), {"ref": "not-a-ref"}, expect_errors=True)
    assert (
        bad["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
        and "attempt reference" in bad["errors"][0]["message"]
    )


async def test_workflows_filters_and_order(
    client: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession]
) -> None:
    async with sessions() as session, session.begin():
        await seed_job(session, slurm_job_id=1, workflow_key="alpha-run", name="llama", failed=True)
        await seed_job(session, slurm_job_id=2, workflow_key="beta-run", name="gpt", failed=False)
        await seed_job(session, slurm_job_id=3, workflow_key="gamma", name="alpha_50%", failed=False)

    async def keys(**flt: object) -> list[str]:
        body = await run_graphql(client, operation("WorkflowsPage"), {"filter": flt})
        return [e["node"]["key"] for e in body["data"]["workflows"]["edges"]]

    assert await keys() == ["gamma", "beta-run", "alpha-run"]  # most recently updated first
    assert await keys(failedOnly=True) == ["alpha-run"]
    assert await keys(search="ALPHA") == ["gamma", "alpha-run"]  # key or latest job name, case-insensitive
    assert await keys(search="50%") == ["gamma"]  # LIKE wildcards are literal
    assert await keys(state="RUNNING") == ["gamma", "beta-run"]
    assert await keys(cluster="elsewhere") == []


async def test_node_lookup_for_every_type(
    client: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession]
) -> None:
    async with sessions() as session, session.begin():
        job, attempts, advice = await seed_job(
            session, slurm_job_id=55, workflow_key="wf-node", checkpoints=1, anomalies=1, advice=True
        )
    body = await run_graphql(
        client,
        '{ attempt(ref: "55-0") { id job { id } workflow { id } advice { id } '
        "checkpoints { edges { node { id } } } anomalies { edges { node { id } } } "
        "auditEvents(first: 1) { edges { node { id } } } } }",
    )
    a = body["data"]["attempt"]
    ids = {
        "Attempt": a["id"],
        "Job": a["job"]["id"],
        "Workflow": a["workflow"]["id"],
        "Advice": a["advice"]["id"],
        "Checkpoint": a["checkpoints"]["edges"][0]["node"]["id"],
        "Anomaly": a["anomalies"]["edges"][0]["node"]["id"],
        "AuditEvent": a["auditEvents"]["edges"][0]["node"]["id"],
    }
    assert ids["Attempt"] == to_global_id("Attempt", attempts[0].id)
    for type_name, global_id in ids.items():
        node = (await run_graphql(client, operation("NodeById"), {"id": global_id}))["data"]["node"]
        assert node["__typename"] == type_name and node["id"] == global_id
    assert (await run_graphql(client, operation("NodeById"), {"id": to_global_id("Attempt", 10**9)}))["data"][
        "node"
    ] is None
    bad = await run_graphql(client, operation("NodeById"), {"id": "garbage!"}, expect_errors=True)
    assert bad["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"


async def test_advice_list_only_active_and_job_filter(
    client: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession]
) -> None:
    seeded = await seed_many(sessions, count=3, attempts=2, advice=True)
    async with sessions() as session, session.begin():
        first = await session.get(type(seeded.advice[0]), seeded.advice[0].id)
        assert first is not None
        first.active, first.disposition, first.disposition_reason = False, "CONVERGED", "DESIRED_STATE_OBSERVED"
    everything = (await run_graphql(client, operation("AdvicePage")))["data"]["advice"]["edges"]
    assert len(everything) == 6
    assert [e["node"]["id"] for e in everything] == [
        to_global_id("Advice", a.id) for a in reversed(seeded.advice)
    ]  # newest first
    active = (await run_graphql(client, operation("AdvicePage"), {"onlyActive": True}))["data"]["advice"]["edges"]
    assert len(active) == 5 and to_global_id("Advice", seeded.advice[0].id) not in {e["node"]["id"] for e in active}
    of_job = (await run_graphql(client, operation("AdvicePage"), {"jobId": 1001}))["data"]["advice"]["edges"]
    assert {(e["node"]["jobId"], e["node"]["attemptIndex"]) for e in of_job} == {(1001, 0), (1001, 1)}
    assert of_job[0]["node"]["heimdallJobId"] == attempt_uuid(CLUSTER, 1001, 1)


async def test_audit_events_filters_order_and_paging_both_ways(
    client: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession]
) -> None:
    async with sessions() as session, session.begin():
        await seed_job(session, slurm_job_id=10, workflow_key="a", attempts=2)
        await seed_job(session, slurm_job_id=11, workflow_key="b", attempts=1)

    async def events(**variables: object) -> dict:
        return (await run_graphql(client, operation("AuditEventsPage"), variables))["data"]["auditEvents"]

    of_job = await events(filter={"jobId": 10})
    assert of_job["edges"] and {e["node"]["jobId"] for e in of_job["edges"]} == {10}
    attempt0 = await events(filter={"jobId": 10, "attemptIndex": 0})
    assert attempt0["edges"] and {e["node"]["attemptIndex"] for e in attempt0["edges"]} == {0}
    typed = await events(filter={"eventType": "attempt.state_changed", "level": "WARNING"})
    assert len(typed["edges"]) == 3
    times = [e["node"]["producedAt"] for e in (await events(order="ASC"))["edges"]]
    assert times == sorted(times)

    # Forward with first/after and backward with last/before visit the same events.
    query = (
        "query($a:String,$b:String,$f:Int,$l:Int){auditEvents(filter:{jobId:10},first:$f,after:$a,last:$l,before:$b)"
        "{edges{node{id}} pageInfo{hasNextPage hasPreviousPage startCursor endCursor}}}"
    )
    forward, after = [], None
    while True:
        c = (await run_graphql(client, query, {"f": 2, "a": after}))["data"]["auditEvents"]
        forward += [e["node"]["id"] for e in c["edges"]]
        if not c["pageInfo"]["hasNextPage"]:
            break
        after = c["pageInfo"]["endCursor"]
    backward: list[str] = []
    before = None
    while True:
        c = (await run_graphql(client, query, {"l": 2, "b": before}))["data"]["auditEvents"]
        backward = [e["node"]["id"] for e in c["edges"]] + backward
        if not c["pageInfo"]["hasPreviousPage"]:
            break
        before = c["pageInfo"]["startCursor"]
    assert forward == backward == [e["node"]["id"] for e in of_job["edges"]]

    bad = await run_graphql(client, operation("AuditEventsPage"), {"filter": {"attemptIndex": 0}}, expect_errors=True)
    assert "needs a job id" in bad["errors"][0]["message"]
    wrong_list = await run_graphql(
        client, operation("WorkflowsPage"), {"after": forward and of_job["edges"][0]["cursor"]}, expect_errors=True
    )
    assert (
        wrong_list["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
        and "another list" in wrong_list["errors"][0]["message"]
    )


async def test_page_size_cap_is_named(client: httpx.AsyncClient) -> None:
    body = await run_graphql(client, operation("AuditEventsPage"), {"first": 101}, expect_errors=True)
    assert "capped at 100" in body["errors"][0]["message"]
    body = await run_graphql(client, operation("WorkflowsPage"), {"first": 251}, expect_errors=True)
    assert "capped at 250" in body["errors"][0]["message"]


async def test_failed_attempt_stays_attached_after_requeue(
    client: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession]
) -> None:
    async with sessions() as session, session.begin():
        job, attempts, _ = await seed_job(session, slurm_job_id=31, workflow_key="wf", attempts=1, checkpoints=1)
        await jobs.create_attempt(session, job=job, attempt_index=1, state="RUNNING")
    body = await run_graphql(
        client,
        "{ job(jobId: 31) { attempts { totalCount edges { node { attemptIndex state checkpoints { "
        "edges { node { iteration } } } } } } } }",
    )
    nodes = [e["node"] for e in body["data"]["job"]["attempts"]["edges"]]
    assert [(n["attemptIndex"], n["state"]) for n in nodes] == [(0, "FAILED"), (1, "RUNNING")]
    assert nodes[0]["checkpoints"]["edges"] and not nodes[1]["checkpoints"]["edges"]
