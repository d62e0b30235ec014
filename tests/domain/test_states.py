"""The one Slurm state vocabulary: the sets relate as their names say."""

from app.domain.control import states


def test_the_sets_relate_as_their_names_say() -> None:
    assert states.RETRYABLE_FAILED < states.FAILED < states.TERMINAL < states.ENDED
    assert states.CLEAN_END < states.TERMINAL and not states.CLEAN_END & states.FAILED
    assert not states.ACTIVE & states.ENDED
    assert states.EXECUTING < states.ACTIVE
    assert {"REQUEUE_HOLD", "SPECIAL_EXIT"} <= states.HELD and "RUNNING" not in states.HELD
    assert states.TERMINAL < states.EXECUTION_STOPPED and "COMPLETING" in states.EXECUTION_STOPPED
