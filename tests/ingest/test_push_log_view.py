"""The log view of a pushed stream: the lines kept in the database around an evidence line, numbered as the reader
numbered them (a record holding a whole traceback is several lines; a replay numbers nothing)."""

from __future__ import annotations

import datetime as dt

import httpx
from markupsafe import escape

from app.evidence.models import Anomaly
from app.infra.context import AppContext
from tests.api.helpers import LiveServer
from tests.factories import add_attempt, anomalies, enrolled_job
from tests.ingest.helpers import otel_export, otel_records, real_lines


def log_page(server: LiveServer, job: int, path: str, line: int) -> httpx.Response:
    return httpx.get(
        f"{server.url}/dashboard/jobs/{job}/attempts/0/log", params={"path": path, "line": line}, timeout=30
    )


async def test_pushed_lines_are_shown_around_the_crash_with_the_reader_s_numbers(
    ctx: AppContext, server: LiveServer
) -> None:
    job = await enrolled_job(ctx, 7401)
    attempt = await add_attempt(ctx, job, 0, start_time=dt.datetime.now(dt.UTC) - dt.timedelta(hours=1))
    lines = real_lines("ddp-raise.log", until="attempt 1")
    start = next(i for i, line in enumerate(lines) if "Traceback" in line)
    # a collector's multiline rule sends rank 0's traceback as one record; the other lines one record each
    bodies = [*lines[:start], "\n".join(lines[start : start + 5]), *lines[start + 5 :]]
    resource = {"slurm.job.id": "7401", "host.name": "node2", "log.file.path": "/shared/out/train.log"}
    records = otel_records(bodies, resource)
    assert otel_export(server, records)
    assert otel_export(server, records)  # a replay: recorded once, numbered once

    crashes = await anomalies(ctx, Anomaly.attempt_id == attempt.id, Anomaly.kind == "CRASH")
    assert crashes, server.log()
    after = [c for c in crashes if c.line_number and c.line_number > start + 5]
    assert after, [(c.line_number, c.line) for c in crashes]
    crash = after[0]
    assert crash.log_path and crash.log_path.startswith("push://")
    number = crash.line_number
    assert number is not None
    assert lines[number - 1].startswith((crash.line or "")[:60]), (number, crash.line)
    page = log_page(server, 7401, crash.log_path, number)
    assert page.status_code == 200, page.text[-2000:]
    assert f'id="L{number}" class="target"' in page.text
    for shown in lines[max(0, number - 50) : number + 50]:
        assert str(escape(shown)) in page.text, shown
    assert f'id="L{len(lines) + 1}"' not in page.text  # the replay added no line

    beyond = log_page(server, 7401, crash.log_path, len(lines) + 500)
    assert beyond.status_code == 200 and "no pushed line is kept there" in beyond.text
    other = log_page(server, 7401, "push://elsewhere/1/node9/x.log", 1)
    assert other.status_code == 404
