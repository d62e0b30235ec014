"""Run an ASGI app on a real uvicorn server on loopback, in the test's event loop."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import uvicorn


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.asynccontextmanager
async def serve(app: Any, port: int | None = None) -> AsyncIterator[str]:
    """Yield the base URL while uvicorn serves `app`; stops it (our own task) afterwards."""
    port = port or free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", lifespan="off", timeout_graceful_shutdown=2, ws="none"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(), name=f"uvicorn-{port}")
    for _ in range(200):
        if server.started:
            break
        if task.done():
            task.result()
        await asyncio.sleep(0.025)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(task, timeout=10)
