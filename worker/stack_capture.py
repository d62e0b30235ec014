"""Stack capture before Recovery ends a hung RUNNING attempt: the node probe on every node, bounded, fail-open.

One `srun --jobid=<id> --overlap --nodes=<n> --ntasks-per-node=1 <python> -c <probe>` (app/evidence/stack_probe.py)
under a hard total timeout (RECOVERY_STACK_CAPTURE_TIMEOUT, at most 60 s): CAPTURED when every node answered,
PARTIAL when some did, TIMEOUT or FAILED when none did. Nothing here raises: a failed capture is a recorded status.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from app.domain.detection import stacks
from app.infra.config import Settings

PROBE_SOURCE = (Path(__file__).resolve().parents[1] / "app" / "evidence" / "stack_probe.py").read_text()
MARK = "RECOVERY-STACK-PROBE "
MAX_TIMEOUT = 60.0
TEXT_CAP = 16_000  # bytes of one command's output kept (py-spy per process, nvidia-smi per node)
PER_NODE_MAX = 16  # allocations up to this size get one srun per node (see capture)
GRACE = 1.5  # seconds srun gets to end the step after SIGTERM, inside the bound
TOTAL_CAP = 400_000  # bytes of one capture's stored reports

CAPTURED, PARTIAL, FAILED, TIMEOUT = "CAPTURED", "PARTIAL", "FAILED", "TIMEOUT"


@dataclass
class Capture:
    """One capture's outcome, as stored (app/evidence stack_captures) and judged."""

    status: str
    command: str
    duration_ms: float
    nodes_asked: tuple[str, ...]
    reports: list[dict[str, Any]] = field(default_factory=list)
    ranks: list[stacks.RankStack] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    bytes: int = 0

    @property
    def nodes_answered(self) -> tuple[str, ...]:
        return tuple(str(r.get("node") or "") for r in self.reports)


def bound(settings: Settings) -> float:
    """The capture's total time bound: the setting, never above 60 s nor below 1 s."""
    return max(1.0, min(MAX_TIMEOUT, settings.stack_capture_timeout))


def srun_path(settings: Settings) -> str:
    """srun from the configured Slurm bin dir, else the PATH's."""
    return os.path.join(settings.slurm_bin_dir, "srun") if settings.slurm_bin_dir else "srun"


def argv_of(
    settings: Settings, job_id: int | str, nodes: int, srun: str | None = None, nodelist: str | None = None
) -> list[str]:
    """One srun command (the probe's per-process budget leaves time for srun's own start and exit)."""
    inner = max(1.0, bound(settings) - 4.0)
    return [
        srun or srun_path(settings),
        f"--jobid={job_id}",
        "--overlap",
        *([f"--nodelist={nodelist}"] if nodelist else []),
        f"--nodes={nodes}",
        f"--ntasks={nodes}",
        "--ntasks-per-node=1",
        "--quiet",
        "--kill-on-bad-exit=0",
        "--time=1",  # the step never outlives a minute, whatever happens to us
        settings.stack_capture_python or "python3",
        "-c",
        PROBE_SOURCE,
        str(job_id),
        settings.stack_capture_pyspy,
        str(TEXT_CAP),
        f"{inner:.1f}",
    ]


def command_text(job_id: int | str, nodes: int, settings: Settings) -> str:
    """The command as recorded (without the probe's source)."""
    python = settings.stack_capture_python or "python3"
    return f"srun --jobid={job_id} --overlap --nodes={nodes} --ntasks-per-node=1 {python} -c <stack probe>"


async def capture(
    settings: Settings,
    *,
    job_id: int | str,
    nodes: tuple[str, ...],
    srun: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Capture:
    """Run the probe on every node of the allocation within the bound; never raises. `srun` and `env`: the
    scheduler adapter's (its Slurm binaries and SLURM_CONF), else from the settings.

    Up to PER_NODE_MAX nodes get one srun each, in parallel: a node whose slurmd does not answer then costs only
    its own report (PARTIAL), where one srun for all would wait for it and bring back nothing."""
    if env is None and settings.slurm_conf:
        env = {**os.environ, "SLURM_CONF": settings.slurm_conf}
    if not 1 < len(nodes) <= PER_NODE_MAX:
        return await _capture_once(settings, job_id, nodes, srun, env, nodelist=None)
    started = time.monotonic()
    parts = await asyncio.gather(
        *(_capture_once(settings, job_id, (node,), srun, env, nodelist=node) for node in nodes)
    )
    reports = [r for part in parts for r in part.reports]
    answered = {str(r.get("node") or "") for r in reports}
    if len(answered) >= len(set(nodes)):
        status = CAPTURED
    elif reports:
        status = PARTIAL
    else:
        status = TIMEOUT if any(part.status == TIMEOUT for part in parts) else FAILED
    return Capture(
        status,
        f"{command_text(job_id, 1, settings).replace('--nodes=1', '--nodelist=<node> --nodes=1')} (one per node)",
        _ms(started),
        nodes,
        reports=reports,
        ranks=[rank for part in parts for rank in part.ranks],
        problems=[problem for part in parts for problem in part.problems],
        bytes=sum(part.bytes for part in parts),
    )


async def _capture_once(
    settings: Settings,
    job_id: int | str,
    nodes: tuple[str, ...],
    srun: str | None,
    env: Mapping[str, str] | None,
    *,
    nodelist: str | None,
) -> Capture:
    count = max(1, len(nodes))
    text = command_text(job_id, count, settings)
    started = time.monotonic()
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv_of(settings, job_id, count, srun, nodelist),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
    except OSError as exc:
        return Capture(FAILED, text, _ms(started), nodes, problems=[f"cannot start srun: {exc}"])
    status: str | None = None
    try:
        out, err = await asyncio.wait_for(proc.communicate(), bound(settings) - GRACE)
    except TimeoutError:
        out, err = await _stop(proc)
        status = TIMEOUT
    except BaseException:
        _signal(proc, signal.SIGKILL)
        await proc.communicate()
        raise
    result = read_output(out.decode("utf-8", "replace"), text, _ms(started), nodes)
    stderr = err.decode("utf-8", "replace").strip()
    outcome = result.status
    if status == TIMEOUT:
        result.problems.insert(0, f"no answer within {bound(settings):g} s from {_missing(result)}")
        outcome = PARTIAL if result.reports else TIMEOUT
    elif proc.returncode != 0 and stderr:
        result.problems.append(f"srun exit {proc.returncode}: {stderr[-500:]}")
    if status != TIMEOUT and not result.reports:
        outcome = FAILED
        if proc.returncode == 0:
            said = f": {(stderr or out.decode('utf-8', 'replace'))[-500:]}" if stderr or out else ""
            result.problems.append(f"the probe printed no report{said}")
    return replace(result, status=outcome, bytes=len(out) + len(err))


def read_output(out: str, command: str, duration_ms: float, nodes: tuple[str, ...]) -> Capture:
    """A Capture from the probe's marked lines (anything else on stdout is ignored: it comes from the node)."""
    reports: list[dict[str, Any]] = []
    for line in out.splitlines():
        at = line.find(MARK)
        if at < 0:
            continue
        try:
            report = json.loads(line[at + len(MARK) :])
        except ValueError:
            continue
        if isinstance(report, dict):
            reports.append(report)
    problems: list[str] = []
    ranks: list[stacks.RankStack] = []
    for report in reports:
        problems.extend(str(p)[:500] for p in report.get("problems") or [] if isinstance(p, str))
        ranks.extend(
            rank_stack(str(report.get("node") or ""), process)
            for process in report.get("processes") or []
            if isinstance(process, dict)
        )
    answered = {str(r.get("node") or "") for r in reports}
    status = CAPTURED
    if nodes and len(answered) < len(set(nodes)):
        problems.append(f"no report from {', '.join(sorted(set(nodes) - answered)) or 'some node'}")
        status = PARTIAL if reports else FAILED
    result = Capture(status, command, duration_ms, nodes, reports=reports, ranks=ranks, problems=problems)
    _shrink(result)
    return result


def rank_stack(node: str, process: dict[str, Any]) -> stacks.RankStack:
    """One process's report as the judgment reads it."""
    raw_pid = process.get("pid")
    pid = raw_pid if isinstance(raw_pid, int) else 0  # the report comes from the job's node: nothing is trusted
    found = process.get("pyspy")
    pyspy: dict[str, Any] = found if isinstance(found, dict) else {}
    threads = stacks.parse_pyspy(str(pyspy.get("text") or ""))
    rank = process.get("rank")
    flight_seq = None
    recorded = process.get("flight")
    flight: dict[str, Any] = recorded if isinstance(recorded, dict) else {}
    if isinstance(flight, dict) and flight.get("b64"):
        try:
            record, why = stacks.read_flight_record(base64.b64decode(str(flight["b64"]), validate=True))
        except ValueError as exc:
            record, why = None, f"not read: {exc}"
        if record is not None:
            flight_seq, op = stacks.flight_position(record)
            flight["position"] = {"seq": flight_seq, "op": op}
        else:
            flight["error"] = why
        flight.pop("b64", None)  # the dump's bytes are not kept; what was read from them is
    listed = process.get("threads")
    threads_seen: list[Any] = listed if isinstance(listed, list) else []
    task_states = tuple(str(t.get("state") or "")[:2] for t in threads_seen if isinstance(t, dict))
    return stacks.RankStack(
        rank=rank if isinstance(rank, int) else None,
        node=node,
        pid=pid,
        state=str(process.get("state") or ""),
        wchan=str(process.get("wchan") or ""),
        frames=stacks.main_frames(threads, pid),
        threads=len(threads),
        error=str(pyspy.get("error") or process.get("error") or "")[:300] or None,
        thread_states=task_states,
        flight_seq=flight_seq,
    )


def _shrink(result: Capture) -> None:
    """Keep the stored reports under TOTAL_CAP: drop raw py-spy/nvidia-smi text (largest first) if needed."""
    size = len(json.dumps(result.reports))
    if size <= TOTAL_CAP:
        return
    for report in result.reports:
        smi = report.get("nvidia_smi")
        if isinstance(smi, dict):
            smi.pop("text", None)
        for process in report.get("processes") or []:
            if isinstance(process, dict) and isinstance(process.get("pyspy"), dict):
                process["pyspy"].pop("text", None)
                process["pyspy"]["dropped"] = "over the capture's size bound (the parsed frames are kept)"
    result.problems.append(f"raw outputs dropped: {size} bytes over the {TOTAL_CAP} bound")


def _missing(result: Capture) -> str:
    missing = sorted(set(result.nodes_asked) - set(result.nodes_answered))
    return ", ".join(missing) if missing else "some node"


def _ms(started: float) -> float:
    return round((time.monotonic() - started) * 1000, 1)


async def _stop(proc: asyncio.subprocess.Process) -> tuple[bytes, bytes]:
    """SIGTERM srun (it ends the step on the nodes), SIGKILL it if it has not exited within GRACE."""
    _signal(proc, signal.SIGTERM)
    try:
        return await asyncio.wait_for(proc.communicate(), GRACE)
    except TimeoutError:
        _signal(proc, signal.SIGKILL)
        return await proc.communicate()


def _signal(proc: asyncio.subprocess.Process, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
