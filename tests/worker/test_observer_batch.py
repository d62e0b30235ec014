"""Batch registration and changed ticks: statements counted per table on both databases, rows as one by one."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
from collections import Counter
from typing import Any

from sqlalchemy import event, select

from app.audit.models import AuditEvent
from app.feed.models import ChangeFeedEntry
from app.infra.context import AppContext
from app.jobs.models import Attempt, Job, Policy, Workflow
from app.slurm.fake import FakeScheduler, make_job
from app.slurm.incremental import SnapshotParser
from app.slurm.parse import parse_snapshot
from worker.observer import Observer

_WRITE = re.compile(r"^\s*(INSERT INTO|UPDATE|DELETE FROM)\s+\"?(\w+)", re.I)
_READ = re.compile(r"^\s*SELECT\b.*?(?:\bFROM\s+\"?(\w+)|$)", re.I | re.S)


class Statements:
    """Statements sent on the engine, by kind and table (before_cursor_execute fires once per execute)."""

    def __init__(self, ctx: AppContext) -> None:
        self.writes: Counter[str] = Counter()
        self.reads: Counter[str] = Counter()  # SELECT by its first table ("-": none, e.g. PostgreSQL's feed lock)
        self.engine = ctx.engine.sync_engine
        event.listen(self.engine, "before_cursor_execute", self._count)

    def _count(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        match = _WRITE.match(statement)
        if match:
            self.writes[f"{match.group(1).split()[0].upper()} {match.group(2)}"] += 1
        elif read := _READ.match(statement):
            self.reads[f"SELECT {read.group(1) or '-'}"] += 1

    def close(self) -> None:
        event.remove(self.engine, "before_cursor_execute", self._count)


def _comment(workflow: str, environment: str, **extra: Any) -> str:
    return json.dumps({"APS": {"workflow_id": workflow, "environment": environment, "mode": "observe", **extra}})


def _population(scheduler: FakeScheduler, env: str, first: int, count: int) -> None:  # workflows named per `first`
    """Every kind of first sighting: running, pending, array tasks, ended before the watch, rejected, plain."""
    ended = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    for n in range(count):
        job_id = first + n
        kind = n % 6
        if kind == 0:
            job = make_job(job_id, comment=_comment(f"wf-{first}-{n % 4}", env), state="RUNNING", nodes=("n1",))
        elif kind == 1:
            job = make_job(job_id, comment=_comment(f"wf-{first}-{n % 4}", env), array_job_id=first, array_task_id=n)
        elif kind == 2:  # ended an hour ago: adopted as history
            job = make_job(
                job_id, comment=_comment(f"wf-{first}-old", env), state="FAILED", exit_code=1, end_time=ended
            )
        elif kind == 3:
            job = make_job(job_id, comment=_comment("wf-x", "elsewhere"))  # ENVIRONMENT_MISMATCH
        elif kind == 4:
            job = make_job(job_id, comment='{"APS": {"workflow_id": 3}}')  # invalid policy: rejected
        else:
            job = make_job(job_id, comment="nightly evaluation")  # not a candidate at all
        scheduler.add(dataclasses.replace(job, stdout=f"/logs/{job_id}.out", stderr=f"/logs/{job_id}.out"))


async def test_one_tick_registers_any_number_of_jobs_in_the_same_statements(ctx: AppContext, fast_paths: bool) -> None:
    """With the fast paths on, one tick's statements do not grow with the jobs; off, they grow with them."""
    env = ctx.settings.environment
    counts = []
    for first, count in ((1000, 12), (2000, 120)):
        scheduler = FakeScheduler()
        observer = Observer(ctx, scheduler)
        observer.state.watching_since = dt.datetime.now(dt.UTC)  # a later tick: the old FAILED job is adopted
        _population(scheduler, env, first, count)
        statements = Statements(ctx)
        try:
            await observer.tick()
        finally:
            statements.close()
        counts.append(statements.writes)
    small, large = counts
    if not fast_paths:  # one job at a time: ten times the jobs, ten times the INSERTs
        assert large["INSERT jobs"] == 10 * small["INSERT jobs"] == 100, (small, large)
        return
    assert small == large, (small, large)
    # one multi-row INSERT per table (and one UPDATE of the workflows' summaries), whatever the count
    assert large == Counter(
        {
            "INSERT workflows": 1,
            "INSERT jobs": 1,
            "INSERT policies": 1,
            "INSERT attempts": 1,
            "INSERT audit_events": 1,
            "INSERT change_feed": 1,
            "UPDATE workflows": 1,
        }
    )
    async with ctx.sessions() as session:
        registered = (await session.scalars(select(Job).where(Job.slurm_job_id >= 2000))).all()
        adopted = (await session.scalars(select(Attempt).where(Attempt.adopted_at.is_not(None)))).all()
    assert len(registered) == 100  # 120 minus the 20 plain jobs
    assert {a.slurm_job_id for a in adopted} == {2000 + n for n in range(120) if n % 6 == 2} | {
        1000 + n for n in range(12) if n % 6 == 2
    }


async def test_a_tick_where_jobs_changed_sends_the_same_statements_for_5_or_40_of_them(ctx: AppContext) -> None:
    scheduler = FakeScheduler()
    observer = Observer(ctx, scheduler)
    env = ctx.settings.environment
    for n in range(45):
        scheduler.add(make_job(500 + n, comment=_comment(f"wf-{n % 5}", env)))
        scheduler.start(500 + n, ["n1"])
    scheduler.add(make_job(900, comment="nightly evaluation"))  # never enrolled: its changes cost no statement
    await observer.tick()
    sent = []
    for changed in (range(5), range(5, 45)):
        for n in changed:
            scheduler.finish(500 + n, "FAILED" if n % 2 else "COMPLETED", exit_code=n % 2)
        scheduler.start(900, [f"n{len(changed)}"])
        statements = Statements(ctx)
        try:
            await observer.tick()
        finally:
            statements.close()
        sent.append((statements.reads, statements.writes))
    assert sent[0] == sent[1], sent
    reads, writes = sent[1]
    assert reads["SELECT jobs"] == reads["SELECT attempts"] == 1 and "SELECT workflows" not in reads, reads
    # one statement per table written: the workflow summaries too, although the jobs' workflows alternate
    # between gaining a failed attempt and not (the ORM would send one UPDATE per run of equal changes)
    assert writes == Counter(
        {
            "UPDATE attempts": 1,
            "UPDATE jobs": 1,
            "UPDATE workflows": 1,
            "INSERT audit_events": 1,
            "INSERT change_feed": 1,
        }
    ), writes
    async with ctx.sessions() as session:
        workflows = {w.workflow_key: w for w in (await session.scalars(select(Workflow))).all()}
        changes = (
            await session.scalars(select(AuditEvent).where(AuditEvent.event_type == "attempt.state_changed"))
        ).all()
    assert sum(w.failed_attempt_count for w in workflows.values()) == 22
    assert sum(w.attempt_count for w in workflows.values()) == 45
    assert len(changes) == 45


async def _dump(ctx: AppContext, cluster: str) -> dict[str, list[tuple]]:
    """The cluster's rows without timestamps, every id replaced by its rank among the cluster's rows of its table."""
    async with ctx.sessions() as session:
        workflows = (
            await session.scalars(select(Workflow).where(Workflow.cluster == cluster).order_by(Workflow.id))
        ).all()
        job_rows = (await session.scalars(select(Job).where(Job.cluster == cluster).order_by(Job.id))).all()
        attempts = (await session.scalars(select(Attempt).where(Attempt.cluster == cluster).order_by(Attempt.id))).all()
        policies = (
            await session.scalars(select(Policy).where(Policy.job_id.in_([j.id for j in job_rows])).order_by(Policy.id))
        ).all()
        events = (
            await session.scalars(select(AuditEvent).where(AuditEvent.cluster == cluster).order_by(AuditEvent.id))
        ).all()
        feed = (
            await session.scalars(
                select(ChangeFeedEntry).where(ChangeFeedEntry.cluster == cluster).order_by(ChangeFeedEntry.id)
            )
        ).all()
    rank = {
        "workflow": {w.id: i for i, w in enumerate(workflows)},
        "job": {j.id: i for i, j in enumerate(job_rows)},
        "attempt": {a.id: i for i, a in enumerate(attempts)},
        "audit": {e.id: i for i, e in enumerate(events)},
    }
    skip = {"id", "created_at", "updated_at", "last_seen_at", "first_seen_running_at", "adopted_at", "recorded_at"}
    skip |= {"produced_at", "cluster", "uuid"}

    def row(obj: Any, **ids: str) -> tuple:
        values = []
        for column in obj.__table__.columns:
            if column.name in skip:
                continue
            value = getattr(obj, column.name)
            if column.name in ids and value is not None:
                value = rank[ids[column.name]][value]
            if column.name == "payload":  # attempt uuids are derived from the cluster's name
                value = {k: v for k, v in value.items() if k != "uuid"}
            values.append((column.name, value))
        return tuple(values)

    return {
        "workflows": [row(w) for w in workflows],
        "jobs": [row(j, workflow_id="workflow") for j in job_rows],
        "policies": [row(p, job_id="job") for p in policies],
        "attempts": [row(a, job_id="job", workflow_id="workflow") for a in attempts],
        "audit": [row(e, workflow_id="workflow") for e in events],
        "feed": [row(f, workflow_id="workflow", entity_id=f.topic) for f in feed],
    }


async def test_batch_registration_writes_what_one_by_one_writes(ctx: AppContext) -> None:
    """Same rows, audit events, feed entries and their order, adoption, arrays, on two clusters of one database: the
    observer's first sightings with RECOVERY_FAST_PATHS on (register_jobs) and off (register_job, create_attempt)."""
    scheduler = FakeScheduler()
    _population(scheduler, "test-env", 7000, 30)
    watching = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    snapshot = await scheduler.list_jobs()
    for cluster, fast in (("batch", True), ("single", False)):
        settings = dataclasses.replace(ctx.settings, cluster=cluster, fast_paths=fast)
        observer = Observer(dataclasses.replace(ctx, settings=settings), scheduler)
        observer.state.watching_since = watching
        async with ctx.sessions() as session, session.begin():
            assert await observer._register_new(session, list(snapshot.jobs)) == len(snapshot.jobs)
    batch, single = await _dump(ctx, "batch"), await _dump(ctx, "single")
    assert {dict(job)["enrolment"] for job in batch["jobs"]} >= {"ENROLLED", "ENVIRONMENT_MISMATCH", "NOT_ENROLLED"}
    for table in single:
        assert batch[table] == single[table], table
    assert any(row for row in batch["audit"] if ("event_type", "job.adopted") in row)
    assert len(batch["attempts"]) == 15 and len(batch["workflows"]) == 5


def test_snapshot_parser_decodes_only_changed_records_and_agrees_with_parse_snapshot() -> None:
    records: list[dict[str, Any]] = [
        {"job_id": 1, "job_state": "RUNNING", "name": "a", "nodes": "n[1-2]", "comment": "x"},
        {"job_id": 2, "job_state": ["PENDING"], "restart_cnt": {"set": True, "infinite": False, "number": 1}},
        {"job_id": "not a number"},
    ]
    answer = {"jobs": records, "errors": [{"error": "partial"}], "meta": {"plugin": {"type": "openapi/v0.0.38"}}}
    parser = SnapshotParser()
    first = parser.parse(json.dumps(answer))
    assert parser.decoded == 3
    reference = parse_snapshot(json.dumps(answer))
    assert (first.jobs, first.problems, first.data_parser) == (
        reference.jobs,
        reference.problems,
        reference.data_parser,
    )
    records[1]["job_state"] = ["RUNNING"]
    second = parser.parse(json.dumps(answer).encode())
    assert parser.decoded == 2  # job 2 and the broken record
    assert second.jobs[0] is first.jobs[0] and second.jobs[1].state == "RUNNING"
    assert second.jobs == parse_snapshot(json.dumps(answer)).jobs


def test_snapshot_parser_finds_records_that_moved_and_tries_broken_ones_again() -> None:
    records: list[dict[str, Any]] = [{"job_id": n, "job_state": "RUNNING"} for n in range(1, 100)] + [{"job_id": "x"}]
    parser = SnapshotParser()
    first = parser.parse(json.dumps({"jobs": records}))
    second = parser.parse(json.dumps({"jobs": [{"job_id": 100}, *reversed(records)]}).encode())
    # the first records in the wrong place are decoded, then the rest (they moved) are found by their bytes
    assert parser.decoded < 70  # of 101: the new job 100, the broken record, and at most 64 before the lookup
    assert [j.job_id for j in second.jobs] == [100, *range(99, 0, -1)] and second.jobs[-1] is first.jobs[0]
    assert len(second.problems) == 1 and second.problems[0].startswith("job record #1 (job_id='x')")


def test_the_fields_decoded_of_each_record_are_those_parse_job_reads() -> None:
    import inspect

    from app.slurm import parse

    read = set(re.findall(r'get\("(\w+)"\)', inspect.getsource(parse.parse_job)))
    assert read == set(parse.JOB_FIELDS)


def test_snapshot_parser_agrees_with_parse_snapshot_on_every_captured_answer() -> None:
    from pathlib import Path

    from app.slurm.parse import ParseError

    root = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
    checked = 0
    for path in sorted(root.rglob("*.json")):
        raw = path.read_bytes()
        try:
            reference = parse_snapshot(raw)
        except ParseError:
            continue  # not a job list (sinfo, sacct, ...)
        parser = SnapshotParser()
        for _ in range(2):  # decoded, then reused
            got = parser.parse(raw)
            assert (got.jobs, got.problems, got.slurm_release, got.data_parser) == (
                reference.jobs,
                reference.problems,
                reference.slurm_release,
                reference.data_parser,
            ), path
        checked += 1
    assert checked >= 5
