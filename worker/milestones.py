"""The one STARTED -> command -> finished sequence every Slurm command of the worker goes through.

The STARTED milestone is committed in its own transaction before the command is sent, and the
outcome is recorded in another after it returned, so a process killed anywhere in between leaves
an intent the controller's planner treats as "may have happened" (never a repeated or lost command).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.advice import queries as advice_queries
from app.advice import service as advice_service
from app.domain.control.planner import StepKind
from app.infra.context import AppContext
from app.infra.db import Session
from app.slurm.errors import SchedulerError

if TYPE_CHECKING:  # row types for annotations only: the SQL lives in the areas' queries
    from app.advice.models import Advice, SchedulerAction


@dataclass(frozen=True)
class Sent:
    """What happened to one command: Slurm's answer or its error, and how long it took."""

    job_id: int
    command: str
    result: Any
    error: SchedulerError | None
    duration_ms: float


async def run_command(
    ctx: AppContext,
    *,
    advice_id: int,
    step: StepKind,
    key: str,
    actor: str,
    gate: str,
    command_of: Callable[[int], str],
    send: Callable[[int], Awaitable[Any]],
    settle: Callable[[Session, Advice, SchedulerAction, Sent], Awaitable[int]],
    accept: Callable[[Advice], bool] | None = None,
    lock: bool = False,
    before: Callable[[], None] | None = None,
    after: Callable[[], None] | None = None,
) -> int:
    """Write STARTED (with the one gate's answer, decision/gate.py), send the command, let `settle` record the outcome;
    0 without a command when `accept` refuses."""
    async with ctx.sessions() as session, session.begin():
        if lock:
            advice = await advice_queries.lock_advice(session, advice_id=advice_id)
        else:
            advice = await advice_queries.get_advice(session, advice_id=advice_id)
        if advice is None or (accept is not None and not accept(advice)):
            return 0
        job_id = advice.slurm_job_id
        command = command_of(job_id)
        action = await advice_service.begin_action(
            session, advice=advice, step=step, key=key, command=command, actor=actor, gate=gate
        )
        action_id = action.id
    if before is not None:
        before()
    started = time.monotonic()
    error: SchedulerError | None = None
    result: Any = None
    try:
        result = await send(job_id)
    except SchedulerError as exc:
        error = exc
    duration_ms = (time.monotonic() - started) * 1000
    if error is None and after is not None:
        after()
    async with ctx.sessions() as session, session.begin():
        fresh = await advice_queries.get_advice(session, advice_id=advice_id)
        started_action = await advice_queries.get_action(session, action_id=action_id)
        assert fresh is not None and started_action is not None
        return await settle(session, fresh, started_action, Sent(job_id, command, result, error, duration_ms))
