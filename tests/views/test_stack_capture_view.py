"""Job Details shows the stacks captured before Recovery acted: merged, the outlier rank highlighted."""

from __future__ import annotations

from app.domain.detection.stacks import Frame, RankStack
from app.evidence import queries as evidence_queries
from app.evidence import service as evidence_service
from app.jobs import queries as job_queries
from tests.factories import seed_history
from tests.views.html import parse

WAITING = (
    Frame("_engine_run_backward", "/venv/site-packages/torch/autograd/graph.py", 825),
    Frame("main", "/work/ddp_train.py", 150),
)
READING = (Frame("read_shard_from", "/work/ddp_train.py", 102), Frame("main", "/work/ddp_train.py", 141))


async def test_merged_stacks_name_the_outlier_and_its_node(viewer, sessions) -> None:
    seeded = await seed_history(sessions)
    ranks = [
        RankStack(rank=0, node="gpu-a", pid=11, state="S", wchan="do_sys_poll", frames=WAITING),
        RankStack(rank=1, node="gpu-b", pid=12, state="S", wchan="wait_for_partner", frames=READING),
        RankStack(rank=2, node="gpu-c", pid=13, state="S", wchan="do_sys_poll", frames=WAITING),
    ]
    async with sessions() as session, session.begin():
        attempt = await job_queries.get_attempt(session, attempt_id=seeded.attempt_ids[0])
        assert attempt is not None
        row = await evidence_service.record_stack_capture(
            session,
            attempt=attempt,
            advice_id=None,
            mode="observe",
            trigger_anomaly_id=None,
            taken=evidence_service.TakenStacks(
                status="CAPTURED",
                command="srun --jobid=4242 --overlap --nodes=3 --ntasks-per-node=1 python3 -c <stack probe>",
                duration_ms=812.0,
                bytes=4096,
                nodes_asked=("gpu-a", "gpu-b", "gpu-c"),
                nodes_answered=("gpu-a", "gpu-b", "gpu-c"),
                ranks=ranks,
                reports=[],
                problems=[],
            ),
        )
        assert row.anomaly_id is not None
    async with sessions() as session:
        stack = await evidence_queries.get_anomaly(session, anomaly_id=row.anomaly_id)
    assert stack is not None and (stack.kind, stack.node, stack.outlook) == ("STACK", "gpu-b", "infrastructure")
    assert stack.blamed_nodes and stack.blamed_nodes[0]["provenance"] == "stack"

    page = parse((await viewer.get("/dashboard/jobs/4242/attempts/0")).text)
    section = page.by_id("stacks")
    assert section.attrs["data-status"] == "CAPTURED"
    judgment = section.find("p", class_="stack-judgment").text
    assert "rank 1 on gpu-b held the others back: read_shard_from in ddp_train.py:102" in judgment
    assert "ranks 0, 2 waited in a collective" in judgment
    rows = section.find("table", class_="merged-stacks").find("tbody").find_all("tr")
    assert [r.attrs["class"] for r in rows] == ["peers", "outlier"]
    assert "rank 0, rank 2" in rows[0].find("td").text and "rank 1" in rows[1].find("td").text
