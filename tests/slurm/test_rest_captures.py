"""The slurmrestd adapter on real answers of 24.11 and 26.05 (tests/fixtures/slurm/<release>/rest/, capture_rest.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import httpx
import pytest

from app.infra.config import Settings
from app.slurm.errors import JobNotFound, JobStateConflict, TransientSchedulerError
from app.slurm.incremental import JobsParser, decode_jobs_answer
from app.slurm.parse import ParseError, parse_partition_nodes, parse_sacct_json, parse_snapshot
from app.slurm.rest_scheduler import RestScheduler, RestUnsupported, choose_versions, requeue_path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
# release -> (job API versions its slurmrestd offers, the one the adapter picks, requeue over REST)
RELEASES = {
    "24.11": (("v0.0.40", "v0.0.41", "v0.0.42"), "v0.0.42", False),
    "26.05": (("v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"), "v0.0.45", True),
}
CAPTURES = [(release, version) for release, (offered, _, _) in RELEASES.items() for version in offered]


def _rest_dir(release: str) -> Path:
    return FIXTURES / release / "rest"


def _load(release: str, name: str) -> dict:
    data: dict = json.loads((_rest_dir(release) / name).read_text())
    return data


@pytest.mark.parametrize(("release", "version"), CAPTURES)
def test_bulk_jobs_answer_of_every_offered_version(release: str, version: str) -> None:
    roles = _load(release, "roles.json")
    snapshot = parse_snapshot((_rest_dir(release) / f"jobs-{version}.json").read_bytes())
    assert snapshot.problems == () and snapshot.data_parser == f"data_parser/{version}"
    assert (snapshot.slurm_release or "").startswith(release)
    jobs = {job.scheduler_id: job for job in snapshot.jobs}
    held = jobs[str(roles["held_excluded"])]  # requeue-held, then excluded_nodes set over REST
    assert (held.state, held.held, held.restart_count, held.excluded_nodes) == ("PENDING", True, 1, ("node1", "node3"))
    assert held.nodes == () and held.end_time is None
    failed, killed = jobs[str(roles["failed"])], jobs[str(roles["killed_by_signal_9"])]
    assert (failed.state, failed.exit_code, failed.exit_signal) == ("FAILED", 3, 0)  # exit_code objects
    assert killed.exit_signal == 9 and killed.end_time is not None
    assert jobs[str(roles["completed"])].state == "COMPLETED"
    running = jobs[str(roles["running"])]
    assert (running.state, running.held, len(running.nodes)) == ("RUNNING", False, 1)
    assert jobs[str(roles["submitted_held"])].held
    array = roles["array_1_3"]
    tasks = {job.array_task_id or 0: job for job in snapshot.jobs if job.array_job_id == array}
    assert sorted(tasks) == [1, 2, 3]
    assert tasks[3].job_id == array and tasks[3].scheduler_id == f"{array}_3"  # the last task has the array's id
    assert (tasks[2].held, tasks[2].restart_count) == (True, 1)  # requeue-held alone (REST on 26.05, CLI on 24.11)
    assert not tasks[1].held and tasks[1].restart_count == 0


@pytest.mark.parametrize(("release", "version"), CAPTURES)
def test_single_job_answer(release: str, version: str) -> None:
    roles = _load(release, "roles.json")
    snapshot = parse_snapshot((_rest_dir(release) / f"job-{version}.json").read_bytes())
    (job,) = snapshot.jobs
    assert (job.job_id, job.held, job.excluded_nodes) == (roles["held_excluded"], True, ("node1", "node3"))


@pytest.mark.parametrize("release", RELEASES)
def test_nodes_accounting_and_api_choice(release: str) -> None:
    offered, chosen, has_requeue = RELEASES[release]
    roles = _load(release, "roles.json")
    spec = _load(release, "openapi.json")
    assert choose_versions(spec) == (chosen, chosen, "list")  # excluded_nodes: a csv_string array on v0.0.40+
    assert choose_versions(spec, offered[0])[0] == offered[0]
    assert (requeue_path(spec, chosen) is not None) is has_requeue
    assert all(requeue_path(spec, version) is None for version in offered[:-1])
    nodes = next(_rest_dir(release).glob("nodes-*.json")).read_bytes()
    assert parse_partition_nodes(nodes, "debug") == ("node1", "node2", "node3")
    history = parse_sacct_json(_load(release, f"slurmdb-job-{chosen}.json"))
    mine = [(r.attempt, r.state, r.nodes) for r in history if r.job_id == roles["held_excluded"]]
    assert [(attempt, state) for attempt, state, _ in mine] == [(0, "REQUEUED"), (1, "PENDING")]
    assert len(mine[0][2]) == 1 and mine[1][2] == ()


def _replaying(release: str) -> tuple[RestScheduler, list[str]]:
    """A RestScheduler whose HTTP answers are the captured ones, chosen by request (no CLI fallback)."""
    spec = _load(release, "openapi.json")
    actions = _load(release, "actions.json")
    by_request: dict[tuple[str, str], list[dict]] = {}  # the same request answered twice: in capture order
    for captured in actions.values():
        key = (captured["request"], json.dumps(captured.get("body"), sort_keys=True))
        by_request.setdefault(key, []).append(captured)
    sent: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        sent.append(f"{request.method} {request.url.raw_path.decode()}")
        if path == "/openapi/v3":
            return httpx.Response(200, json=spec)
        body = json.loads(request.content) if request.content else None
        queue = by_request.get((f"{request.method} {path}", json.dumps(body, sort_keys=True)))
        assert queue, f"no captured answer for {request.method} {path} {body}"
        found = queue.pop(0) if len(queue) > 1 else queue[0]
        return httpx.Response(found["status"], json=found["answer"])

    settings = Settings.build(cluster="c", slurm_api="rest", slurmrestd_url="http://restd:6820")
    rest = RestScheduler(dataclasses.replace(settings, slurmrestd_cli_fallback=False))
    rest._client = httpx.AsyncClient(base_url=rest.base_url, transport=httpx.MockTransport(answer))
    return rest, sent


@pytest.mark.parametrize("release", RELEASES)
async def test_captured_action_answers_are_classified_like_the_cli(release: str) -> None:
    roles = _load(release, "roles.json")
    rest, sent = _replaying(release)
    await rest.set_excluded_nodes(roles["held_excluded"], ["node1", "node3"])  # 200, results null
    assert sent[-1] == f"POST /slurm/{rest.version}/job/{roles['held_excluded']}"
    with pytest.raises(JobNotFound):
        await rest.release(999_999_999)  # 404 "Invalid job id specified"
    with pytest.raises(JobStateConflict, match="already finished"):
        await rest.release(roles["completed"])  # 500 (24.11) / 422 (26.05) "Job has already finished"
    await rest.cancel(roles["running"])
    await rest.cancel(roles["running"])  # 200 whose status says "already completing or completed": done, as scancel
    # v0.0.40+ refuse every update of one array task; the adapter does not send one (no fallback here: refused)
    before = len(sent)
    with pytest.raises(RestUnsupported, match="update of an array task"):
        await rest.release(f"{roles['array_1_3']}_2")
    assert len(sent) == before
    if release == "26.05":  # v0.0.45: requeue with ?Hold=true (an empty ?Hold= is not taken as set)
        await rest.requeue_hold(roles["held_excluded"])
        assert sent[-1] == f"GET /slurm/v0.0.45/job/{roles['held_excluded']}/requeue?Hold=true"
        with pytest.raises(JobStateConflict):  # the same job again: 422 "Job is pending execution"
            await rest.requeue_hold(roles["held_excluded"])
        await rest.requeue_hold(f"{roles['array_1_3']}_2")  # status [{error_code: 0}]
        with pytest.raises(JobNotFound):
            await rest.requeue_hold(999_999_999)
    else:
        with pytest.raises(RestUnsupported, match="no form for requeue_hold"):
            await rest.requeue_hold(roles["held_excluded"])
    await rest.aclose()


@pytest.mark.parametrize("release", RELEASES)
async def test_captured_bad_token_answer_is_an_error_not_an_empty_cluster(release: str) -> None:
    rest, _ = _replaying(release)  # HTTP 511, `jobs: []` and errors "Protocol authentication error"
    with pytest.raises(TransientSchedulerError, match="Protocol authentication error"):
        await rest.list_jobs()
    await rest.aclose()


@pytest.mark.parametrize(("release", "version"), CAPTURES)
def test_incremental_parse_equals_the_full_one_and_reparses_only_changed_records(release: str, version: str) -> None:
    raw = (_rest_dir(release) / f"jobs-{version}.json").read_bytes()
    parser = JobsParser()
    first = parser.parse(decode_jobs_answer(raw))
    full = parse_snapshot(raw)
    assert first.jobs == full.jobs and (first.slurm_release, first.data_parser) == (
        full.slurm_release,
        full.data_parser,
    )
    assert parser.decoded == len(full.jobs)
    again = parser.parse(decode_jobs_answer(raw))
    assert parser.decoded == 0 and again.jobs == first.jobs and again.by_id is first.by_id
    document = json.loads(raw)
    parser.parse(decode_jobs_answer(json.dumps(document).encode()))  # the same records, formatted otherwise
    assert parser.decoded == len(full.jobs)  # reuse needs the same bytes: never a guess that a record is unchanged
    document["jobs"][0]["job_state"] = ["COMPLETED"]
    document["jobs"][1] = {"job_id": "not a number"}  # one broken record: a problem, never the whole answer
    changed = parser.parse(decode_jobs_answer(json.dumps(document).encode()))
    assert parser.decoded == 2 and changed.jobs[0].state == "COMPLETED" and changed.jobs[1:] == first.jobs[2:]
    assert changed.get(first.jobs[0].job_id) == changed.jobs[0] and changed.get(first.jobs[1].job_id) is None
    assert [p.split(" skipped")[0] for p in changed.problems] == ["job record #1 (job_id='not a number')"]


def test_jobs_answer_of_another_shape_or_not_json() -> None:
    parser = JobsParser()
    with pytest.raises(ParseError, match="no `jobs` list"):
        parser.parse(decode_jobs_answer(b'{"jobs": {"1": {}}, "errors": []}'))
    with pytest.raises(ParseError, match="not JSON"):
        decode_jobs_answer(b"<html>502 Bad Gateway</html>")
    outage = decode_jobs_answer(b'{"jobs": [], "errors": [{"error": "Unable to contact slurm controller"}]}')
    assert parser.parse(outage).slurm_errors == ("slurm reported: {'error': 'Unable to contact slurm controller'}",)
