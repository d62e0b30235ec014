"""Per log: read step counters by structure (parser, metric lines, then the template miner) and say when one arms.

A counter line arms when its reading is strong (a total or a metric field on the line) or when the counter
advanced; a metrics-only line (fields, no counter) arms when a line of the same fields recurs with other
values; the template miner reports only counters that advanced.
"""

from __future__ import annotations

from app.domain.detection.progress import StepReading, StepTracker, parse_bar_line, parse_metrics
from app.domain.detection.signatures import TRAININGLOOP, ProgressMarker
from app.domain.detection.templates import TemplateMiner

STRUCTURE_FRAMEWORK = "structure"


class StepWatch:
    """One log's counters: `observe` gives a marker for every counter line (`arms` says which arm)."""

    def __init__(self, *, templates: bool = True) -> None:
        self.tracker = StepTracker()
        self.miner: TemplateMiner | None = TemplateMiner() if templates else None
        self.resumed_from: tuple[int, float] | None = None  # (file offset, iteration) of the newest checkpoint load

    def resumed(self, iteration: float, *, offset: int) -> None:
        """A checkpoint of `iteration` was loaded at `offset`: the run goes on from there."""
        if self.resumed_from is None or offset >= self.resumed_from[0]:
            self.resumed_from = (offset, iteration)

    def advanced(self, reading: StepReading, *, offset: int = -1) -> bool:
        """The counter grew: past its previous value, or (first seen after a checkpoint load at `offset` or
        before) past the loaded iteration, so a resumed run arms on its first step, as a fresh one on its second."""
        first = not self.tracker.seen(reading)
        grew = self.tracker.advanced(reading)
        if grew or not first or self.resumed_from is None:
            return grew
        loaded_at, iteration = self.resumed_from
        return offset > loaded_at and reading.value > iteration

    def observe(self, text: str, *, offset: int = -1) -> tuple[ProgressMarker, StepReading] | None:
        """Feed one line (oldest first, `offset` where it starts); its marker and reading when it carries a counter
        (`arms`: strong, or grew).

        The reading's fields are the line's metrics: throughput samples come from them (`rates_of`).
        """
        reading = parse_bar_line(text)
        if reading is not None:
            return marker_of(reading, arms=self.arms(reading, offset=offset)), reading
        return self.without_counter(text.rsplit("\r", 1)[-1])

    def without_counter(self, text: str) -> tuple[ProgressMarker, StepReading] | None:
        """A line no parser reads a counter from: the template miner, then a recurring metrics line (both arm)."""
        if self.miner is not None:
            mined = self.miner.observe(text)
            if mined is not None:
                return marker_of(mined, arms=True), mined  # the miner reports only fields that advanced
        metrics = parse_metrics(text)
        if metrics is not None and self.arms(metrics):
            return marker_of(metrics, arms=True), metrics  # a metrics line is progress once its shape recurs
        return None

    def arms(self, reading: StepReading, *, offset: int = -1) -> bool:
        """Whether this reading arms the hang detector (the tracker remembers it either way)."""
        if reading.source == "metrics":
            return self.tracker.recurred(reading)
        return self.advanced(reading, offset=offset) or reading.strong


def marker_of(reading: StepReading, *, arms: bool) -> ProgressMarker:
    """The progress marker of a counter reading (rule `structure:<counter>`, phase trainingloop)."""
    kind = {"parser": reading.key.split("/", 1)[0], "metrics": "metrics"}.get(reading.source, reading.key)
    return ProgressMarker(
        phase=TRAININGLOOP,
        rule=f"structure:{kind}",
        framework=STRUCTURE_FRAMEWORK,
        iteration=reading.iteration,
        arms=arms,
    )
