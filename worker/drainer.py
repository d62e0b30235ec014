"""Drainer: drains suspect nodes behind RECOVERY_NODE_DRAIN (off by default), observe-first like the controller.

Every drain passes the one gate (app.domain.decision.gate, kind drain): the operator's ceiling, RECOVERY_NODE_DRAIN
and the node's partition being managed. When it says no, the drainer records once per node what it would
send (`node.would_drain`, drain status SHADOW, the gate's answer in the message); allowed, it sends
`scontrol update NodeName=<node> State=DRAIN Reason="recovery: ..."`, recorded as SENT
before the command, then DRAINED only once a fresh look at Slurm shows the node drained or
draining. Never more than RECOVERY_NODE_DRAIN_MAX_FRACTION of a partition is drained by Recovery
(REFUSED says why). Recovery never resumes a node: an operator does (`scontrol update NodeName=<node>
State=RESUME`) and clears it on the Nodes page.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from app.domain.decision.gate import ActionKind, GateQuestion, may_send
from app.domain.fleetwide import trust as rules
from app.fleet import queries as fleet_queries
from app.fleet import service as fleet_service
from app.infra.context import AppContext
from app.infra.db import utcnow
from app.slurm.adapter import Scheduler
from app.slurm.errors import SchedulerError
from worker.service import Service

if TYPE_CHECKING:
    from app.fleet.models import NodeStanding

log = logging.getLogger("recovery.drainer")

RETRY_FAILED = dt.timedelta(minutes=5)


def drain_command(node: str, reason: str) -> str:
    """The command line shown in records and audit events."""
    return f'scontrol update NodeName={node} State=DRAIN Reason="{reason}"'


class Drainer(Service):
    """Drains (or, in observe mode, records the drain of) nodes that are suspect for the cluster."""

    name = "drainer"

    def __init__(self, ctx: AppContext, scheduler: Scheduler, *, interval: float | None = None) -> None:
        super().__init__(interval=interval if interval is not None else max(5.0, ctx.settings.poll_interval * 5))
        self.ctx = ctx
        self.settings = ctx.settings
        self.scheduler: Any = scheduler
        self.fence: Callable[[], Awaitable[bool]] | None = None  # set by the WorkerRunner (lease check)
        self.sent = 0

    async def tick(self) -> None:
        mode = self.settings.node_drain
        if mode == "off":
            return
        now = utcnow()
        async with self.ctx.sessions() as session:
            candidates = await fleet_queries.drain_candidates(session, cluster=self.settings.cluster, now=now)
        for row in candidates:
            await self.drain_one(row.id, row.node, mode=mode)

    async def drain_one(self, row_id: int, node: str, *, mode: str) -> None:
        """Plan, record and (in act mode) send and verify the drain of one node."""
        cluster = self.settings.cluster
        now = utcnow()
        async with self.ctx.sessions() as session, session.begin():
            row = await fleet_queries.standing(session, cluster=cluster, node=node)
            if row is None or row.id != row_id:
                return
            partition = await fleet_queries.node_partition(session, cluster=cluster, node=node)
            question = GateQuestion(
                kind=ActionKind.DRAIN,
                ceiling=self.settings.acknowledge_scheduler_actions,
                switch=mode,
                partition_managed=partition is None or self.settings.partition_managed(partition),
            )
            answer = may_send(question)
            if row.drain_status == rules.DRAIN_SENT and answer.allowed:
                await self._verify(session, row)
                return
            if row.drain_status == rules.DRAIN_SHADOW and not answer.allowed:
                return
            if row.drain_status == rules.DRAIN_FAILED and row.updated_at > now - RETRY_FAILED:
                return
            reason = rules.drain_reason(node=node, jobs=list(row.jobs or ()))
            command = drain_command(node, reason)
            refusal = await self._refusal(session, node=node, partition=partition)
            if refusal is not None:  # the drain-fraction rule refuses it whatever else the gate says
                answer = may_send(replace(question, fleet_hold=refusal))
                await fleet_service.record_drain(
                    session,
                    row=row,
                    status=rules.DRAIN_REFUSED,
                    message=f"{refusal} (gate: {answer.record})",
                    partition=partition,
                    command=command,
                )
                return
            if not answer.allowed:
                await fleet_service.record_drain(
                    session,
                    row=row,
                    status=rules.DRAIN_SHADOW,
                    message=f"would drain it; gate: {answer.record}",
                    partition=partition,
                    command=command,
                )
                return
            if not hasattr(self.scheduler, "drain_node"):
                await fleet_service.record_drain(
                    session,
                    row=row,
                    status=rules.DRAIN_REFUSED,
                    message="this Slurm interface cannot drain nodes (RECOVERY_SLURM_API=cli can); drain it by hand",
                    partition=partition,
                    command=command,
                )
                return
            if self.fence is not None and not await self.fence():
                return
            # The intent is committed before the command: a crash after it is verified, not repeated blindly.
            await fleet_service.record_drain(
                session,
                row=row,
                status=rules.DRAIN_SENT,
                message=f"sending; gate: {answer.record}",
                partition=partition,
                command=command,
            )
        started = time.monotonic()
        try:
            await self.scheduler.drain_node(node, reason)
            error = None
        except (SchedulerError, ValueError) as exc:
            error = str(exc)
        self.sent += 1
        took = (time.monotonic() - started) * 1000
        async with self.ctx.sessions() as session, session.begin():
            row = await fleet_queries.standing(session, cluster=cluster, node=node)
            if row is None:
                return
            if error is not None:
                await fleet_service.record_drain(
                    session,
                    row=row,
                    status=rules.DRAIN_FAILED,
                    message=f"Slurm refused it after {took:.0f} ms: {error}",
                    partition=row.drain_partition,
                    command=command,
                )
                return
            await fleet_service.note_drain_sent(session, row=row, took_ms=took)
            await self._verify(session, row)

    async def _refusal(self, session: Any, *, node: str, partition: str | None) -> str | None:
        """Why this drain must not happen (partition unknown, or the drained fraction would be exceeded)."""
        if partition is None:
            return "the node's partition is unknown (no blamed job names one), so the drain limit cannot be checked"
        try:
            members = await self.scheduler.partition_nodes(partition)
        except SchedulerError as exc:
            return f"the nodes of partition {partition} could not be read ({exc}); not draining blind"
        if not members or node not in members:
            return f"Slurm does not list {node} in partition {partition}"
        drained = [
            r.node
            for r in await fleet_queries.drained_nodes(session, cluster=self.settings.cluster)
            if r.drain_partition == partition and r.node != node
        ]
        ok, why = rules.drain_allowed(
            node=node, partition_nodes=members, drained=drained, max_fraction=self.settings.node_drain_max_fraction
        )
        return None if ok else why

    async def _verify(self, session: Any, row: NodeStanding) -> None:
        try:
            drained = await self.scheduler.node_drained(row.node)
        except (SchedulerError, ValueError) as exc:
            log.warning("drainer: could not look at node %s (%s); looking again next tick", row.node, exc)
            return
        if drained:
            await fleet_service.record_drain(
                session,
                row=row,
                status=rules.DRAIN_VERIFIED,
                message="Slurm shows it drained (sinfo); resume it with scontrol update NodeName=... State=RESUME",
                partition=row.drain_partition,
                command=drain_command(row.node, rules.drain_reason(node=row.node, jobs=list(row.jobs or ()))),
            )
