"""Node probe run inside a hung job's allocation (one task per node): report every job process's stack and state.

Stdlib only, and never imported by the service for its own use: worker/stack_capture.py sends this file's text as
`python -c <source> <job id> <py-spy> <byte cap> <seconds>` through `srun --jobid=<id> --overlap`. It prints ONE
line, `RECOVERY-STACK-PROBE <json>`: for each process of the job on this node (found by SLURM_JOB_ID in its
/proc environment; the probe's own step is skipped) its rank (RANK, else SLURM_PROCID), state (R/S/D/T) and
wait channel per thread, `py-spy dump --nonblocking` (never stops the process, so it also reads a stopped or
D-state one), `nvidia-smi` where the node has it, and the NCCL flight-recorder dump where the process's
environment enabled it (TORCH_NCCL_TRACE_BUFFER_SIZE; the file TORCH_NCCL_DEBUG_INFO_TEMP_FILE<rank>), base64.
Everything is bounded: output bytes, threads, processes, and each command's time.
"""

import base64
import json
import os
import shutil
import stat
import subprocess
import sys
import time

MARK = "RECOVERY-STACK-PROBE "
MAX_PROCESSES = 32
MAX_THREADS = 64
FLIGHT_DEFAULT = "/tmp/nccl_trace_rank_"


def _read(path, limit=65536):
    with open(path, "rb") as handle:
        return handle.read(limit)


def _environ(pid):
    data = _read(f"/proc/{pid}/environ", 1 << 20)
    pairs = (item.split(b"=", 1) for item in data.split(b"\0") if b"=" in item)
    return {k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, v in pairs}


def _state(pid):
    stat = _read(f"/proc/{pid}/stat").decode("utf-8", "replace")
    return stat[stat.rfind(")") + 2 :].split(" ", 1)[0]


def _wchan(path):
    try:
        value = _read(path, 256).decode("utf-8", "replace").strip()
    except OSError:
        return ""
    return "" if value in {"0", ""} else value


def _threads(pid):
    out = []
    try:
        tids = sorted(os.listdir(f"/proc/{pid}/task"), key=int)[:MAX_THREADS]
    except OSError:
        return out
    for tid in tids:
        try:
            state = _state(f"{pid}/task/{tid}")
            out.append({"tid": int(tid), "state": state, "wchan": _wchan(f"/proc/{pid}/task/{tid}/wchan")})
        except OSError:
            continue
    return out


def _run(argv, seconds, cap):
    started = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, timeout=max(0.5, seconds), check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {seconds:.1f} s", "ms": int((time.monotonic() - started) * 1000)}
    except OSError as exc:
        return {"error": f"cannot run {argv[0]}: {exc}", "ms": 0}
    text = (done.stdout or b"").decode("utf-8", "replace")[:cap]
    result = {"text": text, "rc": done.returncode, "ms": int((time.monotonic() - started) * 1000), "bytes": len(text)}
    if done.returncode != 0:
        result["error"] = (done.stderr or b"").decode("utf-8", "replace").strip()[-400:] or f"exit {done.returncode}"
    return result


def _job_processes(job_id, own_step, node):
    found, refused, others = [], 0, 0
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in {1, os.getpid()}:
            continue
        try:
            env = _environ(name)
        except PermissionError:
            try:
                mine = os.stat(f"/proc/{name}").st_uid == os.getuid()
            except OSError:
                continue
            refused, others = (refused + 1, others) if mine else (refused, others + 1)
            continue
        except OSError:
            continue
        if env.get("SLURM_JOB_ID") != job_id or env.get("SLURM_STEP_ID") == own_step:
            continue
        if node and env.get("SLURMD_NODENAME", node) != node:
            continue
        found.append((int(name), env))
    return found, refused, others


def probe(job_id, pyspy, cap, seconds):
    """This node's report (see the module docstring)."""
    deadline = time.monotonic() + seconds
    node = os.environ.get("SLURMD_NODENAME") or os.uname().nodename
    own_step = os.environ.get("SLURM_STEP_ID")
    report = {"node": node, "processes": [], "problems": []}
    found, refused, others = _job_processes(job_id, own_step, node)
    if refused:
        report["problems"].append(f"{refused} process(es) on {node} could not be read (permission denied)")
    ranked = [(pid, env) for pid, env in found if "RANK" in env]
    chosen = ranked or [(pid, env) for pid, env in found if "python" in _cmdline(pid)]
    if not chosen:
        unread = f" ({others} process(es) of other users could not be read: permission denied)" if others else ""
        report["problems"].append(f"no process of job {job_id} found on {node} as uid {os.getuid()}{unread}")
    for pid, env in sorted(chosen)[:MAX_PROCESSES]:
        rank = env.get("RANK", env.get("SLURM_PROCID"))
        entry = {"pid": pid, "rank": int(rank) if rank and rank.isdigit() else None, "cmdline": _cmdline(pid)[:300]}
        try:
            entry["state"] = _state(pid)
        except OSError as exc:
            entry["state"], entry["error"] = "", f"gone: {exc}"
            report["processes"].append(entry)
            continue
        entry["wchan"] = _wchan(f"/proc/{pid}/wchan")
        entry["threads"] = _threads(pid)
        left = deadline - time.monotonic()
        if pyspy and left > 0.5:
            entry["pyspy"] = _run([pyspy, "dump", "--nonblocking", "--pid", str(pid)], min(left, 10.0), cap)
        elif pyspy:
            entry["pyspy"] = {"error": "no time left within the capture's bound", "ms": 0}
        else:
            entry["pyspy"] = {"error": "py-spy not found on the node", "ms": 0}
        size = env.get("TORCH_NCCL_TRACE_BUFFER_SIZE", "0")
        if size.isdigit() and int(size) > 0 and entry["rank"] is not None:
            try:
                owner = os.stat(f"/proc/{pid}").st_uid
            except OSError:
                owner = -1  # the process is gone: no file can be its own
            prefix = env.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", FLIGHT_DEFAULT)
            entry["flight"] = _flight(prefix, entry["rank"], cap, owner)
        report["processes"].append(entry)
    smi = shutil.which("nvidia-smi")
    left = deadline - time.monotonic()
    if smi and left > 0.5:
        report["nvidia_smi"] = _run([smi], min(left, 5.0), cap)
    return report


def _cmdline(pid):
    try:
        return _read(f"/proc/{pid}/cmdline", 4096).replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


def _flight(prefix, rank, cap, owner):
    """The rank's flight-recorder dump, opened as its own user could: no symlink, a regular file it owns, bounded."""
    path = f"{prefix}{rank}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        return {"path": path, "error": f"not there: {exc.strerror or exc}"}
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != owner:
            return {"path": path, "error": "refused: not a regular file owned by the job's user"}
        data = handle.read(cap * 4)
    return {"path": path, "b64": base64.b64encode(data).decode("ascii"), "bytes": len(data)}


def main(argv):
    """Print this node's report as one marked JSON line."""
    job_id, pyspy, cap, seconds = argv[1], argv[2], int(argv[3]), float(argv[4])
    if pyspy and os.sep not in pyspy:
        pyspy = shutil.which(pyspy) or ""
    elif pyspy and not os.access(pyspy, os.X_OK):
        pyspy = ""
    try:
        report = probe(job_id, pyspy, cap, seconds)
    except Exception as exc:  # noqa: BLE001 - the probe reports, it never fails silently
        report = {"node": os.environ.get("SLURMD_NODENAME", ""), "processes": [], "problems": [f"probe failed: {exc}"]}
    sys.stdout.write(MARK + json.dumps(report, separators=(",", ":")) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
