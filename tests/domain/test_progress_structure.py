"""Progress by structure: step counters read from real log lines, and arming only on an advance."""

from pathlib import Path

import pytest

from app.domain.progress_structure import StepTracker, parse_bar_line, parse_step
from app.domain.step_watch import StepWatch
from app.domain.templates import TemplateMiner

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def line(corpus: str, name: str, number: int) -> str:
    """Line `number` (1-based) of a corpus file, exactly as captured (carriage returns kept)."""
    raw = (FIXTURES / corpus / name).read_bytes().split(b"\n")[number - 1]
    return raw.decode("utf-8", errors="replace")


@pytest.mark.parametrize(
    ("corpus", "name", "number", "key", "value"),
    [
        # torchrun + DDP program of torchlab: "iteration N | loss X | ..." with no "/M" total
        ("torchlab", "ddp-clean.log", 3, "iteration", 1),
        ("realworld", "nccl-ib-port-error-001.log", 1, "iter", 83592),
        ("realworld", "other-nan-loss-001.log", 1, "epoch", 3448),
        ("realworld", "slurm-oom-004.log", 3, "epoch-iter/1736", 0 * 1737 + 415),
        ("realworld", "pytorch-nan-loss-002.log", 1, "epoch-iter/2976", 1 * 2977 + 1900),
        ("realworld", "benign-progress-ppl-001.log", 2, "epoch-iter/15756", 1 * 15757 + 100),
        ("realworld", "pytorch-enospc-002.log", 3, "epoch-iter/1926", 55 * 1927 + 496),
        ("realworld", "benign-nemo-dynamo-warning-traceback-001.log", 22, "iteration/9", 1),
        ("realworld", "pytorch-segfault-001.log", 1, "bar/56", 11),
    ],
)
def test_counters_of_real_lines(corpus, name, number, key, value):
    reading = parse_bar_line(line(corpus, name, number))
    assert reading is not None and (reading.key, reading.value) == (key, value)


def test_the_newest_state_of_a_carriage_return_bar_wins():
    # HF Trainer under torchlab: one physical line holds several tqdm updates separated by \r.
    text = line("torchlab", "hf-clean.log", 15)
    assert "\r" in text
    reading = parse_bar_line(text)
    assert reading is not None and reading.key == "bar/20"
    last_bar = max(int(part.split("/20 [")[0].split()[-1]) for part in text.split("\r") if "/20 [" in part)
    assert reading.value == last_bar


@pytest.mark.parametrize(
    "text",
    [
        "srun: Terminating job step 3495064.0",  # a Slurm step id, not a training step
        "  Total optimization steps = 1000",  # a setting in a header
        "number of skipped iterations: 0",
        "saved checkpoint to /ckpt/iter_5.pt at iteration 5",  # a checkpoint event names its step
        "training started",
        "loss went down on 12/05/2026",
    ],
)
def test_lines_without_a_step_counter(text):
    assert parse_step(text) is None


def test_the_tracker_arms_on_an_advance_not_on_one_line():
    tracker = StepTracker()
    first, second = (parse_bar_line(line("torchlab", "ddp-clean.log", n)) for n in (3, 4))
    assert first is not None and second is not None
    assert not tracker.advanced(first)
    assert not tracker.advanced(first)  # the same value again is no progress
    assert tracker.advanced(second)


def test_a_restart_lowers_the_counter_and_the_next_step_advances_again():
    tracker = StepTracker()
    for n in (3, 4, 5):
        tracker.advanced(parse_bar_line(line("torchlab", "ddp-kill.log", n)))
    # attempt 1 resumes at iteration 6 after the kill; its first line is lower than what attempt 0 reached
    later = [parse_bar_line(line("torchlab", "ddp-kill.log", n)) for n in (153, 154)]
    assert [r.value for r in later] == [6, 7]
    tracker.advanced(parse_bar_line(line("torchlab", "ddp-kill.log", 9)))
    assert not tracker.advanced(later[0]) and tracker.advanced(later[1])


def test_step_watch_arms_on_the_second_iteration_line():
    watch = StepWatch()
    markers = [watch.observe(line("torchlab", "ddp-clean.log", n)) for n in range(1, 6)]
    assert markers[0] is None and markers[1] is None  # "rank 0/2 on node1 ..." lines
    assert markers[2] is not None and not markers[2].arms
    assert markers[3] is not None and markers[3].arms and markers[3].iteration == 2
    assert markers[3].rule == "structure:iteration" and markers[3].phase == "trainingloop"


def test_step_watch_arms_on_the_first_counter_past_a_loaded_checkpoint():
    watch = StepWatch()
    watch.resumed(5, offset=100)
    assert not watch.observe("iteration 3 | loss 1.0", offset=50).arms  # before the load: one line arms nothing
    fresh = StepWatch()
    fresh.resumed(5, offset=100)
    assert not fresh.observe("iteration 5 | loss 1.0", offset=200).arms  # not past the loaded iteration
    again = StepWatch()
    again.resumed(5, offset=100)
    marker = again.observe("iteration 6 | loss 1.0", offset=200)
    assert marker is not None and marker.arms and marker.iteration == 6


# The template miner learns formats no parser knows. These lines are of our own made-up format
# (no library prints them): a counter with no keyword, then metric values.
OWN_FORMAT = "train {n}: 2.{n:02d}31 0.0010 ok"


def test_the_miner_learns_a_counter_after_it_grew_twice():
    miner = TemplateMiner()
    readings = [miner.observe(OWN_FORMAT.format(n=n)) for n in (10, 20, 30, 40)]
    assert readings[:2] == [None, None]
    assert readings[2] is not None and readings[2].value == 30 and readings[2].source == "template"
    assert readings[3] is not None and readings[3].value == 40


def test_the_miner_ignores_numbered_lines_without_metric_values():
    miner = TemplateMiner()
    # init-time enumerations (channels, ranks) grow too but print no metric value
    assert all(miner.observe(f"Channel {n:02d} : 0 1 2 3") is None for n in range(8))


def test_the_miner_stays_bounded():
    miner = TemplateMiner()
    for n in range(3 * TemplateMiner.MAX_TEMPLATES):
        miner.observe(f"word{'x' * (n % 700)} {n} value 1.5")
    assert miner.templates <= TemplateMiner.MAX_TEMPLATES
