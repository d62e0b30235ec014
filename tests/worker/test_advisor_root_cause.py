"""The advisor on both databases with crash lines recorded by the real evidence writer: outlook, blame, root cause."""

import datetime as dt
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import select

from app.domain.detection import line_nodes
from app.domain.detection.rules_builtin import default_ruleset
from app.domain.detection.signatures import Classifier
from app.evidence import findings as diagnosis
from app.evidence import queries
from app.evidence import service as evidence
from app.evidence.models import Anomaly
from app.infra.context import AppContext
from tests.advice.helpers import SlurmLikeFake, submit
from tests.factories import advice_of, attempt
from worker.advisor import Advisor
from worker.observer import Observer

C = Classifier(default_ruleset())
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture
def fake() -> SlurmLikeFake:
    return SlurmLikeFake()


@pytest.fixture
def observer(ctx: AppContext, fake: SlurmLikeFake) -> Observer:
    return Observer(ctx, fake)


async def crash_line(ctx: AppContext, job_id: int, line: str, *, index: int = 0, number: int = 1) -> None:
    """Record a line as the collector does (the classifier decides what it means)."""
    signal = C.crash(line)
    assert signal is not None, line
    target = await attempt(ctx, job_id, index)
    async with ctx.sessions() as session, session.begin():
        row = await session.get(type(target), target.id)
        assert row is not None
        await evidence.record_crash(
            session,
            attempt=row,
            event=evidence.LineEvent(
                event_key=uuid.uuid4().hex,
                log_path="/logs/out.log",
                line_number=number,
                line=line,
                source_time=None,
                read_at=dt.datetime.now(dt.UTC),
                signal=signal,
            ),
        )


async def test_an_application_error_on_a_named_node_blames_nobody(ctx, fake, observer) -> None:
    await submit(observer, fake, 31, node="node7")
    # https://github.com/chrisknewman/tusas/issues/149: srun names the node, but an OOM is the program's
    await crash_line(ctx, 31, "srun: error: node7: tasks 1-3: Out Of Memory")
    await Advisor(ctx).tick()
    [advice] = await advice_of(ctx, 31)
    assert advice.operation == "RESTART" and advice.exclusions == []
    assert "HOST_OOM, outlook application" in advice.reason


async def test_a_hostless_xid_blames_the_single_node_through_the_allocation(ctx, fake, observer) -> None:
    await submit(observer, fake, 32, node="node4")
    await crash_line(ctx, 32, "NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus")
    await Advisor(ctx).tick()
    [advice] = await advice_of(ctx, 32)
    assert advice.exclusions == ["node4"] and "XID, outlook infrastructure" in advice.reason
    async with ctx.sessions() as session:
        row = await session.scalar(select(Anomaly).where(Anomaly.category == "XID"))
    assert row is not None and row.outlook == "infrastructure"
    assert row.blamed_nodes == [
        {"node": "node4", "provenance": "allocation", "detail": "the attempt ran on this node only"}
    ]


async def test_the_reason_names_the_root_cause_not_the_last_line(ctx, fake, observer) -> None:
    await submit(observer, fake, 33, node="node5")
    # https://github.com/vllm-project/vllm/issues/5222 then the launcher's summary
    await crash_line(ctx, 33, "RuntimeError: CUDA error: uncorrectable ECC error encountered", number=1)
    await crash_line(ctx, 33, "  exitcode  : 1 (pid: 429)", number=2)
    advisor = Advisor(ctx)
    await advisor.tick()
    [advice] = await advice_of(ctx, 33)
    assert advice.reason.startswith("attempt 0 crashed (XID, outlook infrastructure)")
    assert advice.exclusions == ["node5"]


async def test_a_hostless_xid_read_before_the_node_list_waits_for_it(ctx, fake, observer) -> None:
    await submit(observer, fake, 34, node="node6")
    target = await attempt(ctx, 34)
    async with ctx.sessions() as session, session.begin():
        (await session.get(type(target), target.id)).nodes = []  # as if the observer had not seen it run yet
    await crash_line(ctx, 34, "NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus")
    advisor = Advisor(ctx)
    await advisor.tick()
    assert await advice_of(ctx, 34) == []  # no Advice that would restart it on the broken node
    async with ctx.sessions() as session, session.begin():
        (await session.get(type(target), target.id)).nodes = ["node6"]
    await advisor.tick()
    [advice] = await advice_of(ctx, 34)
    assert advice.exclusions == ["node6"]
    async with ctx.sessions() as session:
        row = await session.scalar(select(Anomaly).where(Anomaly.attempt_id == target.id))
    assert row is not None and row.blamed_nodes == [
        {"node": "node6", "provenance": "allocation", "detail": "the attempt ran on this node only"}
    ]


async def test_the_failed_process_s_node_is_found_once_the_node_list_arrives(ctx, fake, observer) -> None:
    """torchrun's block names the lab's shared hostname; the program's start-up line naming the killed PID says
    node2. Read before Slurm reported the node list, that line is kept with the anomaly and matched later."""
    text = (FIXTURES / "torchrun" / "ddp-kill-recovered.log").read_text(encoding="utf-8").splitlines()
    index = next(i for i, line in enumerate(text) if "exitcode  : -9" in line)
    startup = line_nodes.lines_naming_pid(text[:index], line_nodes.process_id(text[index]) or "")
    assert startup and startup[0].startswith("rank 0/2 on node2")
    await submit(observer, fake, 35, node="node1")
    target = await attempt(ctx, 35)
    async with ctx.sessions() as session, session.begin():
        (await session.get(type(target), target.id)).nodes = []  # not seen running yet
    signal = C.crash(text[index])
    assert signal is not None
    async with ctx.sessions() as session, session.begin():
        row = await session.get(type(target), target.id)
        await evidence.record_crash(
            session,
            attempt=row,
            event=evidence.LineEvent(
                event_key=uuid.uuid4().hex,
                log_path="/logs/out.log",
                line_number=index + 1,
                line=text[index],
                source_time=None,
                read_at=dt.datetime.now(dt.UTC),
                signal=signal,
                context=tuple(startup),
            ),
        )
    async with ctx.sessions() as session:
        rows = await queries.anomalies_of_attempts(session, attempt_ids=[target.id])
    assert rows[0].node != "node2"  # nothing to match against yet
    cause = diagnosis.attempt_cause(rows, attempt_nodes=("node1", "node2"))
    assert (cause.category, cause.node) == ("HOST_OOM", "node2")
    assert diagnosis.attempt_cause(rows).node != "node2"  # without the node list: no guess


async def test_a_lost_peer_alone_waits_for_the_line_naming_the_failed_process(ctx, fake, observer) -> None:
    """The survivor's `Connection reset by peer` (real gloo text, tests/fixtures/torchrun) reports another process's
    death: acting on it would make the launcher's report of the killed rank "after Recovery acted". The advisor
    waits (RECOVERY_ORIGIN_WAIT_SECONDS) and decides once the launcher's summary arrives, citing it."""
    await submit(observer, fake, 36, node="node1")
    peer = (
        "[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
        "[127.0.0.1]:28809: Connection reset by peer"
    )
    await crash_line(ctx, 36, peer, number=1)
    advisor = Advisor(ctx)
    await advisor.tick()
    await advisor.tick()
    assert await advice_of(ctx, 36) == []  # the origin may still be on its way
    summary = (
        "E1205 23:52:56.181000 32506 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -9) "
        "local_rank: 0 (pid: 433) of binary: /venv/bin/python"
    )
    await crash_line(ctx, 36, summary, number=2)
    await advisor.tick()
    [advice] = await advice_of(ctx, 36)
    async with ctx.sessions() as session:
        rows = {row.line_number: row.id for row in await session.scalars(select(Anomaly))}
    assert advice.anomaly_id == rows[2]  # decided on the launcher's summary, not the lost peer
    assert f"root_cause:anomaly:{rows[2]}" in advice.evidence["refs"]


async def test_a_lost_peer_alone_is_decided_after_the_wait(ctx, fake, observer) -> None:
    """Bounded: when no other line comes, the consequence is decided on after the wait."""
    await submit(observer, fake, 37, node="node1")
    await crash_line(ctx, 37, "RuntimeError: Connection closed by peer [10.0.0.2]:29500", number=1)
    advisor = Advisor(
        AppContext(settings=replace(ctx.settings, origin_wait_seconds=0.0), engine=ctx.engine, sessions=ctx.sessions)
    )
    await advisor.tick()
    [advice] = await advice_of(ctx, 37)
    assert advice.operation == "RESTART"
