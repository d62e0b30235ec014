"""Structural rules on real lines: generic checkpoint save/load, NaN in metric fields, collective timeouts."""

from pathlib import Path

import pytest

from app.domain.detection.rules_builtin import default_ruleset
from app.domain.detection.signatures import NAN_LOSS, NCCL_TIMEOUT, CheckpointEvent, Classifier
from app.jobfiles.reader import FilePosition, LogEvent, LogTailer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CLASSIFIER = Classifier(default_ruleset())


def line(corpus: str, name: str, number: int) -> str:
    raw = (FIXTURES / corpus / name).read_bytes().split(b"\n")[number - 1]
    return raw.decode("utf-8", errors="replace")


def test_a_plain_pytorch_load_line_is_a_load_with_its_iteration():
    # torchlab's DDP program on its retry; 0 of 8 such loads were recorded before
    event = CLASSIFIER.checkpoint(line("torchlab", "ddp-kill.log", 152))
    assert event is not None and (event.kind, event.iteration) == ("loaded", 5)
    assert event.path is not None and event.path.endswith("/iter_5.pt")


@pytest.mark.parametrize(
    ("path", "iteration"),
    [
        ("/ckpt/iter_0000010", 10),
        ("/ckpt/global_step10", 10),
        ("/out/checkpoint-10", 10),
        ("/ckpt/step_10", 10),
        ("/ckpt/epoch=3-step=10.ckpt", 10),
        ("/tmp/model/model.ckpt-10", 10),  # TensorFlow's checkpoint prefix
    ],
)
def test_the_iteration_comes_from_the_path_when_the_line_names_none(path, iteration):
    # the torchlab program's load line, without its "at iteration N" tail
    event = CLASSIFIER.checkpoint(f"loaded checkpoint from {path}")
    assert event is not None and (event.kind, event.iteration) == ("loaded", iteration)


@pytest.mark.parametrize(
    ("name", "number", "iteration"),
    [
        # Lua torch-rnn: "    Initializing from \tcv/checkpoint_20.t7" (the step from the path)
        ("torch-rnn-checkpoint-load-001.log", 3, 20),
        # a torchvision detection script: "RESUMING TRAINING..." (a load that names no step)
        ("fasterrcnn-resume-keyerror-001.log", 7, None),
    ],
)
def test_generic_load_verbs_of_real_scripts(name, number, iteration):
    event = CLASSIFIER.checkpoint(line("realworld", name, number))
    assert event is not None and (event.kind, event.iteration) == ("loaded", iteration)


@pytest.mark.parametrize(
    "text",
    [
        "Not resuming: no checkpoint found",
        "Resuming training is not supported with this optimizer",
    ],
)
def test_a_resume_that_does_not_happen_is_no_load(text):
    assert CLASSIFIER.checkpoint(text) is None


def test_a_resume_line_of_deepspeed_under_hf_is_a_load():
    name = next(
        p.name for p in (FIXTURES / "realworld").glob("*.log") if "Attempting to resume from" in p.read_text("utf-8")
    )
    text = next(
        t for t in (FIXTURES / "realworld" / name).read_text("utf-8").splitlines() if "Attempting to resume" in t
    )
    event = CLASSIFIER.checkpoint(text)
    assert event is not None and (event.kind, event.iteration) == ("loaded", 2)


@pytest.mark.parametrize(
    "text",
    [
        "Loading checkpoint shards: 100%",  # pretrained weights, not a resume
        "    model.load_state_dict(torch.load(ckpt_path))",  # code quoted in a traceback
        "No checkpoint found, training from scratch",
        "failed to save checkpoint to /ckpt/iter_5.pt",
        "checkpoints will be saved every 500 steps",
    ],
)
def test_checkpoint_prose_that_is_no_event(text):
    assert CLASSIFIER.checkpoint(text) is None


def read_all(path: Path) -> list:
    events: list[LogEvent] = []
    with LogTailer(traceback_wait=0.0, all_progress=True) as tailer:
        position = FilePosition(path=str(path))
        while True:
            result = tailer.read(position)
            events += result.events
            if not result.more:
                return events
            position = result.position


def test_one_load_is_recorded_once(tmp_path):
    # HF Trainer + DeepSpeed resuming: "Attempting to resume from .../checkpoint-2", then DeepSpeed's
    # "Loading checkpoint from ..." / "Loaded checkpoint from ..." twice: one load of checkpoint 2.
    name = next(
        p for p in (FIXTURES / "realworld").glob("*.log") if "Attempting to resume from" in p.read_text("utf-8")
    )
    loads = [e.signal for e in read_all(name) if getattr(e.signal, "kind", None) == "loaded"]
    assert [(s.kind, s.iteration) for s in loads] == [("loaded", 2)]


def test_hf_saves_are_one_event_per_checkpoint():
    saves = [
        e.signal for e in read_all(FIXTURES / "torchlab" / "hf-clean.log") if getattr(e.signal, "kind", "") == "saved"
    ]
    assert [s.iteration for s in saves] == [5, 10, 15, 20]


@pytest.mark.parametrize(
    ("corpus", "name", "number"),
    [
        ("torchlab", "ddp-nan.log", 9),  # iteration 6 | loss nan | grad norm nan | ...
        ("torchlab", "hf-nan.log", 0),  # tqdm bar then {'loss': '0', 'grad_norm': 'nan', ...}
        ("realworld", "pytorch-nan-loss-001.log", 1),  # [epoch  3][iter    0/ 110] loss: nan, lr: ...
        ("realworld", "megatron-nan-grad-norm-002.log", 7),  # a table cell: "loss scale: 1.0 | grad norm: nan |"
    ],
)
def test_nan_in_a_metric_field(corpus, name, number):
    if number == 0:  # the first line holding a non-finite metric value
        lines = (FIXTURES / corpus / name).read_bytes().split(b"\n")
        number = 1 + next(i for i, t in enumerate(lines) if b"'nan'" in t)
    text = line(corpus, name, number).rsplit("\r", 1)[-1]
    found = CLASSIFIER.crash(text)
    assert found is not None and found.category == NAN_LOSS


def test_nan_at_the_end_of_a_line_is_found_by_the_prefilter(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("step 1 | loss 2.5\nstep 2 | loss nan\n")
    crashes = [e for e in read_all(log) if getattr(e.signal, "category", None) == NAN_LOSS]
    assert [e.line_number for e in crashes] == [2]


@pytest.mark.parametrize(
    "text",
    [
        "NaN check enabled",
        "use torch.autograd.detect_anomaly to find NaN",
        "the banana finance report",
        " number of skipped iterations:   0 | number of nan iterations:   0 |",
        "grad_norm: 0.3922 (nan)  time: 0.4944",  # a running average in parentheses
        "Warning: NaN detected in the gradients, skipping",
    ],
)
def test_prose_about_nan_is_no_crash(text):
    found = CLASSIFIER.crash(text)
    assert found is None or found.category != NAN_LOSS


def test_a_gloo_timeout_is_a_collective_timeout():
    # torchlab's hung rank: gloo's recv timed out; the same category as an NCCL watchdog timeout
    found = CLASSIFIER.crash(line("torchlab", "ddp-hang.log", 27))
    assert found is not None and found.category == NCCL_TIMEOUT


@pytest.mark.parametrize(
    ("text", "iteration"),
    [
        # the torchlab program's load line with other ways to name the step
        ("loaded checkpoint from /ckpt/checkpoint70.pt (epoch 70 @ 2162 updates)", 2162),  # optimizer updates win
        ("loaded checkpoint from /ckpt/checkpoint_20.t7", 20),
        ("loaded checkpoint from /ckpt/model_best.pth (epoch 1)", 1),  # the epoch as the last resort
    ],
)
def test_updates_numbered_paths_and_epochs_name_the_step(text, iteration):
    event = CLASSIFIER.checkpoint(text)
    assert event is not None and event.iteration == iteration


# Lines copied from tuning files the "corpus" branch adds to tests/fixtures/realworld/ (not on this branch yet):
# benign-tensorpack-progress-save-001.log line 12 and mmdetection-resume-mismatch-002.log lines 1 and 3.
TENSORPACK_SAVE = "[0601 22:55:10 @saver.py:66] Model saved to train_log_pretrain_10epoch390_/model-2340."
MMDET_LOAD = "2021-07-02 10:24:28,325 - mmdet - INFO - load checkpoint from work_dirs/model/epoch_76.pth"
MMDET_OTHER = "2021-07-02 10:24:28,325 - mmdet - INFO - Use load_from_local loader"
MMDET_RESUMED = "2021-07-02 10:24:30,810 - mmdet - INFO - resumed epoch 64, iter 156416"


def test_a_model_saved_to_a_numbered_path_is_a_save_with_its_step():
    event = CLASSIFIER.checkpoint(TENSORPACK_SAVE)
    assert event is not None and (event.kind, event.iteration) == ("saved", 2340)


def test_a_load_whose_step_the_next_line_names_is_one_load_with_that_step(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("\n".join([MMDET_LOAD, MMDET_OTHER, MMDET_RESUMED]) + "\n")
    loads = [e for e in read_all(log) if isinstance(e.signal, CheckpointEvent)]
    assert [(e.line_number, e.signal.kind, e.signal.iteration) for e in loads] == [(1, "loaded", 156416)]
