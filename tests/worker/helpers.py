"""Helpers of the collector and watcher tests: a controllable clock, a collector on the test database, log lines."""

from __future__ import annotations

import dataclasses
import datetime as dt

from app.infra.context import AppContext
from worker.collector import Collector

CRASH = "RuntimeError: CUDA error: an illegal memory access was encountered\n"


ITERATION = (
    " iteration      100/  500000 | consumed samples: 12800 | elapsed time per iteration "
    "(ms): 1234.5 | lm loss: 2.3E+00 |\n"
)


class Clock:
    def __init__(self, now: dt.datetime) -> None:
        self.now = now

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += dt.timedelta(seconds=seconds)


def collector_for(ctx: AppContext, clock: Clock | None = None, **settings) -> Collector:
    if settings:
        ctx = dataclasses.replace(ctx, settings=dataclasses.replace(ctx.settings, **settings))
    return Collector(ctx, clock=clock or Clock(dt.datetime.now(dt.UTC)), use_inotify=False)
