"""GraphQL type of an attempt's story (presentation/story.py): what happened, what was decided, whether it happened."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import strawberry

from app.api.ids import to_global_id

if TYPE_CHECKING:
    from app.advice.stories import Told
else:
    Told = Any


@strawberry.type(
    description="One plain sentence about an attempt: what happened (category, node, line), what Recovery decided "
    "and whether it happened (the next attempt started, loaded a checkpoint, or the run stopped)."
)
class Story:
    told: strawberry.Private[Told]

    @strawberry.field(description="The whole sentence, e.g. 'Attempt 0 crashed (Xid 79) on gpu-a02 ...'.")
    def sentence(self) -> str:
        return self.told.story.sentence

    @strawberry.field(description="recovered, stopped, observe only, running or completed.")
    def outcome(self) -> str:
        return self.told.story.outcome.value

    @strawberry.field(description="What happened to the attempt.")
    def happened(self) -> str:
        return self.told.story.happened

    @strawberry.field(description="What Recovery decided (empty when nothing needed deciding).")
    def decided(self) -> str:
        return self.told.story.decided

    @strawberry.field(description="Whether it happened: the next attempt, the queue, or stopped: resubmit.")
    def result(self) -> str:
        return self.told.story.result

    @strawberry.field(description="The Slurm job id of the attempt the story is about.")
    def job_id(self) -> int:
        return self.told.attempt.slurm_job_id

    @strawberry.field(description="The index of the attempt the story is about.")
    def attempt_index(self) -> int:
        return self.told.attempt.attempt_index

    @strawberry.field(description="The attempt that followed (the restart), if Slurm started one.")
    def next_attempt_index(self) -> int | None:
        return self.told.next_attempt.attempt_index if self.told.next_attempt is not None else None

    @strawberry.field(
        description="Id of the anomaly the story cites: the one its Advice was decided on (a crash's root cause, "
        "the NO_PROGRESS of a hang), else the attempt's newest decided anomaly."
    )
    def anomaly_id(self) -> strawberry.ID | None:
        anomaly = self.told.anomaly
        return strawberry.ID(to_global_id("Anomaly", anomaly.id)) if anomaly is not None else None

    @strawberry.field(description="Fingerprint id of the cited anomaly ('fp-...'), when it is a crash.")
    def fingerprint(self) -> str | None:
        anomaly = self.told.anomaly
        value = (anomaly.details or {}).get("fingerprint") if anomaly is not None else None
        return str(value) if value else None
