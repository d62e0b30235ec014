"""One plain sentence per attempt: what happened, what Recovery decided, and whether it happened.

Pure: the caller loads the facts (attempt, its newest anomaly, its Advice and scheduler actions, the next
attempt and the checkpoint that one loaded) and gets back a Story with the three parts, the whole sentence and
an outcome (recovered / stopped / observe only / running / completed) that the Overview counts and filters by.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from app.domain.control import states


class Outcome(StrEnum):
    """Where a run stands, in the words the Overview uses (its outcome column and facet)."""

    RECOVERED = "recovered"
    STOPPED = "stopped"
    OBSERVE_ONLY = "observe only"
    RUNNING = "running"
    COMPLETED = "completed"


OUTCOMES: tuple[str, ...] = tuple(o.value for o in Outcome)

_KIND_WORDS = {
    "CRASH": "crashed",
    "NO_PROGRESS": "hung (no progress in its log)",
    "SLOWDOWN": "slowed down",
    "SCHEDULER_FAILURE": "failed in Slurm",
}


@dataclass(frozen=True)
class AnomalyFact:
    """The anomaly that explains the attempt's failure (its newest decided one)."""

    kind: str
    category: str
    node: str | None = None
    xid: int | None = None
    line_number: int | None = None
    log_path: str | None = None
    node_from: str | None = None  # how the node was found when the line itself does not name it


@dataclass(frozen=True)
class AdviceFact:
    """The Advice of the attempt as decided (mode at decision), with its review and reconciliation."""

    operation: str  # RESTART | TERMINATE
    mode: str  # act | observe
    rule: str | None = None
    exclusions: tuple[str, ...] = ()
    review: str | None = None  # APPROVED | VETOED | None
    disposition: str = "PENDING"
    shadow_actions: int = 0  # scheduler actions recorded as SHADOW (observe mode: what it would have run)
    failed_actions: int = 0
    held: str | None = None  # active and held for an operator: "a recovery budget" or "a restart storm"


@dataclass(frozen=True)
class NextFact:
    """The attempt that followed (the restart), if Slurm started one."""

    attempt_index: int
    state: str
    nodes: tuple[str, ...] = ()
    started: bool = False
    loaded_iteration: int | None = None
    loaded_checkpoint: bool = False


@dataclass(frozen=True)
class AttemptFacts:
    """What the story reads about one attempt."""

    attempt_index: int
    state: str
    nodes: tuple[str, ...] = ()
    exit_code: int | None = None
    exit_signal: int | None = None
    anomaly: AnomalyFact | None = None
    advice: AdviceFact | None = None
    next_attempt: NextFact | None = None
    enrolled: bool = True
    resumed_checkpoint: bool = False  # this attempt loaded a checkpoint (a restart that resumed)
    resumed_iteration: int | None = None
    adopted: bool = False  # it ended before this installation was watching (app/domain/admission/adoption.py)
    saved_iteration: int | None = None  # the newest checkpoint saved by this job up to this attempt (from its logs)
    stacks: str | None = None  # the stacks taken before Recovery ended it: which rank held the others back, where


# The adoption rule in the story's words (admission/adoption.py NOT_ACTED_ON; no sibling group is imported here).
NOT_ACTED_ON = "ended before Recovery was watching; not acted on"
OBSERVE_NOT_CARRIED_OUT = "decided in observe mode; not carried out"


@dataclass(frozen=True)
class Story:
    """The three parts and the sentence that joins them; `outcome` is one of OUTCOMES."""

    happened: str
    decided: str
    result: str
    outcome: Outcome

    @property
    def sentence(self) -> str:
        parts = [p for p in (self.happened, self.decided, self.result) if p]
        return "; ".join(parts) + "."


def _nodes(nodes: Sequence[str]) -> str:
    if not nodes:
        return ""
    shown = ", ".join(nodes[:3])
    return shown + (f" and {len(nodes) - 3} more" if len(nodes) > 3 else "")


def _happened(facts: AttemptFacts) -> str:
    head = f"Attempt {facts.attempt_index}"
    x = facts.anomaly
    if x is not None:
        what = _KIND_WORDS.get(x.kind, x.kind.lower().replace("_", " "))
        category = x.category.replace("_", " ")
        if x.xid is not None and "xid" in category.lower():
            category = f"Xid {x.xid}"
        redundant = category.lower() in {"hang", "no progress", "slowdown", "straggler"}
        text = f"{head} {what}" if redundant else f"{head} {what} ({category})"
        if x.node:
            text += f" on {x.node}" + (f" ({x.node_from})" if x.node_from else "")
        if x.line_number:
            text += f" at line {x.line_number}"
            if x.log_path:
                text += f" of {x.log_path.rsplit('/', 1)[-1]}"
        return text
    state = facts.state.upper()
    where = _nodes(facts.nodes)
    if state in states.FAILED:
        exit_text = f", exit code {facts.exit_code}" if facts.exit_code is not None else ""
        if facts.exit_signal:
            exit_text += f", signal {facts.exit_signal}"
        return f"{head} ended {state}{' on ' + where if where else ''}{exit_text}"
    resumed = ""
    if facts.resumed_checkpoint:
        resumed = (
            f" after loading checkpoint iteration {facts.resumed_iteration}"
            if facts.resumed_iteration is not None
            else " after loading a checkpoint"
        )
    if state == "COMPLETED":
        return f"{head} completed{' on ' + where if where else ''}{resumed}"
    if state == "CANCELLED":
        return f"{head} was cancelled"
    if state == "PENDING":
        return f"{head} is waiting in the queue"
    if state in states.EXECUTING:
        return f"{head} is running{' on ' + where if where else ''}{resumed}"
    if state == "REQUEUED":
        return f"{head} was requeued by Slurm"
    return f"{head} is {state}"


def _next_text(nxt: NextFact) -> str:
    if nxt.started:
        text = f"attempt {nxt.attempt_index} started"
        if nxt.nodes:
            text += f" on {_nodes(nxt.nodes)}"
        if nxt.loaded_checkpoint:
            text += (
                f" and loaded checkpoint iteration {nxt.loaded_iteration}"
                if nxt.loaded_iteration is not None
                else " and loaded a checkpoint"
            )
        else:
            text += " (no checkpoint load seen yet)"
        return text
    return f"attempt {nxt.attempt_index} is waiting in the queue"


def _stopped(facts: AttemptFacts) -> str:
    """What a stopped run's user does next: resubmit, and from which checkpoint it can resume."""
    if facts.saved_iteration is not None:
        return f"stopped: resubmit (sbatch the same script) to resume from checkpoint iteration {facts.saved_iteration}"
    return "stopped: resubmit (sbatch the same script); no checkpoint save was seen in its logs"


def tell(facts: AttemptFacts) -> Story:
    """The story of one attempt (see the module docstring)."""
    happened = _happened(facts)
    if facts.stacks:
        happened = f"{happened} (stacks: {facts.stacks})"
    advice = facts.advice
    state = facts.state.upper()
    if advice is None:
        if not facts.enrolled:
            return Story(happened, "not enrolled: Recovery only watches this job", "", _plain_outcome(state))
        if state in {"COMPLETED", "CANCELLED"}:
            return Story(happened, "", "", _plain_outcome(state))
        if facts.adopted:
            result = _next_text(facts.next_attempt) if facts.next_attempt is not None else ""
            return Story(happened, NOT_ACTED_ON, result, _plain_outcome(state))
        if facts.anomaly is not None or state in states.FAILED:
            if facts.next_attempt is not None:
                return Story(happened, "Slurm requeued it", _next_text(facts.next_attempt), Outcome.RECOVERED)
            if state in states.ACTIVE:
                return Story(happened, "no decision yet", "", Outcome.RUNNING)
            return Story(happened, "no Advice (nothing Recovery could do)", _stopped(facts), Outcome.STOPPED)
        return Story(happened, "", "", _plain_outcome(state))
    excl = f" excluding {', '.join(advice.exclusions)}" if advice.exclusions else ""
    rule = f" by rule {advice.rule}" if advice.rule else ""
    next_index = facts.attempt_index + 1
    if advice.mode == "observe":
        if advice.operation == "RESTART":
            decided = f"observe only: would have restarted as attempt {next_index}{excl}"
        else:
            decided = f"observe only: would have stopped the run{rule}"
        result = f"{OBSERVE_NOT_CARRIED_OUT} (nothing was done)"
        if facts.next_attempt is not None:
            result = (
                f"{OBSERVE_NOT_CARRIED_OUT}: nothing was done by Recovery; "
                f"Slurm itself started {_next_text(facts.next_attempt)}"
            )
        return Story(happened, decided, result, Outcome.OBSERVE_ONLY)
    if advice.review == "VETOED":
        return Story(
            happened,
            f"Recovery decided to {advice.operation.lower()}{excl}, an operator vetoed it",
            _stopped(facts),
            Outcome.STOPPED,
        )
    if advice.operation == "TERMINATE":
        return Story(happened, f"Recovery stopped here{rule}", _stopped(facts), Outcome.STOPPED)
    decided = f"Recovery restarted it{excl}"
    if advice.held:
        # not a recovery yet: nothing reaches Slurm until an operator releases it (or the budget window moves)
        return Story(
            happened,
            f"Recovery decided to restart it{excl}",
            f"held by {advice.held}: waits for an operator to release it",
            Outcome.RUNNING,
        )
    if facts.next_attempt is not None:
        return Story(happened, decided, _next_text(facts.next_attempt), Outcome.RECOVERED)
    if advice.disposition == "ABANDONED":
        return Story(happened, decided, "the restart did not go through (see scheduler actions)", Outcome.STOPPED)
    return Story(happened, f"Recovery is restarting it{excl}", "restart under way", Outcome.RECOVERED)


def _plain_outcome(state: str) -> Outcome:
    if state == "COMPLETED":
        return Outcome.COMPLETED
    if state in states.FAILED or state == "CANCELLED":
        return Outcome.STOPPED
    return Outcome.RUNNING


def shown_reason(reason: str, mode: str) -> str:
    """An Advice reason as the dashboard shows it: observe mode never says it "will restart"."""
    if mode != "observe":
        return reason
    return reason.replace(": restart as attempt", ": observe only: would have restarted as attempt").replace(
        "restart as attempt", "would have restarted as attempt"
    )
