"""Progress by structure: step counters read from real log lines, and arming only on an advance."""

from pathlib import Path

import pytest

from app.domain.detection.progress import StepTracker, parse_bar_line, parse_fields, parse_metrics, parse_step, rates_of
from app.domain.detection.step_watch import StepWatch
from app.domain.detection.templates import TemplateMiner

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
        "  Num Epochs = 3",
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


def test_step_watch_arms_on_one_strong_line():
    # torchlab's DDP program: "iteration N | loss X | ..." — a counter next to a metric field arms at once.
    watch = StepWatch()
    seen = [watch.observe(line("torchlab", "ddp-clean.log", n)) for n in range(1, 5)]
    assert seen[0] is None and seen[1] is None  # "rank 0/2 on node1 ..." lines
    marker, reading = seen[2]
    assert marker.arms and marker.iteration == 1 and reading.strong
    assert marker.rule == "structure:iteration" and marker.phase == "trainingloop"
    assert ("loss", reading.fields[1][1]) == reading.fields[1] and reading.fields[1][1] > 0


def test_a_bare_counter_arms_only_on_an_advance():
    # "Start from epoch 0" (realworld pytorch-save-cannot-open-001.log line 4): a counter, no total, no metric.
    watch = StepWatch()
    text = line("realworld", "pytorch-save-cannot-open-001.log", 4)
    marker, reading = watch.observe(text)
    assert not reading.strong and not marker.arms
    marker, reading = watch.observe(text)
    assert not marker.arms  # the same value again is no progress
    # line 9, "Epoch 0, time usage: ..., average loss: [0.050121 0.051044]/0.050582": a metric next to the epoch
    marker, reading = watch.observe(line("realworld", "pytorch-save-cannot-open-001.log", 9))
    assert marker.arms and reading.strong and ("average loss", 0.050121) in reading.fields


@pytest.mark.parametrize(
    ("corpus", "name", "number", "key", "value", "fields"),
    [
        # tqdm bar with a postfix (accelerate): strong by its total; the postfix is read as fields
        ("realworld", "accelerate-checkpoint-write-failure-001.log", 1, "bar/33", 0, {"loss": 0.688, "step": 100}),
        # MaxText "completed step: N, seconds: ..., loss: ..."
        ("realworld", "maxtext-progress-002.log", 1, "step", 9, {"loss": 0.0, "TFLOP/s/device": 257.929}),
        # TensorFlow estimator "loss = 1.109375, step = 488600 (45.410 sec)": `step = N` with spaces
        ("realworld", "tensorflow-tpu-lame-worker-001.log", 1, "step", 488600, {"loss": 1.109375}),
        # Megatron split table: "iteration 5/50 | elapsed time per iteration: 21392.5 ms |"
        ("realworld", "megatron-nan-grad-norm-002.log", 5, "iteration/50", 5, {}),
        # an epoch header with its total: "Epoch 0/59"
        ("realworld", "pytorch-device-side-assert-001.log", 1, "epoch", 0, {}),
        # PaddleNLP dict-style metrics: {'loss': 0.1856, 'learning_rate': 4.5e-05, 'global_step': 150, 'epoch': 2.0}
        ("realworld", "paddlenlp-progress-001.log", 1, "global_step", 150, {"loss": 0.1856, "epoch": 2.0}),
        # Lua fairseq table: "| epoch 004 | 0021028 updates | words/s    7781| trainloss     3.70 | ..."
        ("realworld", "fairseq-lua-checkpoint-save-001.log", 4, "epoch", 4, {"trainloss": 3.7, "words/s": 7781.0}),
        # horovod: "epoch:1 loss:1.00...:  59%|...| 230/391 [00:31<00:20,  7.69it/s]"
        ("realworld", "horovod-progress-002.log", 1, "bar/391", 230, {"it/s": 7.69}),
    ],
)
def test_strong_lines_of_each_format_family(corpus, name, number, key, value, fields):
    reading = parse_bar_line(line(corpus, name, number))
    assert reading is not None and (reading.key, reading.value) == (key, value)
    assert reading.strong, "a total or a metric field makes one line enough to arm"
    assert fields.items() <= dict(reading.fields).items()


def test_throughput_comes_from_the_same_reading():
    # the tqdm rate of a bar, in iterations per second; "639.50s/it" is 1/639.5 it/s
    bar = parse_bar_line(line("realworld", "horovod-progress-002.log", 1))
    assert rates_of(bar.fields) == {"it_per_s": 7.69}
    maxtext = parse_bar_line(line("realworld", "maxtext-progress-002.log", 1))
    assert rates_of(maxtext.fields) == {"tflops_per_gpu": 257.929, "tokens_per_s": 36653.244}
    slow = parse_bar_line("246/248 [43:41<21:19, 639.50s/it]")  # the bar issue 24 quotes
    assert slow is not None and slow.strong and rates_of(slow.fields)["it_per_s"] == pytest.approx(1 / 639.5)
    # Megatron's table (realworld benign-megatron-iterations-001.log line 1): the iteration time, in ms
    megatron = parse_bar_line(line("realworld", "benign-megatron-iterations-001.log", 1))
    assert megatron.key == "iteration/6069" and rates_of(megatron.fields) == {"iter_ms": 26813.0}
    assert rates_of(parse_fields("samples per second: 103.7 | tps: 1,234")) == {  # the default rules' examples
        "samples_per_s": 103.7,
        "tokens_per_s": 1234.0,
    }


def test_a_metrics_line_without_counter_arms_when_it_recurs_with_new_values():
    # CNTK (realworld cntk-progress-001.log line 9) prints the same line once per rank: a repeat is not progress.
    watch = StepWatch(templates=False)
    text = line("realworld", "cntk-progress-001.log", 9)
    assert parse_metrics(text) is not None
    assert watch.observe(text) is None and watch.observe(text) is None
    # the next minibatch prints new values (this second line is our own edit of the first, not captured output)
    assert watch.observe(text.replace("7.146891", "6.998123")) is not None


@pytest.mark.parametrize(
    "text",
    [
        "Number of train samples: 761740",  # realworld pytorch-save-cannot-open-001.log line 2
        "NcclComm: initialized",
        "Validated 5407 sequences",
    ],
)
def test_lines_that_are_not_metric_lines(text):
    assert parse_metrics(text) is None


def test_step_watch_arms_on_the_first_counter_past_a_loaded_checkpoint():
    """A bare counter (no total, no metric) arms on an advance, or past the loaded checkpoint's iteration."""

    def arms(watch: StepWatch, text: str, offset: int) -> bool:
        observed = watch.observe(text, offset=offset)
        return observed is not None and observed[0].arms

    watch = StepWatch()
    watch.resumed(5, offset=100)
    assert not arms(watch, "iteration 3", 50)  # before the load: one line arms nothing
    fresh = StepWatch()
    fresh.resumed(5, offset=100)
    assert not arms(fresh, "iteration 5", 200)  # not past the loaded iteration
    again = StepWatch()
    again.resumed(5, offset=100)
    observed = again.observe("iteration 6", offset=200)
    assert observed is not None and observed[0].arms and observed[0].iteration == 6
    assert not arms(StepWatch(), "iteration 6", 200)  # with no load, one bare counter line arms nothing


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
