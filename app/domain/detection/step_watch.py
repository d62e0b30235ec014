"""Per log: read step counters by structure (parser, then the template miner) and say when one advanced."""

from __future__ import annotations

from app.domain.detection.progress import StepReading, StepTracker, parse_bar_line
from app.domain.detection.signatures import TRAININGLOOP, ProgressMarker
from app.domain.detection.templates import TemplateMiner

STRUCTURE_FRAMEWORK = "structure"


class StepWatch:
    """One log's counters: `observe` gives a marker for every counter line, arming only on an advance."""

    def __init__(self, *, templates: bool = True) -> None:
        self.tracker = StepTracker()
        self.miner: TemplateMiner | None = TemplateMiner() if templates else None

    def observe(self, text: str) -> ProgressMarker | None:
        """Feed one line (oldest first); a marker when it carries a counter (`arms` when the counter grew)."""
        reading = parse_bar_line(text)
        if reading is not None:
            return marker_of(reading, arms=self.tracker.advanced(reading))
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
