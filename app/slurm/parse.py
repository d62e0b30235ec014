"""Pure parsers of Slurm's job JSON (squeue/slurmrestd, 22.05 to 26.05) and accounting output (sacct)."""

from __future__ import annotations

import gc
import json
from datetime import UTC, datetime
from typing import Any

from app.domain.control import states
from app.slurm.names import NO_ARRAY_TASK, expand_filename, expand_hostlist
from app.slurm.records import AccountingRecord, SlurmJob, Snapshot

__all__ = [
    "NO_ARRAY_TASK",
    "ParseError",
    "answer_meta",
    "decode_wait_status",
    "expand_filename",
    "expand_hostlist",
    "load_json",
    "parse_job",
    "parse_jobs",
    "parse_partition_nodes",
    "parse_sacct_json",
    "parse_sacct_pipe",
    "parse_sinfo_node_names",
    "parse_snapshot",
]

UTC = UTC

# Base states of the v0.0.40+ job_state list; anything else in the list is a flag.
BASE_STATES = frozenset(
    {
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
    }
)
_NONE_WORDS = frozenset({"", "None", "none", "(null)", "Unknown", "N/A"})
# what accounting says for an attempt that never got nodes (a pending or held row), on every release
_NO_NODES = frozenset({"None assigned", *_NONE_WORDS})


class ParseError(ValueError):
    """The input is not Slurm job JSON at all (not a single broken record)."""


# ---------------------------------------------------------------- small field decoders


def _number(value: Any) -> int | None:
    """A count from a plain int (22.05, <= v0.0.38) or a {set, infinite, number} object (v0.0.39+: 24.11, 26.05)."""
    if value is None or value is True or value is False:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, dict):
        if not value.get("set") or value.get("infinite"):
            return None
        number = value.get("number")
        return number if isinstance(number, int) else None
    if isinstance(value, float):
        return int(value)
    return None


def _time(value: Any) -> datetime | None:
    """Epoch seconds (plain or a number object) as aware UTC; 0 or unset is None."""
    seconds = _number(value)
    if not seconds or seconds < 0:
        return None
    try:
        return datetime.fromtimestamp(seconds, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _text(value: Any) -> str | None:
    """A string field, with Slurm's placeholders for "nothing" mapped to None."""
    if value is None or not isinstance(value, str) or value in _NONE_WORDS:
        return None
    return value


def _accounting_nodes(value: Any) -> tuple[str, ...]:
    """A node list from accounting; "None assigned" (a row that never ran) is no node."""
    if not isinstance(value, str) or value.strip() in _NO_NODES:
        return ()
    return expand_hostlist(value)


def decode_wait_status(status: int) -> tuple[int, int]:
    """(exit code, signal) from a raw wait status, as Slurm prints `ExitCode=code:signal` (256 -> (1, 0))."""
    return (status >> 8) & 0xFF, status & 0x7F


def _exit(value: Any) -> tuple[int | None, int | None]:
    """Exit code and signal from any version's exit_code field (22.05: raw wait status; 24.11+: an object)."""
    if isinstance(value, int) and not isinstance(value, bool):  # <= v0.0.38: raw wait status
        return decode_wait_status(value)
    if isinstance(value, dict):
        if "status" not in value:  # v0.0.39 job info: a number object holding the raw wait status
            raw = _number(value)
            return decode_wait_status(raw) if raw is not None else (None, None)
        code = _number(value.get("return_code"))
        signal_obj = value.get("signal")
        signal = _number(signal_obj.get("id")) if isinstance(signal_obj, dict) else None
        if code is None and signal is None:
            return None, None
        return (code or 0), (signal or 0)
    return None, None


def _state(value: Any) -> tuple[str, tuple[str, ...]]:
    """Primary state and flags from a string (22.05, <= v0.0.39) or a list (v0.0.40+: 24.11 and 26.05)."""
    if isinstance(value, str):
        return value or "UNKNOWN", ()
    if isinstance(value, list) and value:
        base = None
        flags = []
        for item in value:
            if base is None and item in BASE_STATES:
                base = item
            else:
                flags.append(item)
        if base is None:  # a list with flags only (e.g. just "REQUEUED"): report the first as state
            return str(value[0]), tuple(flags[1:])
        return base, tuple(flags)
    return "UNKNOWN", ()


# ---------------------------------------------------------------- jobs


def _load(raw: bytes | str | dict) -> dict:
    if isinstance(raw, dict):
        return raw
    # json.loads of a big answer creates millions of containers; the cyclic GC would rescan them
    # repeatedly (6x slower on 10,000 jobs) although they hold no cycles, so pause it meanwhile
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ParseError(f"not JSON: {exc}") from None
    finally:
        if paused:
            gc.enable()
    if not isinstance(data, dict):
        raise ParseError("top level is not a JSON object")
    return data


def load_json(raw: bytes | str) -> dict:
    """A JSON object of Slurm's (the GC paused meanwhile, as for squeue); ParseError when it is not one."""
    return _load(raw)


# What changed between the releases the lab runs (real captures in tests/fixtures/slurm/<version>/):
# * 22.05 (openapi/v0.0.38): plain values. `job_state` a string, `exit_code` the raw wait status
#   (exit 1 = 256), `priority` an int (0 when held), `hold` always null, `standard_output` the
#   unexpanded pattern (%x, %j); `--json` ignores -j/-t and lists every job; during a slurmctld
#   outage it exits 0 with `errors: [{"source": "slurm_load_jobs", ...}]` and `jobs: []`.
# * 24.11 (data_parser v0.0.40-v0.0.42): counts and times are number objects {set, infinite,
#   number}; `job_state` a list (base state + flags such as REQUEUED); `exit_code` an object
#   {status: [...], return_code: {number}, signal: {id: {number}}}; `hold` true when held;
#   `standard_output` already expanded; `--json` applies squeue's default state filter (so the
#   CLI asks --states=all); an outage exits 1 ("Unable to contact slurm controller").
# * 26.05 (v0.0.42-v0.0.45, default v0.0.45): as 24.11, plus `stdout_expanded`/`stderr_expanded`
#   beside the pattern in `standard_output`, `submit_line`, `step_id`.
# Accounting (`sacct --json`): 22.05's exit codes are always SUCCESS/0; 24.11 marks an attempt
# ended by a requeue as state ["PENDING", "REQUEUED"], 26.05 as the state it ended in.
def _expedited(flags: Any) -> bool:
    """squeue's job flags (a list on v0.0.40+) name EXPEDITED_REQUEUE: the job asked for --requeue=expedite."""
    return isinstance(flags, list) and "EXPEDITED_REQUEUE" in flags


def parse_job(record: dict) -> SlurmJob:
    """One job object of any version; raises (KeyError, TypeError, ValueError) only when it has no usable id."""
    get = record.get
    job_id: Any = get("job_id")
    if not isinstance(job_id, int) or isinstance(job_id, bool):
        job_id = int(job_id)  # a numeric string is fine; anything else raises and the record is skipped
    state, flags = _state(get("job_state"))
    name = get("name") or ""
    user = get("user_name") or ""
    reason = _text(get("state_reason"))
    description = _text(get("state_description"))
    priority = _number(get("priority"))
    exit_code, exit_signal = _exit(get("exit_code"))
    batch_host = _text(get("batch_host"))
    cwd = _text(get("current_working_directory"))
    array_job_id = _number(get("array_job_id")) or None
    array_task_id = _number(get("array_task_id"))
    # squeue of a job that is no array says array_job_id 0 and array_task_id NO_VAL (a number
    # object unset on v0.0.39+); a heterogeneous component has het_job_id (the leader's id, also 0
    # when none) and het_job_offset (0 for the leader)
    het_job_id = _number(get("het_job_id")) or None
    het_job_offset = _number(get("het_job_offset")) if het_job_id else None
    nodes_raw = get("nodes")
    excluded_raw = get("excluded_nodes")
    nodes = expand_hostlist(nodes_raw) if isinstance(nodes_raw, str) else ()
    if state == "PENDING":
        # not placed yet: right after a requeue the job is ["PENDING", "COMPLETING"] for a few seconds
        # (seen on 26.05) and still lists the nodes cleaning up its PREVIOUS attempt, with the restart
        # count already raised; those nodes are not the new attempt's
        nodes = ()
    excluded = expand_hostlist(excluded_raw) if isinstance(excluded_raw, str) else ()

    waiting = state in states.HELD
    held = False
    if waiting:
        held = (
            get("hold") is True
            or (priority == 0 and state == "PENDING")
            or (reason is not None and "held" in reason.lower())
        )

    stdout_raw = _text(get("standard_output"))
    stderr_raw = _text(get("standard_error"))
    first_node = batch_host or (nodes[0] if nodes else None)
    stdout_expanded = _text(get("stdout_expanded"))

    def expand(pattern: str | None) -> str | None:
        return expand_filename(
            pattern,
            job_id=job_id,
            name=name,
            user=user,
            array_job_id=array_job_id,
            array_task_id=array_task_id,
            first_node=first_node,
            working_directory=cwd,
        )

    expanded_out = None if stdout_expanded else expand(stdout_raw)
    stdout = stdout_expanded or expanded_out
    if stderr_raw is None:  # no --error: stderr goes to the stdout file (25.x reports "")
        stderr = _text(get("stderr_expanded")) or stdout
    elif stderr_raw == stdout_raw and expanded_out is not None:  # the same pattern expands the same way
        stderr = _text(get("stderr_expanded")) or expanded_out
    else:
        stderr = _text(get("stderr_expanded")) or expand(stderr_raw)
    restart = get("restart_cnt")
    return SlurmJob(
        job_id=job_id,
        name=name,
        user=user,
        partition=get("partition") or "",
        state=state,
        state_flags=flags,
        state_reason=reason,
        state_description=description,
        requeue=get("requeue") is True,
        restart_count=_number(restart) or 0,
        comment=get("comment") or "",
        exit_code=exit_code,
        exit_signal=exit_signal,
        nodes=nodes,
        excluded_nodes=excluded,
        batch_host=batch_host,
        stdout_raw=stdout_raw,
        stderr_raw=stderr_raw,
        stdout=stdout,
        stderr=stderr,
        submit_time=_time(get("submit_time")),
        start_time=None if state == "PENDING" else _time(get("start_time")),
        # a PENDING job still COMPLETING (26.05, right after a requeue) reports its new attempt's projected end
        # (submit + an infinite limit: year 2163), not the end of anything
        end_time=_time(get("end_time"))
        if state in states.EXECUTION_STOPPED or ("COMPLETING" in flags and state != "PENDING")
        else None,
        held=held,
        hold_reason=reason if held else None,
        priority=priority,
        working_directory=cwd,
        array_job_id=array_job_id,
        array_task_id=array_task_id if array_job_id else None,
        array_task_string=_text(get("array_task_string")),
        cluster=_text(get("cluster")),
        tasks_per_node=task_layout(_number(get("tasks_per_node")), _number(get("tasks")), len(nodes)),
        het_job_id=het_job_id,
        het_job_offset=het_job_offset,
        dependency=_text(get("dependency")),
        expedited_requeue=_expedited(get("flags")),
        user_id=_id_number(get("user_id")),
        group_id=_id_number(get("group_id")),
    )


def _id_number(value: Any) -> int | None:
    """A uid/gid: a plain or Slurm number object within 0..2**32-2 (NO_VAL and negatives are no id)."""
    number = _number(value)
    return number if number is not None and 0 <= number < 0xFFFFFFFE else None


def task_layout(per_node: int | None, total: int | None, node_count: int) -> str | None:
    """SLURM_TASKS_PER_NODE for block distribution: --ntasks-per-node, else --ntasks spread over the nodes."""
    if node_count <= 0:
        return None
    if per_node:
        return f"{per_node}(x{node_count})" if node_count > 1 else str(per_node)
    if not total or total < node_count:
        return None
    quotient, remainder = divmod(total, node_count)
    parts = [f"{quotient + 1}(x{remainder})" if remainder > 1 else str(quotient + 1)] if remainder else []
    rest = node_count - remainder
    parts.append(f"{quotient}(x{rest})" if rest > 1 else str(quotient))
    return ",".join(parts)


def answer_meta(data: dict) -> tuple[str | None, str | None]:
    """(Slurm release, data_parser) from an answer's `meta`, in the shapes of every release."""
    return _meta(data)


def _meta(data: dict) -> tuple[str | None, str | None]:
    meta = data.get("meta")
    if not isinstance(meta, dict):
        return None, None
    slurm = meta.get("slurm") or meta.get("Slurm") or {}
    release = slurm.get("release") if isinstance(slurm, dict) else None
    plugin = meta.get("plugin") or {}
    plugins = meta.get("plugins") or {}
    parser = (plugin.get("data_parser") if isinstance(plugin, dict) else None) or (
        plugins.get("data_parser") if isinstance(plugins, dict) else None
    )
    if not parser and isinstance(plugin, dict):
        parser = plugin.get("type") or None  # 21.08/22.05: "openapi/v0.0.38"
    return release, parser


def parse_snapshot(raw: bytes | str | dict, *, taken_at: datetime | None = None, duration: float = 0.0) -> Snapshot:
    """All jobs of one `squeue --json` (or slurmrestd /jobs) answer; broken records become problems."""
    data = _load(raw)
    records = data.get("jobs")
    if not isinstance(records, list):
        raise ParseError("no `jobs` list in the answer")
    jobs: list[SlurmJob] = []
    problems: list[str] = []
    for index, record in enumerate(records):
        try:
            jobs.append(parse_job(record))
        except Exception as exc:  # one odd record must never cost the whole tick
            ident = record.get("job_id") if isinstance(record, dict) else None
            problems.append(f"job record #{index} (job_id={ident!r}) skipped: {type(exc).__name__}: {exc}")
    for error in data.get("errors") or ():
        problems.append(f"slurm reported: {error}")
    release, parser = _meta(data)
    return Snapshot(
        jobs=tuple(jobs),
        taken_at=taken_at or datetime.now(UTC),
        duration=duration,
        problems=tuple(problems),
        slurm_release=release,
        data_parser=parser,
    )


# The fields of a job record parse_job reads (a test checks this against its source): app.slurm.incremental
# decodes only these of each record.
JOB_FIELDS = (
    "job_id",
    "job_state",
    "name",
    "user_name",
    "user_id",
    "group_id",
    "state_reason",
    "state_description",
    "priority",
    "exit_code",
    "batch_host",
    "current_working_directory",
    "array_job_id",
    "array_task_id",
    "array_task_string",
    "het_job_id",
    "het_job_offset",
    "nodes",
    "excluded_nodes",
    "hold",
    "dependency",  # singleton_dependency finds the held twin by it
    "flags",  # EXPEDITED_REQUEUE (25.11+)
    "standard_output",
    "standard_error",
    "stdout_expanded",
    "stderr_expanded",
    "restart_cnt",
    "partition",
    "requeue",
    "comment",
    "submit_time",
    "start_time",
    "end_time",
    "cluster",
    "tasks_per_node",
    "tasks",
)


def parse_jobs(raw: bytes | str | dict) -> list[SlurmJob]:
    """The parsable jobs of one squeue/slurmrestd answer (see parse_snapshot for the problems)."""
    return list(parse_snapshot(raw).jobs)


# ---------------------------------------------------------------- partitions


def parse_partition_nodes(raw: bytes | str | dict, partition: str) -> tuple[str, ...] | None:
    """The nodes of one partition from `sinfo --json` (22.05) or slurmrestd's nodes; None when no node is in it.

    22.05's `sinfo --json` ignores `-p` and lists every node with the partitions it belongs to, so
    the partition is picked here. 24.11 and 26.05 (data_parser v0.0.40-v0.0.45) answer in another
    shape: a top-level `sinfo` list with one entry per group of like nodes, each naming its
    `partition.name` and its `nodes.nodes` (node names); a partition may span several entries.
    Raises ParseError when the answer has neither shape; the caller then falls back to plain output.
    """
    data = _load(raw)
    wanted = partition.strip()
    entries = data.get("sinfo")
    if isinstance(entries, list) and entries:
        return _sinfo_entries_nodes(entries, wanted)
    nodes = data.get("nodes")
    if not isinstance(nodes, list):
        raise ParseError("no `nodes` list with node partitions")
    found: set[str] = set()
    for node in nodes:
        if not isinstance(node, dict):
            continue
        name, partitions = node.get("name"), node.get("partitions")
        if isinstance(name, str) and name.strip() and isinstance(partitions, list) and wanted in partitions:
            found.add(name.strip())
    return tuple(sorted(found)) or None


def _sinfo_entries_nodes(entries: list, wanted: str) -> tuple[str, ...] | None:
    """Nodes of one partition from the `sinfo` list of 23.x+ answers (see parse_partition_nodes)."""
    found: set[str] = set()
    understood = False
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        part, nodes = entry.get("partition"), entry.get("nodes")
        name = part.get("name") if isinstance(part, dict) else None
        names = nodes.get("nodes") if isinstance(nodes, dict) else None
        if not isinstance(name, str) or not isinstance(names, list):
            continue
        understood = True
        if name.strip() == wanted:
            found.update(host for item in names if isinstance(item, str) for host in expand_hostlist(item.strip()))
    if not understood:
        raise ParseError("`sinfo` entries without partition.name and nodes.nodes")
    return tuple(sorted(found)) or None


def parse_sinfo_node_names(text: str) -> tuple[str, ...] | None:
    """Node names from `sinfo -h -N -o %N` (one per line; a node in several partitions repeats); None when empty.

    The one place we read Slurm's plain output: a node name has no spaces or separators to misread.
    """
    names = {host for line in text.splitlines() for host in expand_hostlist(line.strip())}
    return tuple(sorted(names)) or None


# ---------------------------------------------------------------- accounting


def _local_time(text: str) -> datetime | None:
    """sacct's `2026-11-30T03:43:03` (the machine's local time) as aware UTC."""
    if not text or text in _NONE_WORDS:
        return None
    try:
        return datetime.fromisoformat(text).astimezone(UTC)
    except ValueError:
        return None


def _pipe_exit(text: str) -> tuple[int | None, int | None]:
    code, _, signal = text.partition(":")
    try:
        return int(code), int(signal or 0)
    except ValueError:
        return None, None


def parse_sacct_pipe(text: str, *, source: str = "sacct") -> list[AccountingRecord]:
    """Attempts from `sacct -P` rows (header line first; Comment may contain `|`, so it must be last).

    source="jobcomp" (`sacct -c`): a PENDING line is jobcomp's record of a requeue and becomes
    REQUEUED, merged into the attempt with the same start when that attempt already has a line.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    header = lines[0].split("|")
    width = len(header)
    column = {name.lower(): index for index, name in enumerate(header)}
    id_col = column.get("jobidraw", column.get("jobid"))
    if id_col is None or "state" not in column:
        raise ParseError(f"sacct header lacks JobID/State: {lines[0]!r}")

    def cell(row: list[str], name: str) -> str:
        index = column.get(name)
        return row[index] if index is not None and index < len(row) else ""

    records: list[AccountingRecord] = []
    attempts: dict[int, int] = {}
    last_start: dict[int, datetime | None] = {}
    for line in lines[1:]:
        row = line.split("|", width - 1)
        ident = row[id_col].split(".", 1)[0].split("_", 1)[0]
        if "." in row[id_col]:
            continue  # a step row (.batch/.extern): not an attempt
        try:
            job_id = int(ident)
        except ValueError:
            continue
        state = (cell(row, "state").split(" ", 1)[0] or "UNKNOWN").rstrip("+")
        start = _local_time(cell(row, "start"))
        if source == "jobcomp":
            # jobcomp writes a second, PENDING line with the same start when an ended attempt is
            # requeued (requeuehold on FAILED): that is the same attempt, not a new one
            if state == "PENDING":
                state = "REQUEUED"
            if job_id in last_start and last_start[job_id] == start and start is not None:
                continue
            last_start[job_id] = start
        attempt = attempts.get(job_id, 0)
        attempts[job_id] = attempt + 1
        code, signal = _pipe_exit(cell(row, "exitcode"))
        records.append(
            AccountingRecord(
                job_id=job_id,
                attempt=attempt,
                state=state,
                exit_code=code,
                exit_signal=signal,
                nodes=_accounting_nodes(cell(row, "nodelist")),
                start=start,
                end=_local_time(cell(row, "end")),
                submit=_local_time(cell(row, "submit")),
                reason=_text(cell(row, "reason")),
                comment=cell(row, "comment") or None,
                source=source,
            )
        )
    return records


def parse_sacct_json(raw: bytes | str | dict) -> list[AccountingRecord]:
    """Every attempt in a `sacct --json` / slurmdbd answer (dbv0.0.38 to v0.0.44).

    On 22.05 (openapi/dbv0.0.38) exit codes are always reported as SUCCESS/0, so they become None.
    """
    data = _load(raw)
    _, parser = _meta(data)
    exit_codes_broken = bool(parser and "0.0.38" in parser)
    records: list[AccountingRecord] = []
    attempts: dict[int, int] = {}
    for record in data.get("jobs") or ():
        try:
            job_id = int(record["job_id"])
            state_obj = record.get("state") or {}
            state, flags = _state(state_obj.get("current"))
            # 24.11 (v0.0.40-v0.0.42) records an attempt ended by a requeue as ["PENDING", "REQUEUED"];
            # 22.05 says "REQUEUED", 26.05 the state it ended in (["FAILED"]): all mean "this attempt is over"
            if state == "PENDING" and "REQUEUED" in flags:
                state = "REQUEUED"
            times = record.get("time") or {}
            if exit_codes_broken:
                code, signal = None, None
            else:
                code, signal = _accounting_exit(record.get("exit_code"))
            comment = record.get("comment")
            comment = comment.get("job") if isinstance(comment, dict) else comment
        except Exception:
            continue
        attempt = attempts.get(job_id, 0)
        attempts[job_id] = attempt + 1
        records.append(
            AccountingRecord(
                job_id=job_id,
                attempt=attempt,
                state=state,
                exit_code=code,
                exit_signal=signal,
                nodes=_accounting_nodes(record.get("nodes")),
                start=_time(times.get("start")),
                end=_time(times.get("end")),
                submit=_time(times.get("submission")),
                reason=_text(state_obj.get("reason")),
                comment=comment or None,
                source="sacct-json",
            )
        )
    return records


def _accounting_exit(value: Any) -> tuple[int | None, int | None]:
    if isinstance(value, dict) and not isinstance(value.get("return_code"), dict) and "status" in value:
        code = value.get("return_code")  # v0.0.39: {"status": "SUCCESS", "return_code": 0}
        signal = value.get("signal")
        signal_id = signal.get("signal_id") if isinstance(signal, dict) else None
        return (code if isinstance(code, int) else None), (signal_id if isinstance(signal_id, int) else 0)
    return _exit(value)
