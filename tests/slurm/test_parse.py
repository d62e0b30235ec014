"""The Slurm parsers read every JSON version we know (21.08 to 25.11) into the same SlurmJob."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from app.slurm.errors import TransientSchedulerError, classify, require_observation
from app.slurm.parse import (
    ParseError,
    decode_wait_status,
    expand_filename,
    expand_hostlist,
    parse_jobs,
    parse_partition_nodes,
    parse_sacct_json,
    parse_sacct_pipe,
    parse_sinfo_node_names,
    parse_snapshot,
)
from app.slurm.records import AccountingRecord

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slurm"
REFERENCE = Path("/work/shared/reference/slurm-json")
KNOWN_STATES = {
    "PENDING",
    "RUNNING",
    "SUSPENDED",
    "COMPLETED",
    "CANCELLED",
    "FAILED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "OUT_OF_MEMORY",
    "COMPLETING",
    "CONFIGURING",
    "REQUEUED",
    "SPECIAL_EXIT",
    "REQUEUE_HOLD",
    "RESIZING",
    "REVOKED",
    "SIGNALING",
    "STAGE_OUT",
    "STOPPED",
}


def load(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def by_id(name: str) -> dict:
    return {job.job_id: job for job in parse_jobs(load(name))}


def utc(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


# ---------------------------------------------------------------- every captured file


def _reference_files(*prefixes: str) -> list[Path]:
    if not REFERENCE.is_dir():
        return []
    return sorted(p for p in REFERENCE.glob("*.json") if p.name.startswith(prefixes))


JOB_FILES = _reference_files("squeue-", "slurmrestd-jobs-", "slurmrestd-job-", "scontrol-")
ACCOUNTING_FILES = _reference_files("sacct-", "slurmdbd-job-")
NO_REFERENCE = "the shared reference captures (/work/shared/reference/slurm-json) are not on this machine"


@pytest.mark.skipif(not JOB_FILES, reason=NO_REFERENCE)
@pytest.mark.parametrize("path", JOB_FILES, ids=lambda p: p.name)
def test_every_reference_job_listing_parses(path: Path) -> None:
    raw = path.read_bytes()
    records = json.loads(raw)["jobs"]
    snapshot = parse_snapshot(raw)
    assert snapshot.problems == ()
    assert [job.job_id for job in snapshot.jobs] == [record["job_id"] for record in records]
    for job, record in zip(snapshot.jobs, records, strict=True):
        assert job.state in KNOWN_STATES, job.state
        assert job.restart_count == record["restart_cnt"]
        assert job.comment == record["comment"]
        assert job.submit_time is not None and job.submit_time.year >= 2020
        if job.state == "PENDING":
            assert job.start_time is None and job.end_time is None and job.nodes == ()
        if job.state in {"COMPLETED", "FAILED", "TIMEOUT"}:
            assert job.end_time is not None and job.exit_code is not None
        if record["nodes"]:
            assert job.nodes and all("[" not in node for node in job.nodes)
    assert snapshot.slurm_release and snapshot.data_parser


@pytest.mark.skipif(not ACCOUNTING_FILES, reason=NO_REFERENCE)
@pytest.mark.parametrize("path", ACCOUNTING_FILES, ids=lambda p: p.name)
def test_every_reference_accounting_file_parses(path: Path) -> None:
    raw = path.read_text()
    records = json.loads(raw)["jobs"]
    parsed = parse_sacct_json(raw)
    assert [r.job_id for r in parsed] == [record["job_id"] for record in records]
    for record in parsed:
        assert record.state in KNOWN_STATES
        if record.state == "FAILED":
            assert record.exit_code == 1


# ---------------------------------------------------------------- 22.05 (openapi/v0.0.38), captured on the lab


def test_2205_held_job_after_requeuehold() -> None:
    job = by_id("squeue-v0.0.38-lab.json")[1]
    assert (job.state, job.state_flags) == ("PENDING", ())
    assert job.held and job.hold_reason == "JobHeldUser" and job.priority == 0
    assert job.restart_count == 1 and job.requeue
    assert job.excluded_nodes == ("node1", "node3")
    assert job.exit_code == 1  # Slurm keeps the last attempt's exit code until release
    assert job.start_time is None and job.end_time is None  # 22.05 reports estimates here
    assert json.loads(job.comment)["APS"]["workflow_id"] == "w1"


def test_2205_exit_codes_are_raw_wait_status() -> None:
    jobs = by_id("squeue-v0.0.38-lab.json")
    raw = {record["job_id"]: record["exit_code"] for record in load("squeue-v0.0.38-lab.json")["jobs"]}
    assert raw[1] == 256 and (jobs[1].exit_code, jobs[1].exit_signal) == (1, 0)
    assert raw[2] == 9 and (jobs[2].state, jobs[2].exit_code, jobs[2].exit_signal) == ("FAILED", 0, 9)


def test_2205_running_and_array_jobs() -> None:
    jobs = by_id("squeue-v0.0.38-lab.json")
    running = jobs[3]
    assert running.state == "RUNNING" and running.nodes == ("node2",) and running.batch_host == "node2"
    assert running.start_time == utc(1796010145) and running.end_time is None
    assert not running.held and jobs[4].requeue is False
    task = jobs[7]
    assert (task.array_job_id, task.array_task_id) == (5, 1)
    assert task.stdout == "/tmp/recovery-lab/capture/arr-5_1.out"
    assert task.end_time == utc(1796010145)
    assert jobs[6].held and jobs[6].restart_count == 0  # sbatch --hold
    assert jobs[3].array_job_id is None and jobs[3].array_task_id is None


def test_2205_array_tasks_and_heterogeneous_components() -> None:
    jobs = by_id("squeue-v0.0.38-lab-array-hetjob.json")
    # array 1 of four tasks: tasks 1-3 got ids 4-6, the last task kept the array's own id
    assert {j.job_id: (j.array_job_id, j.array_task_id) for j in jobs.values() if j.array_job_id == 1} == {
        4: (1, 1),
        5: (1, 2),
        6: (1, 3),
        1: (1, 4),
    }
    master = jobs[1]
    assert master.array_task and master.scheduler_id == "1_4"  # never the bare "1": that names the whole array
    assert jobs[5].scheduler_id == "1_2"
    assert master.stdout == "/tmp/i13b-cap/arr-1_4.out"
    # array 7's record of still-pending tasks 1-5: an array id but no task id, so no single task
    pending = jobs[7]
    assert (pending.array_job_id, pending.array_task_id, pending.array_task_string) == (7, None, "1-5")
    assert not pending.array_task and pending.scheduler_id == "7"
    # heterogeneous job 2 (`#SBATCH hetjob`): components 2 (+0, the leader) and 3 (+1)
    assert [(j.job_id, j.het_job_id, j.het_job_offset) for j in (jobs[2], jobs[3])] == [(2, 2, 0), (3, 2, 1)]
    assert jobs[2].comment == jobs[3].comment == "hetcap"
    # an ordinary job has neither (Slurm reports het_job_id 0 and array_job_id 0)
    assert (jobs[4].het_job_id, jobs[4].het_job_offset) == (None, None)
    assert jobs[2].array_job_id is None and jobs[2].scheduler_id == "2"


def test_2205_output_paths_keep_pattern_and_expand() -> None:
    job = by_id("squeue-v0.0.38-lab.json")[3]
    assert job.stdout_raw == "/tmp/recovery-lab/capture/out-%x-%j-%N.log"
    assert job.stdout == "/tmp/recovery-lab/capture/out-apsjob-3-node2.log"
    assert job.stderr == "/tmp/recovery-lab/capture/err-apsjob-3.log"
    pending = by_id("squeue-v0.0.38-lab.json")[6]
    assert pending.stdout == "/tmp/recovery-lab/capture/out-apsjob-6-%N.log"  # no node yet: %N stays


# ---------------------------------------------------------------- 21.08 / 23.02 / 24.x / 25.x


def test_v0037_plain_values() -> None:
    jobs = parse_jobs(load("squeue-v0.0.37.json"))
    assert [job.state for job in jobs] == ["RUNNING", "PENDING"]
    assert jobs[0].nodes == ("cs75",) and jobs[0].exit_code == 0 and jobs[0].priority == 1013
    assert jobs[1].state_reason == "Dependency" and jobs[1].start_time is None


def test_v0039_held_requeued_jobs_and_number_objects() -> None:
    jobs = by_id("squeue-v0.0.39.json")
    held = jobs[52175550]
    assert held.held and held.hold_reason == "JobHeldUser" and held.restart_count == 1
    assert held.state_description == "launch failed requeued held"
    assert held.array_job_id == 52173767 and held.array_task_id == 1470
    failed = jobs[52175999]
    assert (failed.state, failed.exit_code, failed.exit_signal) == ("FAILED", 1, 0)  # number 256
    assert failed.nodes == ("gpu01", "gpu02", "gpu03", "gpu04")
    assert failed.stdout == "/work/logs/train-52175999.out"
    assert failed.stderr == "/work/logs/train-52175999.err"
    assert not failed.held


def test_v0041_list_states_and_arrays() -> None:
    jobs = parse_jobs(load("squeue-v0.0.41.json"))
    running, array = jobs
    assert running.state == "RUNNING" and running.state_flags == ()
    assert running.start_time == utc(1760161508) and running.end_time is None
    assert array.state == "PENDING" and array.array_task_string == "0-99%10"
    assert array.array_job_id == array.job_id and array.array_task_id is None
    assert array.stdout == array.stdout_raw  # 24.05 already sends the expanded path


def test_v0042_list_states_flags_exit_objects() -> None:
    jobs = by_id("squeue-v0.0.42.json")
    states = {job.state for job in jobs.values()}
    assert {"FAILED", "TIMEOUT", "CANCELLED", "RUNNING", "PENDING"} <= states
    failed = next(job for job in jobs.values() if job.state == "FAILED" and job.job_id < 7000)
    assert (failed.exit_code, failed.exit_signal) == (1, 0) and failed.state_reason == "NonZeroExitCode"
    timeout = next(job for job in jobs.values() if job.state == "TIMEOUT")
    assert timeout.exit_signal == 15 and timeout.end_time is not None
    held = jobs[7001]
    assert held.state == "PENDING" and held.state_flags == ("REQUEUED",)
    assert held.held and held.restart_count == 2
    assert held.excluded_nodes == ("cn1", "cn2", "gpu3")
    assert held.submit_time is not None and held.start_time is None
    assert json.loads(held.comment) == {"APS": {"workflow_id": "w1"}}
    killed = jobs[7002]
    assert (killed.exit_code, killed.exit_signal) == (0, 9)


def test_v0044_expanded_paths_preferred() -> None:
    jobs = parse_jobs(load("squeue-v0.0.44.json"))
    for job in jobs:
        assert job.stdout_raw == "slurm-%j.out"
        assert job.stdout == f"/home/{job.user}/slurm-{job.job_id}.out"
        assert job.stderr == job.stdout  # no --error: stderr shares the stdout file


# ---------------------------------------------------------------- helpers


@pytest.mark.parametrize(
    ("status", "expected"),
    [(0, (0, 0)), (256, (1, 0)), (9, (0, 9)), (15, (0, 15)), (2 << 8, (2, 0)), (137 << 8, (137, 0)), (0x8B, (0, 11))],
)
def test_decode_wait_status(status: int, expected: tuple[int, int]) -> None:
    assert decode_wait_status(status) == expected


@pytest.mark.parametrize(
    ("hostlist", "expected"),
    [
        ("node[1-3]", ("node1", "node2", "node3")),
        ("node1,node3", ("node1", "node3")),
        ("gpu[01-04]", ("gpu01", "gpu02", "gpu03", "gpu04")),
        ("cn[001-002,010]", ("cn001", "cn002", "cn010")),
        ("dave[4,31,40-42]", ("dave4", "dave31", "dave40", "dave41", "dave42")),
        ("a[8-10],b3", ("a8", "a9", "a10", "b3")),
        ("gpu[1-2]-ib", ("gpu1-ib", "gpu2-ib")),
        ("rack[1-2]-n[1-2]", ("rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2")),
        ("", ()),
        ("(null)", ()),
    ],
)
def test_expand_hostlist(hostlist: str, expected: tuple[str, ...]) -> None:
    assert expand_hostlist(hostlist) == expected


def test_expand_filename_patterns() -> None:
    common: dict[str, Any] = dict(job_id=10, name="pat", user="root")
    # the exact name 22.05 wrote for this pattern on the lab (a non-array job; %b stays literal)
    assert (
        expand_filename("/d/pat-%A-%a-%3j-%u-%x-%%-%n-%t-%s-%b.out", **common)
        == "/d/pat-10-4294967294-010-root-pat-%-0-0-batch-%b.out"
    )
    assert expand_filename("/d/arr-%A_%a.out", job_id=7, array_job_id=5, array_task_id=1) == "/d/arr-5_1.out"
    pending_array = expand_filename("/d/arr-%A_%a.out", job_id=5, array_job_id=5, array_task_id=None)
    assert pending_array == "/d/arr-5_%a.out"  # the array's pending record: tasks not split yet
    assert expand_filename("/d/%N.log", **common) == "/d/%N.log"
    assert expand_filename("/d/%N.log", **common, first_node="gpu01.cluster") == "/d/gpu01.log"
    assert expand_filename("slurm-%j.out", **common, working_directory="/home/u/") == "/home/u/slurm-10.out"
    assert expand_filename("/dev/null", **common) == "/dev/null"
    assert expand_filename(None, **common) is None


# ---------------------------------------------------------------- bad input


def test_bad_records_are_skipped_and_reported() -> None:
    good = load("squeue-v0.0.38-lab.json")["jobs"][0]
    raw = {
        "jobs": [
            good,
            {"job_id": "not-a-number", "job_state": "RUNNING"},
            "a string",
            None,
            {"name": "no id"},
            {"job_id": 42},  # nothing else: still a job, with defaults
            {
                "job_id": 43,
                "job_state": 7,
                "nodes": 5,
                "priority": "x",
                "exit_code": "?",
                "submit_time": "soon",
                "hold": "yes",
                "restart_cnt": None,
                "excluded_nodes": None,
                "standard_output": 3,
            },
        ],
        "errors": [],
    }
    snapshot = parse_snapshot(json.dumps(raw))
    assert [job.job_id for job in snapshot.jobs] == [good["job_id"], 42, 43]
    assert len(snapshot.problems) == 4
    assert "#1" in snapshot.problems[0] and "not-a-number" in snapshot.problems[0]
    odd = snapshot.get(43)
    assert odd is not None and odd.state == "UNKNOWN" and odd.nodes == () and odd.exit_code is None
    job42 = snapshot.get(42)
    assert job42 is not None and job42.restart_count == 0


def test_slurm_errors_are_problems() -> None:
    snapshot = parse_snapshot({"jobs": [], "errors": [{"error": "boom", "error_number": 1}]})
    assert snapshot.jobs == () and "boom" in snapshot.problems[0]


@pytest.mark.parametrize("raw", [b"not json", "[]", b"\xff\xfe", "{}"])
def test_not_a_job_listing_raises_parse_error(raw: bytes | str) -> None:
    with pytest.raises(ParseError):
        parse_snapshot(raw)


def test_ten_thousand_jobs_parse_in_one_snapshot() -> None:
    """Speed is measured by bench/observer_tick.py; here only the result is checked."""
    template = load("squeue-v0.0.42.json")
    jobs = template["jobs"]
    template["jobs"] = [
        dict(jobs[i % len(jobs)], job_id=1_000_000 + i, nodes=f"gpu[{i % 90:02d}-{i % 90 + 3:02d}]")
        for i in range(10_000)
    ]
    raw = json.dumps(template).encode()
    snapshot = parse_snapshot(raw)
    assert len(snapshot.jobs) == 10_000 and snapshot.problems == ()
    placed = next(job for job in snapshot.jobs if job.state != "PENDING")
    assert placed.nodes[0] == f"gpu{(placed.job_id - 1_000_000) % 90:02d}"
    assert all(job.nodes == () for job in snapshot.jobs if job.state == "PENDING")  # not placed yet


# ---------------------------------------------------------------- accounting


def test_sacct_pipe_from_slurmdbd_counts_attempts_and_keeps_pipes_in_comments() -> None:
    records = parse_sacct_pipe((FIXTURES / "sacct-P-slurmdbd-lab.txt").read_text())
    job8 = [r for r in records if r.job_id == 8]
    assert [(r.attempt, r.state, r.exit_code, r.nodes) for r in job8] == [
        (0, "REQUEUED", 1, ("node1",)),
        (1, "FAILED", 1, ("node2",)),
    ]
    assert job8[0].comment is not None
    assert json.loads(job8[0].comment) == {"APS": {"workflow_id": "w 2", "note": "a|b"}}
    assert job8[1].reason == "BeginTime" and job8[0].reason is None
    assert job8[0].start is not None and job8[0].start.tzinfo is not None
    job9 = next(r for r in records if r.job_id == 9)
    assert (job9.state, job9.exit_code, job9.exit_signal) == ("FAILED", 0, 9)


def test_sacct_pipe_from_jobcomp_merges_requeue_lines() -> None:
    records = parse_sacct_pipe((FIXTURES / "sacct-c-jobcomp-lab.txt").read_text(), source="jobcomp")
    job8 = [r for r in records if r.job_id == 8]
    assert [(r.attempt, r.state, r.nodes) for r in job8] == [(0, "FAILED", ("node1",)), (1, "FAILED", ("node2",))]
    assert all(r.source == "jobcomp" for r in records)


def test_sacct_pipe_edge_cases() -> None:
    text = (
        "JobID|State|ExitCode|NodeList|Start|End\n5_1|CANCELLED by 0|0:15|None "
        "assigned|Unknown|Unknown\n5_1.batch|CANCELLED|0:15|n1|Unknown|Unknown\n"
    )
    [record] = parse_sacct_pipe(text)
    assert (record.job_id, record.state, record.exit_signal, record.start) == (5, "CANCELLED", 15, None)
    assert parse_sacct_pipe("") == []
    with pytest.raises(ParseError):
        parse_sacct_pipe("Foo|Bar\n1|2\n")


def test_sacct_json_2205_exit_codes_are_not_trusted() -> None:
    records = parse_sacct_json(load("sacct-dbv0.0.38-lab.json"))
    assert [(r.attempt, r.state, r.nodes) for r in records] == [(0, "REQUEUED", ("node1",)), (1, "FAILED", ("node2",))]
    assert all(r.exit_code is None for r in records)  # 22.05 says SUCCESS/0 even for `exit 1`
    assert records[1].reason == "BeginTime"
    assert "a|b" in (records[0].comment or "")


def test_sacct_json_newer_versions() -> None:
    records = parse_sacct_json(load("sacct-v0.0.42.json"))
    by_state = {r.state: r for r in records}
    assert by_state["FAILED"].exit_code not in (None, 0)
    assert by_state["OUT_OF_MEMORY"].exit_signal == 125
    assert by_state["COMPLETED"].exit_code == 0
    [old] = parse_sacct_json(load("sacct-v0.0.39.json"))
    assert (old.state, old.exit_code, old.job_id) == ("COMPLETED", 0, 12079670)


# ---------------------------------------------------------------- partitions (sinfo)


def test_2205_sinfo_json_lists_the_partition_nodes() -> None:
    raw = (FIXTURES / "sinfo-v0.0.38-lab.json").read_text()
    in_debug = sorted(node["name"] for node in json.loads(raw)["nodes"] if "debug" in node["partitions"])
    assert parse_partition_nodes(raw, "debug") == tuple(in_debug) == ("node1", "node2", "node3")
    assert parse_partition_nodes(raw, "nosuch") is None  # 22.05 ignores -p: an unknown partition is simply absent
    assert parse_partition_nodes(raw, "debu") is None  # whole names only


def test_sinfo_json_node_in_several_partitions_and_odd_records() -> None:
    data = {
        "nodes": [
            {"name": "gpu02", "partitions": ["gpu", "all"]},
            {"name": "gpu01", "partitions": ["gpu"]},
            {"name": "cpu01", "partitions": ["all"]},
            {"name": "lost", "partitions": None},
            {"partitions": ["gpu"]},
            "not a node",
        ]
    }
    assert parse_partition_nodes(data, "gpu") == ("gpu01", "gpu02")
    assert parse_partition_nodes(data, "all") == ("cpu01", "gpu02")


def test_sinfo_json_in_an_unknown_shape_is_a_parse_error() -> None:
    with pytest.raises(ParseError):
        parse_partition_nodes('{"sinfo": [{"partition": {"name": "debug"}}]}', "debug")
    with pytest.raises(ParseError):
        parse_partition_nodes("sinfo: unrecognized option '--json'", "debug")


def test_plain_sinfo_node_names() -> None:
    assert parse_sinfo_node_names("node2\nnode1\n\nnode2\n") == ("node1", "node2")
    assert parse_sinfo_node_names("") is None


# ---------------------------------------------------------------- real captures of every release the lab runs
# tests/fixtures/slurm/<version>/ (capture.sh on `recovery lab up --slurm <version> --dbd`): the same
# seven jobs on each release, in the default data_parser and every other one the release offers.

CAPTURED = ("22.05", "24.11", "26.05")
DATA_PARSERS = {
    "22.05": (),
    "24.11": ("v0.0.40", "v0.0.41", "v0.0.42"),
    "26.05": ("v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"),
}


def _captured(prefix: str) -> list[Path]:
    return sorted(p for v in CAPTURED for p in (FIXTURES / v).glob(f"{prefix}*.json") if "outage" not in p.name)


def _roles(path: Path) -> dict[str, int]:
    return json.loads((path.parent / "roles.json").read_text())


def test_every_release_offers_the_data_parsers_we_captured() -> None:
    for version, parsers in DATA_PARSERS.items():
        found = {p.stem.removeprefix("squeue-") for p in (FIXTURES / version).glob("squeue-v*.json")}
        assert found == set(parsers), version


@pytest.mark.parametrize(
    "path", _captured("squeue") + _captured("scontrol-job"), ids=lambda p: f"{p.parent.name}/{p.name}"
)
def test_captured_job_listings_of_every_release(path: Path) -> None:
    version = path.parent.name
    roles = _roles(path)
    snapshot = parse_snapshot(path.read_bytes())
    assert snapshot.problems == () and snapshot.slurm_errors == ()
    assert snapshot.slurm_release and snapshot.slurm_release.startswith(version)
    parser = path.stem.rsplit("-", 1)[-1]
    if parser.startswith("v0.0."):
        assert snapshot.data_parser == f"data_parser/{parser}"
    jobs = {job.job_id: job for job in snapshot.jobs}
    held = jobs[roles["failed_then_held"]]
    assert (held.state, held.held, held.restart_count, held.hold_reason) == ("PENDING", True, 1, "JobHeldUser")
    assert held.excluded_nodes == ("node1", "node3") and held.nodes == () and held.start_time is None
    assert json.loads(held.comment)["APS"]["workflow_id"] == "capture"
    assert held.stdout and held.stdout.endswith(f"/out-failed_then_held-{held.job_id}.log")
    if path.name.startswith("scontrol-job"):
        assert set(jobs) == {held.job_id}
        return
    signalled = jobs[roles["killed_by_signal_9"]]
    assert (signalled.state, signalled.exit_signal) == ("FAILED", 9) and signalled.end_time is not None
    completed = jobs[roles["completed"]]
    assert (completed.state, completed.exit_code, completed.exit_signal) == ("COMPLETED", 0, 0)
    assert completed.start_time is not None and completed.end_time is not None
    assert completed.end_time >= completed.start_time
    running = jobs[roles["running"]]
    assert running.state == "RUNNING" and running.nodes and running.start_time and running.end_time is None
    assert running.requeue is True and running.held is False
    assert jobs[roles["no_requeue"]].requeue is False
    submitted_held = jobs[roles["submitted_held"]]
    assert (submitted_held.state, submitted_held.held, submitted_held.restart_count) == ("PENDING", True, 0)
    tasks = sorted((job.array_task_id, job.job_id) for job in snapshot.jobs if job.array_job_id == roles["array_1_3"])
    assert [task for task, _ in tasks] == [1, 2, 3]
    assert dict(tasks)[3] == roles["array_1_3"]  # the last task carries the array's own id
    assert all(job.cluster for job in snapshot.jobs)


@pytest.mark.parametrize("path", _captured("sacct"), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_captured_accounting_of_every_release(path: Path) -> None:
    version = path.parent.name
    roles = _roles(path)
    records = parse_sacct_json(path.read_bytes())
    by_job: dict[int, list[AccountingRecord]] = {}
    for record in records:
        by_job.setdefault(record.job_id, []).append(record)
    attempts = by_job[roles["failed_then_held"]]
    # every attempt (-D): the failed one ended by our requeue-hold, then the held one that never ran
    assert [r.attempt for r in attempts] == [0, 1]
    assert attempts[0].state in {"REQUEUED", "FAILED"} and len(attempts[0].nodes) == 1
    assert attempts[1].state == "PENDING" and attempts[1].nodes == ()
    [signalled] = by_job[roles["killed_by_signal_9"]]
    [completed] = by_job[roles["completed"]]
    assert signalled.state == "FAILED" and completed.state == "COMPLETED"
    assert completed.comment and json.loads(completed.comment)["APS"]["workflow_id"] == "capture"
    if version == "22.05":  # openapi/dbv0.0.38 reports every exit code as SUCCESS/0: not trusted
        assert attempts[0].exit_code is None and signalled.exit_code is None
    else:
        assert (attempts[0].exit_code, signalled.exit_signal, completed.exit_code) == (1, 9, 0)
    [held] = by_job[roles["submitted_held"]] if roles["submitted_held"] in by_job else [None]
    assert held is None or (held.state == "PENDING" and held.nodes == ())


@pytest.mark.parametrize("path", _captured("sinfo"), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_captured_sinfo_of_every_release(path: Path) -> None:
    assert parse_partition_nodes(path.read_bytes(), "debug") == ("node1", "node2", "node3")
    assert parse_partition_nodes(path.read_bytes(), "nosuch") is None


@pytest.mark.parametrize("version", CAPTURED)
def test_captured_outage_answer_of_every_release_is_could_not_observe(version: str) -> None:
    """22.05 exits 0 with an `errors` array and no jobs; 24.11 and 26.05 exit 1. Either is an outage."""
    text = (FIXTURES / version / "squeue-outage.txt").read_text()
    code = int(text.split()[2])
    answer = FIXTURES / version / "squeue-outage.json"
    if code == 0:
        snapshot = parse_snapshot(answer.read_bytes())
        assert snapshot.jobs == () and snapshot.slurm_errors
        with pytest.raises(TransientSchedulerError, match="answered with errors"):
            require_observation(snapshot)
    else:
        assert not answer.exists()
        stderr = text.split("stderr: ", 1)[1]
        assert isinstance(classify(("squeue", "--json"), code, stderr), TransientSchedulerError)
    assert (code == 0) == (version == "22.05")


def test_a_requeued_job_still_completing_lists_no_nodes_for_its_new_attempt() -> None:
    """26.05 right after requeuehold: ["PENDING", "COMPLETING"], restart count 1, and attempt 0's nodes."""
    data = json.loads((FIXTURES / "26.05" / "squeue.json").read_text())
    roles = json.loads((FIXTURES / "26.05" / "roles.json").read_text())
    [record] = [job for job in data["jobs"] if job["job_id"] == roles["failed_then_held"]]
    record = {**record, "job_state": ["PENDING", "COMPLETING"], "nodes": "node1", "batch_host": "node1"}
    job = parse_snapshot({"jobs": [record]}).jobs[0]
    assert (job.state, job.state_flags, job.restart_count) == ("PENDING", ("COMPLETING",), 1)
    assert job.nodes == () and job.start_time is None
    assert record["end_time"]["number"] > 5e9 and job.end_time is None  # the projection, not an end
