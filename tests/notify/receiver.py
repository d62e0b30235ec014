"""A real HTTP receiver for notification tests: answers 500 while a flag file exists, then records and answers 200.

Usage: python receiver.py FLAG_FILE RECEIVED_JSONL FAILURES_LOG; prints `listening <port>` once bound.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FLAG, RECEIVED, FAILURES = sys.argv[1], sys.argv[2], sys.argv[3]
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        with LOCK:
            if os.path.exists(FLAG):
                with open(FAILURES, "a") as out:
                    out.write("500\n")
                self.send_response(500)
            else:
                with open(RECEIVED, "a") as out:
                    out.write(json.dumps(json.loads(body)) + "\n")
                self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:  # quiet
        return


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(f"listening {server.server_address[1]}", flush=True)
server.serve_forever()
