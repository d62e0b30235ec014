"""Per log: read step counters by structure (parser, then the template miner) and say when one advanced."""

from __future__ import annotations

from app.domain.progress_structure import StepReading, StepTracker, parse_bar_line
from app.domain.signatures import TRAININGLOOP, ProgressMarker
from app.domain.templates import TemplateMiner

STRUCTURE_FRAMEWORK = "structure"


class StepWatch:
    """One log's counters: `observe` gives a marker for every counter line, arming only on an advance."""

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

    def observe(self, text: str, *, offset: int = -1) -> ProgressMarker | None:
        """Feed one line (oldest first, `offset` where it starts); a marker when it carries a counter (`arms`
        when the counter grew)."""
        reading = parse_bar_line(text)
        if reading is not None:
            return marker_of(reading, arms=self.advanced(reading, offset=offset))
        if self.miner is not None:
            mined = self.miner.observe(text.rsplit("\r", 1)[-1])
            if mined is not None:
                return marker_of(mined, arms=True)  # the miner reports only fields that advanced
        return None


def marker_of(reading: StepReading, *, arms: bool) -> ProgressMarker:
    """The progress marker of a counter reading (rule `structure:<counter>`, phase trainingloop)."""
    kind = reading.key.split("/", 1)[0] if reading.source == "parser" else reading.key
    return ProgressMarker(
        phase=TRAININGLOOP,
        rule=f"structure:{kind}",
        framework=STRUCTURE_FRAMEWORK,
        iteration=reading.iteration,
        arms=arms,
    )
