"""Container health check: the API's /healthz, or for worker and watchdog containers their /metrics listener.

Exit 0 when either answers 200; the image runs it as its HEALTHCHECK (docs/deploy/Dockerfile).
"""

import os
import sys
import urllib.request

for variable, path in (("RECOVERY_BIND", "/healthz"), ("RECOVERY_METRICS_BIND", "/metrics")):
    bind = os.environ.get(variable, "")
    if ":" not in bind:
        continue
    port = bind.rsplit(":", 1)[1]
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=4) as response:
            if response.status == 200:
                sys.exit(0)
    except OSError:
        pass
sys.exit(1)
