"""`recovery status` / `recovery watch` against a hostile or broken server (issue 22): a tiny real HTTP server on
loopback answers junk, trickles bytes or sends terminal escape sequences, and the real CLI runs as a subprocess.
Every answer it cannot use is a clear message with exit 2 (no traceback), no request outlives --timeout, and no
control character reaches the terminal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from app.domain.edge.terminal import terminal_text

ROOT = Path(__file__).resolve().parents[2]
ESCAPES = "\x1b]0;owned\x07\x1b[2J\x1b[31m\x9b1m\x07\r"


def _attempt(index: Any, **extra: Any) -> dict[str, Any]:
    return {
        "jobId": "500",
        "attemptIndex": index,
        "cluster": "test",
        "state": "FAILED",
        "story": {"sentence": f"Attempt {index} crashed.", "outcome": "stopped"},
        **extra,
    }


# job id -> (content type, body) of a 200 answer
JUNK: dict[str, tuple[str, bytes]] = {
    "101": ("text/html", b"<html>502 Bad Gateway</html>"),
    "102": ("application/json", b"[1, 2, 3]"),
    "103": ("application/json", json.dumps({"attempts": [], "nextPageToken": None}).encode()),
    "104": ("application/json", json.dumps({"attempts": [{"state": "FAILED"}]}).encode()),
    "105": ("application/json", json.dumps({"attempts": [_attempt(0), _attempt("1")]}).encode()),
    "106": ("application/json", json.dumps({"attempts": "all of them"}).encode()),
    "107": ("application/json", json.dumps({"attempts": [_attempt(0, story="crashed")]}).encode()),
    "108": ("application/json", b'{"attempts": [' * 5000),
}
ESCAPED = json.dumps(
    {
        "attempts": [
            _attempt(
                0,
                cluster=f"test{ESCAPES}",
                workflowId=f"wf{ESCAPES}-evil",
                story={"sentence": f"Attempt 0 {ESCAPES}crashed.", "outcome": "stopped"},
            )
        ],
        "nextPageToken": None,
    }
).encode()


class _Hostile(BaseHTTPRequestHandler):
    """Answers by job id: junk, escape sequences, or a body (or headers) trickled one byte every 0.3 s."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        job = self.path.split("?")[0].rsplit("/", 1)[-1]
        try:
            if job in JUNK:
                kind, body = JUNK[job]
                self._send(200, kind, body)
            elif job == "200":
                self._send(200, "application/json", ESCAPED)
            elif job == "201":  # escape sequences in an error answer
                self._send(500, "text/plain", f"upstream {ESCAPES} failed".encode())
            elif job == "300":  # headers at once, then the body one byte at a time (each read well within 15 s)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "10000")
                self.end_headers()
                self._trickle(b" " * 10000)
            elif job == "301":  # the status line and headers themselves, one byte at a time
                self._trickle(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Slow: " + b"a" * 10000)
            else:
                self._send(404, "application/json", b'{"error": {"code": "NOT_FOUND", "message": "no"}}')
        except OSError:
            pass  # the client gave up: that is the point

    def _send(self, status: int, kind: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _trickle(self, data: bytes) -> None:
        for n in range(len(data)):
            self.wfile.write(data[n : n + 1])
            self.wfile.flush()
            time.sleep(0.3)


@pytest.fixture(scope="module")
def hostile_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _recovery(tmp_path: Path, *args: str, limit: float = 30) -> tuple[int, str, float]:
    """Run the real CLI; (exit code, stdout+stderr, seconds it took). A hang past `limit` fails the test."""
    env = {**os.environ, "RECOVERY_DATA_DIR": str(tmp_path)}
    env.pop("RECOVERY_ACCESS_TOKEN", None)
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "app.cli", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            timeout=limit,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"`recovery {' '.join(args)}` still ran after {limit} s")
    output = (done.stdout + done.stderr).decode("utf-8", "replace")
    return done.returncode, output, time.monotonic() - started


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        ("101", "not JSON"),
        ("102", "without a list of attempts"),
        ("103", "no attempts"),
        ("104", "without a whole-number attemptIndex"),
        ("105", "without a whole-number attemptIndex"),
        ("106", "without a list of attempts"),
        ("107", "story is not a JSON object"),
        ("108", "not JSON"),
    ],
)
def test_status_refuses_an_answer_it_cannot_use_with_exit_2_and_no_traceback(
    hostile_server: str, tmp_path: Path, job: str, expected: str
) -> None:
    code, output, _ = _recovery(tmp_path, "status", job, "--server", hostile_server)
    assert code == 2, output
    assert expected in output and "Traceback" not in output, output
    assert output.startswith("recovery status: "), output


def test_watch_refuses_junk_the_same_way(hostile_server: str, tmp_path: Path) -> None:
    code, output, _ = _recovery(tmp_path, "watch", "105", "--server", hostile_server)
    assert code == 2 and "Traceback" not in output and "attemptIndex" in output, output


@pytest.mark.parametrize(
    ("command", "job", "timeout"),
    [("status", "300", None), ("status", "301", "2"), ("watch", "300", "2"), ("watch", "301", "2")],
)
def test_a_trickling_server_cannot_hold_the_cli_past_its_timeout(
    hostile_server: str, tmp_path: Path, command: str, job: str, timeout: str | None
) -> None:
    # A byte every 0.3 s keeps every single read within httpx's per-read timeout: only a total deadline ends it.
    # Without --timeout the default (15 s) holds.
    options = ["--timeout", timeout] if timeout else []
    code, output, took = _recovery(tmp_path, command, job, "--server", hostile_server, *options, limit=40)
    assert code == 3 and f"within {timeout or 15} s" in output and "Traceback" not in output, output
    assert took < float(timeout or 15) + 8, took  # the deadline plus the interpreter's start, on a busy machine


def test_escape_sequences_from_the_server_never_reach_the_terminal(hostile_server: str, tmp_path: Path) -> None:
    code, output, _ = _recovery(tmp_path, "status", "200", "--server", hostile_server)
    assert code == 0, output
    assert not any(ch in output for ch in "\x1b\x07\x9b\r"), repr(output)
    assert "workflow wf]0;owned[2J[31m1m-evil" in output and "Attempt 0 ]0;owned" in output, output
    code, output, _ = _recovery(tmp_path, "status", "201", "--server", hostile_server)
    assert code == 3 and "answered 500" in output and "\x1b" not in output and "\x07" not in output, repr(output)
    # --json escapes them (JSON's \\u001b), so the raw bytes never appear there either
    code, output, _ = _recovery(tmp_path, "status", "200", "--json", "--server", hostile_server)
    assert code == 0 and "\x1b" not in output and "\\u001b" in output, repr(output)


def test_watch_exits_after_the_last_sentence_of_an_ended_job_unless_follow(hostile_server: str, tmp_path: Path) -> None:
    # 200's newest attempt is "stopped": the job has ended, so watch prints its story and exits without
    # opening the live connection (this server has no WebSocket; --follow would try and fail).
    code, output, _ = _recovery(tmp_path, "watch", "200", "--server", hostile_server)
    assert code == 0 and "Attempt 0 ]0;owned" in output and "the job has ended" in output, output
    code, output, _ = _recovery(tmp_path, "watch", "200", "--follow", "--server", hostile_server, "--timeout", "2")
    assert code == 3 and ("cannot follow" in output or "live connection" in output), output


def test_terminal_text_removes_c0_c1_del_and_bidi_controls() -> None:
    text = "a\x1b[31mb\x9bc\x7fd\x00e\u202ef\u2066g\th\ni\u00e9\u4e2d"
    assert terminal_text(text) == "a[31mbcdefghi\u00e9\u4e2d"
