"""A separate 'worker' process for subscription tests: changes an attempt (or records audit events) through
the services.

python -m tests.api.writer <database_url> state <slurm_job_id> <attempt_index> <STATE>
python -m tests.api.writer <database_url> audit <slurm_job_id> <count>
"""

from __future__ import annotations

import asyncio
import sys

from app.audit import service as audit
from app.infra.db import create_engine, session_factory
from app.jobs import queries
from app.jobs import service as jobs


async def main(url: str, action: str, *args: str) -> None:
    engine = create_engine(url)
    sessions = session_factory(engine)
    try:
        async with sessions() as session, session.begin():
            if action == "state":
                job = await queries.find_job(session, slurm_job_id=int(args[0]))
                attempt = await queries.find_attempt(session, slurm_job_id=int(args[0]), attempt_index=int(args[1]))
                assert job is not None and attempt is not None
                await jobs.update_attempt(session, attempt=attempt, job=job, state=args[2])
            elif action == "audit":
                for n in range(int(args[1])):
                    await audit.record(
                        session,
                        component="watcher",
                        event_type="anomaly.detected",
                        message=f"from worker {n}",
                        slurm_job_id=int(args[0]),
                        attempt_index=0,
                    )
            else:
                raise SystemExit(f"unknown action {action}")
    finally:
        await engine.dispose()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
