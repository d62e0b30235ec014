"""Reads that build the story of attempts (domain/presentation/story.py) from stored records, in few statements.

`stories_of_jobs` loads a set of jobs' attempts with the anomaly their Advice was decided on (else their newest
decided anomaly), Advice, scheduler actions and the checkpoint each next attempt loaded, and tells every attempt's
story; `headline` picks the attempt a
job is summed up by (its newest attempt with Advice, else its newest attempt), the same rule the Overview's
outcome filter uses in SQL (app.advice.queries.workflow_outcome).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.advice.models import Advice, SchedulerAction
from app.domain.admission.mode import ENROLLED
from app.domain.decision.rootcause import decided_anomaly
from app.domain.fleetwide.trust import BUDGET_EXCEEDED, STORM_PAUSED
from app.domain.presentation.story import AdviceFact, AnomalyFact, AttemptFacts, NextFact, Story, tell
from app.evidence.models import Anomaly, Checkpoint
from app.evidence.queries import DECIDED_KINDS, STACK
from app.infra.sql import rows_in, scalars_in
from app.jobs.models import Attempt, Job


@dataclass
class Told:
    """One attempt with its story and the records the story links to."""

    attempt: Attempt
    story: Story
    advice: Advice | None
    anomaly: Anomaly | None
    next_attempt: Attempt | None


def _anomaly_fact(x: Anomaly | None) -> AnomalyFact | None:
    if x is None:
        return None
    node_from = (x.details or {}).get("nodeFrom")
    return AnomalyFact(
        kind=x.kind,
        category=x.category,
        node=x.node,
        xid=x.xid,
        line_number=x.line_number,
        log_path=x.log_path,
        node_from=str(node_from) if node_from and x.node else None,
    )


# Why an active restart waits for an operator, in the story's words (app.domain.fleetwide.trust's hold reasons).
HELD_BY = {BUDGET_EXCEEDED: "a recovery budget", STORM_PAUSED: "a restart storm"}


def _advice_fact(a: Advice | None, actions: Sequence[SchedulerAction]) -> AdviceFact | None:
    if a is None:
        return None
    return AdviceFact(
        operation=a.operation,
        mode=a.mode,
        rule=a.rule,
        exclusions=tuple(a.exclusions or ()),
        review=a.review,
        disposition=a.disposition,
        shadow_actions=sum(1 for m in actions if m.status == "SHADOW"),
        failed_actions=sum(1 for m in actions if m.status == "FAILED"),
        held=HELD_BY.get(a.disposition_reason or "") if a.active and a.disposition == "PENDING" else None,
    )


def _next_fact(n: Attempt | None, loaded: Checkpoint | None) -> NextFact | None:
    if n is None:
        return None
    return NextFact(
        attempt_index=n.attempt_index,
        state=n.state,
        nodes=tuple(n.nodes or ()),
        started=n.start_time is not None or n.first_seen_running_at is not None,
        loaded_iteration=loaded.iteration if loaded else None,
        loaded_checkpoint=loaded is not None,
    )


async def stories_of_jobs(session: AsyncSession, *, job_ids: Sequence[int]) -> dict[int, list[Told]]:
    """Every attempt of these jobs, in order, with its story: seven statements for any number of jobs."""
    result: dict[int, list[Told]] = {jid: [] for jid in job_ids}
    if not job_ids:
        return result
    jobs = {j.id: j for j in await scalars_in(session, select(Job), Job.id, sorted(set(job_ids)))}
    attempts = list(
        await scalars_in(session, select(Attempt).order_by(Attempt.attempt_index), Attempt.job_id, list(jobs))
    )
    ids = [a.id for a in attempts]
    current = select(Advice).where(Advice.superseded_by_id.is_(None))  # not one decided again since
    advice = {a.attempt_id: a for a in await scalars_in(session, current, Advice.attempt_id, ids)}
    actions: dict[int, list[SchedulerAction]] = {}
    for m in await scalars_in(
        session,
        select(SchedulerAction).order_by(SchedulerAction.id),
        SchedulerAction.advice_id,
        [a.id for a in advice.values()],
    ):
        actions.setdefault(m.advice_id, []).append(m)
    newest: dict[int, Anomaly] = {}
    by_id: dict[int, Anomaly] = {}
    stacks_said: dict[int, str] = {}  # what the stacks captured before Recovery acted showed (the judgment's sentence)
    told_kinds = select(Anomaly).where(Anomaly.kind.in_([*DECIDED_KINDS, STACK])).order_by(Anomaly.id)
    for x in await scalars_in(session, told_kinds, Anomaly.attempt_id, ids):
        if x.kind == STACK:
            stacks_said[x.attempt_id] = x.message
            continue
        newest[x.attempt_id] = x  # ordered by id: the newest wins
        by_id[x.id] = x
    anomalies = {attempt_id: cited_anomaly(advice.get(attempt_id), by_id) or x for attempt_id, x in newest.items()}
    loaded: dict[int, Checkpoint] = {}
    for c in await scalars_in(
        session,
        select(Checkpoint).where(Checkpoint.kind == "loaded").order_by(Checkpoint.id),
        Checkpoint.attempt_id,
        ids,
    ):
        loaded.setdefault(c.attempt_id, c)  # the first load of the attempt is the resume
    saved = dict(
        await rows_in(
            session,
            select(Checkpoint.attempt_id, func.max(Checkpoint.iteration))
            .where(Checkpoint.kind == "saved")
            .group_by(Checkpoint.attempt_id),
            Checkpoint.attempt_id,
            ids,
        )
    )
    saved_so_far: dict[int, int | None] = {}  # attempt id -> newest iteration saved by its job up to it
    newest_saved: dict[int, int] = {}
    for a in attempts:  # in attempt order
        if saved.get(a.id) is not None:
            newest_saved[a.job_id] = max(newest_saved.get(a.job_id, saved[a.id]), saved[a.id])
        saved_so_far[a.id] = newest_saved.get(a.job_id)
    by_job: dict[int, dict[int, Attempt]] = {}
    for a in attempts:
        by_job.setdefault(a.job_id, {})[a.attempt_index] = a
    for a in attempts:
        nxt = by_job[a.job_id].get(a.attempt_index + 1)
        adv = advice.get(a.id)
        job: Any = jobs.get(a.job_id)
        facts = AttemptFacts(
            attempt_index=a.attempt_index,
            state=a.state,
            nodes=tuple(a.nodes or ()),
            exit_code=a.exit_code,
            exit_signal=a.exit_signal,
            anomaly=_anomaly_fact(anomalies.get(a.id)),
            advice=_advice_fact(adv, actions.get(adv.id, []) if adv else []),
            next_attempt=_next_fact(nxt, loaded.get(nxt.id) if nxt else None),
            enrolled=job is None or job.enrolment == ENROLLED,
            resumed_checkpoint=a.id in loaded,
            resumed_iteration=loaded[a.id].iteration if a.id in loaded else None,
            adopted=a.adopted_at is not None,
            saved_iteration=saved_so_far.get(a.id),
            stacks=stacks_said.get(a.id),
        )
        result[a.job_id].append(Told(a, tell(facts), adv, anomalies.get(a.id), nxt))
    return result


def cited_anomaly(advice: Advice | None, anomalies: dict[int, Anomaly]) -> Anomaly | None:
    """The anomaly an Advice was decided on (recorded with it, or named by its evidence refs), when loaded."""
    if advice is None:
        return None
    chosen = advice.anomaly_id or decided_anomaly((advice.evidence or {}).get("refs") or ())
    return anomalies.get(chosen) if chosen is not None else None


def headline(told: Sequence[Told]) -> Told | None:
    """The attempt a job is summed up by: its newest attempt with Advice, else its newest attempt."""
    with_advice = [t for t in told if t.advice is not None]
    if with_advice:
        return with_advice[-1]
    return told[-1] if told else None
