"""The file tailer on real temp files: offsets, truncation, rotation, deletion, long and partial lines."""

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.domain.detection import chunkscan
from app.domain.detection.rules_file import parse_signature_config
from app.domain.detection.signatures import CheckpointEvent, CrashSignature
from app.jobfiles.reader import REUSE_BUFFER_BYTES, FilePosition, LogTailer, count_newlines

ITER = (
    " [2026-11-30 02:00:{s:02d}] iteration {i:>6}/ 1000 | consumed samples: {i} | elapsed time "
    "per iteration (ms): 1000.{i} | lm loss: 2.0E+00 |\n"
)
ENGINES = ["python"] + (["hyperscan"] if chunkscan.HYPERSCAN_AVAILABLE else [])


@pytest.fixture(params=ENGINES)
def tailer(request):
    with LogTailer(engine=request.param, tz=UTC, traceback_wait=0.0) as t:
        yield t


def append(path, text):
    with open(path, "ab") as f:
        f.write(text.encode() if isinstance(text, str) else text)


def read_all(tailer, position):
    events, progress = [], None
    while True:
        result = tailer.read(position)
        events += result.events
        progress = result.latest_progress or progress
        position = result.position
        if not result.more:
            return result, events, progress, position


def test_reads_new_lines_from_the_saved_offset(tmp_path, tailer):
    log = tmp_path / "train.log"
    append(log, "hello\ntraining ...\n" + ITER.format(s=1, i=1))
    r1 = tailer.read(FilePosition(path=str(log)))
    assert r1.exists and r1.events == () and r1.position.line_number == 3
    assert r1.latest_progress.signal.phase == "trainingloop" and r1.latest_progress.line_number == 3
    assert r1.latest_throughput.signal.values["iter_ms"] == pytest.approx(1000.1)
    assert r1.last_source_time == datetime(2026, 11, 30, 2, 0, 1, tzinfo=UTC)
    append(log, "Rank0: (1) segmentation fault: artificial segfault\n")
    r2 = tailer.read(r1.position)
    assert [(e.line_number, e.signal.category) for e in r2.events] == [(4, "SEGFAULT")]
    assert r2.events[0].offset == r1.position.offset
    assert r2.latest_progress is None and r2.lines_read == 1
    assert tailer.read(r2.position).bytes_read == 0


def test_crash_and_checkpoint_events_carry_their_facts(tmp_path, tailer):
    log = tmp_path / "train.log"
    append(
        log,
        "2026-11-30 02:00:00,000 slurm_job_attempt=1 successfully saved checkpoint from iteration 500 to /ckpt\n"
        "x\nNov 30 02:00:02 node12 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n",
    )
    result = tailer.read(FilePosition(path=str(log)))
    ckpt, xid = result.events
    assert isinstance(ckpt.signal, CheckpointEvent) and ckpt.signal.iteration == 500 and ckpt.attempt == 1
    assert ckpt.source_time == datetime(2026, 11, 30, 2, 0, 0, tzinfo=UTC)
    assert isinstance(xid.signal, CrashSignature) and xid.signal.nodes == ("node12",) and xid.line_number == 3
    assert xid.source_time.month == 11 and xid.source_time.day == 30


def test_partial_last_line_waits_for_its_newline(tmp_path, tailer):
    log = tmp_path / "train.log"
    append(log, "ok\nSegmentation fa")
    r1 = tailer.read(FilePosition(path=str(log)))
    assert r1.events == () and r1.position.offset == 3
    append(log, "ult\n")
    r2 = tailer.read(r1.position)
    assert [e.signal.category for e in r2.events] == ["SEGFAULT"] and r2.events[0].line_number == 2


def test_progress_bar_without_newline_still_counts(tmp_path, tailer):
    log = tmp_path / "train.log"
    append(
        log, "Epoch 0:   0%|          | 0/100 [00:00<?, ?it/s]\rEpoch 0:  10%|#         | 10/100 [00:05<00:45, 2.0it/s]"
    )
    result = tailer.read(FilePosition(path=str(log)))
    assert result.latest_progress.signal.phase == "trainingloop" and result.latest_progress.signal.iteration == 10
    assert result.position.offset == 0  # not consumed: the line has not ended


def test_restart_gives_the_same_event_identity(tmp_path):
    log = tmp_path / "train.log"
    append(log, "a\nCUDA error: an illegal memory access was encountered\n")
    first = LogTailer().read(FilePosition(path=str(log))).events
    again = LogTailer().read(FilePosition(path=str(log))).events
    assert [e.event_id for e in first] == [e.event_id for e in again] and len(first) == 1


def test_truncation_restarts_at_zero(tmp_path, tailer):
    log = tmp_path / "train.log"
    append(log, "line one\nline two\nline three\n")
    r1 = tailer.read(FilePosition(path=str(log)))
    with open(log, "wb") as f:
        f.write(b"Segmentation fault\n")
    r2 = tailer.read(r1.position)
    assert "truncated" in r2.notes and r2.events[0].line_number == 1 and r2.events[0].offset == 0


def test_replaced_head_is_noticed_even_when_longer(tmp_path, tailer):
    log = tmp_path / "train.log"
    append(log, "attempt 0 header\n")
    r1 = tailer.read(FilePosition(path=str(log)))
    with open(log, "r+b") as f:  # same inode, same size or more, different head (copytruncate + regrowth)
        f.write(b"attempt 1 header\nSegmentation fault\n")
    r2 = tailer.read(r1.position)
    assert "truncated" in r2.notes and [e.line_number for e in r2.events] == [2]


def test_rotation_finishes_the_old_file_then_reads_the_new(tmp_path, tailer):
    log = tmp_path / "train.log"
    append(log, "first\n")
    r1 = tailer.read(FilePosition(path=str(log)))
    append(log, "Segmentation fault in old file\n")
    os.rename(log, tmp_path / "train.log.1")
    append(log, "CUDA error: misaligned address in new file\n")
    r2 = tailer.read(r1.position)
    assert "rotated" in r2.notes and [e.signal.category for e in r2.events] == ["SEGFAULT"] and r2.more
    r3 = tailer.read(r2.position)
    assert [e.signal.category for e in r3.events] == ["CUDA_ERROR"] and r3.events[0].line_number == 1


def test_rotation_after_restart_finds_the_renamed_file(tmp_path):
    log = tmp_path / "train.log"
    append(log, "first\n")
    r1 = LogTailer().read(FilePosition(path=str(log)))
    append(log, "Segmentation fault\n")
    os.rename(log, tmp_path / "train.log.1")
    append(log, "new\n")
    r2 = LogTailer().read(r1.position)  # a fresh tailer: no kept fd, finds the inode by name
    assert [e.signal.category for e in r2.events] == ["SEGFAULT"]


def test_deleted_file_is_finished_through_the_open_fd(tmp_path, tailer):
    log = tmp_path / "train.log"
    append(log, "first\n")
    r1 = tailer.read(FilePosition(path=str(log)))
    append(log, "Segmentation fault\n")
    os.unlink(log)
    r2 = tailer.read(r1.position)
    assert "deleted" in r2.notes and [e.signal.category for e in r2.events] == ["SEGFAULT"]
    r3 = tailer.read(r2.position)
    assert not r3.exists and "missing" in r3.notes


def test_late_file(tmp_path, tailer):
    log = tmp_path / "later.log"
    r1 = tailer.read(FilePosition(path=str(log)))
    assert not r1.exists and r1.position.offset == 0
    append(log, "Segmentation fault\n")
    assert [e.line_number for e in tailer.read(r1.position).events] == [1]


def test_very_long_line_is_capped_and_the_rest_skipped(tmp_path):
    log = tmp_path / "train.log"
    huge = b"Segmentation fault " + b"x" * (3 * 1024 * 1024)
    append(log, b"before\n" + huge + b"\nCUDA error: after\n")
    with LogTailer(chunk_size=256 * 1024, line_cap=64 * 1024) as tailer:
        result, events, _, position = read_all(tailer, FilePosition(path=str(log)))
    assert [(e.signal.category, e.line_number, e.was_truncated) for e in events] == [
        ("SEGFAULT", 2, True),
        ("CUDA_ERROR", 3, False),
    ]
    assert all(len(e.text) <= 64 * 1024 for e in events)
    assert position.line_number == 3 and not position.skipping


def test_long_line_without_newline_yet_is_bounded(tmp_path):
    log = tmp_path / "train.log"
    append(log, b"y" * (300 * 1024))
    with LogTailer(chunk_size=128 * 1024, line_cap=64 * 1024) as tailer:
        r1 = tailer.read(FilePosition(path=str(log)))
        assert r1.position.skipping and r1.position.offset == 300 * 1024
        append(log, b"yyy\nSegmentation fault\n")
        r2 = tailer.read(r1.position)
    assert [(e.line_number, e.signal.category) for e in r2.events] == [(2, "SEGFAULT")]


@pytest.mark.parametrize("engine", ENGINES)
def test_traceback_is_decided_by_its_exception_line(tmp_path, engine):
    tailer = LogTailer(engine=engine, traceback_wait=30.0)
    log = tmp_path / "train.log"
    append(log, '[rank1]:Traceback (most recent call last):\n[rank1]:  File "t.py", line 1, in <module>\n')
    r1 = tailer.read(FilePosition(path=str(log)))
    assert r1.events == () and r1.position.offset == 0  # waits: the exception line may still come
    append(log, "[rank1]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB\n")
    r2 = tailer.read(r1.position)
    assert [(e.signal.category, e.line_number) for e in r2.events] == [("CUDA_OOM", 1)]
    assert "OutOfMemoryError" in r2.events[0].signal.detail
    tailer.close()


def test_unfinished_traceback_of_an_idle_file_is_reported_as_is(tmp_path, tailer):
    log = tmp_path / "train.log"
    append(log, 'Traceback (most recent call last):\n  File "t.py", line 1\n')
    result = tailer.read(FilePosition(path=str(log)))  # traceback_wait=0: no more waiting
    assert [e.signal.category for e in result.events] == ["PYTHON_TRACEBACK"]


def test_max_bytes_splits_the_work(tmp_path):
    log = tmp_path / "train.log"
    append(log, "".join(ITER.format(s=i % 60, i=i) for i in range(3000)) + "Segmentation fault\n")
    with LogTailer(chunk_size=128 * 1024, max_bytes=128 * 1024) as tailer:
        result, events, progress, position = read_all(tailer, FilePosition(path=str(log)))
    assert [e.line_number for e in events] == [3001] and position.line_number == 3001
    assert progress.signal.iteration == 2999


def test_last_output_at_prefers_recent_evidence(tmp_path, tailer):
    log = tmp_path / "train.log"
    append(log, "2020-01-01 00:00:00 old line\n")
    result = tailer.read(FilePosition(path=str(log)))
    assert result.last_output_at >= datetime.now(UTC) - timedelta(minutes=5)  # mtime beats an old source time


def test_fallback_engine_matches_hyperscan(tmp_path):
    if not chunkscan.HYPERSCAN_AVAILABLE:
        pytest.skip("hyperscan wheel not installed: nothing to compare the fallback with")
    log = tmp_path / "mixed.log"
    append(
        log,
        "".join(ITER.format(s=i % 60, i=i) for i in range(200))
        + "NCCL INFO x\nSegmentation fault\nSaving model checkpoint to /o/checkpoint-5\n",
    )
    with LogTailer(engine="python") as slow, LogTailer(engine="hyperscan") as fast:
        a, b = slow.read(FilePosition(path=str(log))), fast.read(FilePosition(path=str(log)))
    assert slow.engine == "python" and fast.engine == "hyperscan"
    assert [(e.event_id, e.signal) for e in a.events] == [(e.event_id, e.signal) for e in b.events]
    assert a.latest_progress.event_id == b.latest_progress.event_id


@given(data=st.binary(max_size=20_000), start=st.integers(-5, 20_005), end=st.integers(-5, 20_005))
def test_count_newlines_is_bytes_count(data, start, end):
    data = data.replace(b"a", b"\n")  # plenty of newlines
    assert count_newlines(data, max(start, 0), max(end, 0)) == data.count(b"\n", max(start, 0), max(end, 0))
    assert count_newlines(bytearray(data), max(start, 0), max(end, 0)) == data.count(b"\n", max(start, 0), max(end, 0))


def test_big_chunks_in_a_reused_buffer_read_like_small_chunks(tmp_path):
    """Chunks of a megabyte or more go through one reused buffer; the findings must not change."""
    log = tmp_path / "big.log"
    body = []
    for i in range(20000):
        body.append(ITER.format(s=i % 60, i=i))
        if i % 997 == 0:
            body.append(f"Saving model checkpoint to /o/checkpoint-{i}\n")
        if i % 1500 == 7:
            body.append("[rank3]:[W1130 ProcessGroupNCCL.cpp:4115] Warning: NCCL error handling is enabled\n")
    append(log, "".join(body) + "Segmentation fault\n" + ITER.format(s=1, i=20001) + "partial line, no newline")
    assert log.stat().st_size > 2 * REUSE_BUFFER_BYTES
    results = []
    for chunk_size in (128 * 1024, REUSE_BUFFER_BYTES):
        with LogTailer(chunk_size=chunk_size, max_bytes=3 * REUSE_BUFFER_BYTES // 2) as tailer:
            _, events, progress, position = read_all(tailer, FilePosition(path=str(log)))
        results.append(([(e.event_id, e.line_number, e.offset, e.signal) for e in events], progress.event_id, position))
    assert results[0] == results[1]
    events, _, position = results[1]
    assert (
        len(events) == 21 + 1 and events[-1][3].category == "SEGFAULT" and position.line_number == 20000 + 21 + 14 + 2
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    chunks=st.lists(
        st.one_of(
            st.binary(max_size=300),
            st.sampled_from(
                [
                    b"\r",
                    b"\x00",
                    b"\n",
                    b"\xff\xfe",
                    b"Segmentation fault\n",
                    b"Traceback (most recent call last):\n",
                    b"Epoch 0:  5%|",
                    b" iteration 1/ 2 |",
                ]
            ),
            st.builds(lambda n: b"z" * n, st.integers(0, 200_000)),
        ),
        max_size=12,
    )
)
def test_no_byte_sequence_breaks_the_reader(tmp_path_factory, chunks):
    log = tmp_path_factory.mktemp("prop") / "any.log"
    position = FilePosition(path=str(log))
    with LogTailer(chunk_size=128 * 1024, line_cap=64 * 1024, traceback_wait=0.0) as tailer:
        for chunk in chunks:
            append(log, chunk)
            _, events, _, position = read_all(tailer, position)
            for event in events:
                assert len(event.text) <= 64 * 1024 and event.line_number >= 1
        assert position.offset <= (log.stat().st_size if log.exists() else 0)


def test_live_reads_arm_on_the_first_strong_counter_line(tmp_path, tailer):
    # torchlab's DDP program prints "iteration N | loss X | ..." (no "/M" total): fed to the file one line per
    # read, as the collector sees a running job; a counter next to a metric field arms on its first line.
    source = (Path(__file__).resolve().parents[1] / "fixtures" / "torchlab" / "ddp-clean.log").read_bytes()
    lines = source.split(b"\n")
    log = tmp_path / "job.out"
    log.write_bytes(b"")
    position = FilePosition(path=str(log))
    markers = []
    for number, raw in enumerate(lines[:6], start=1):
        append(log, raw + b"\n")
        result = tailer.read(position)
        position = result.position
        if result.latest_progress is not None:
            markers.append((number, result.latest_progress.line_number, result.latest_progress.signal))
    assert [(n, at) for n, at, _ in markers] == [(3, 3), (4, 4), (5, 5), (6, 6)]
    assert all(m.arms and m.rule == "structure:iteration" for _, _, m in markers)
    assert markers[0][2].iteration == 1


def test_live_reads_never_arm_on_a_bare_counter_line(tmp_path, tailer):
    # realworld pytorch-save-cannot-open-001.log: "Start from epoch 0" (line 4) is a counter with no total and no
    # metric: no marker; "Epoch 0, time usage: ..., average loss: ..." (line 9) prints a metric and arms.
    lines = Path(__file__).resolve().parents[1] / "fixtures" / "realworld" / "pytorch-save-cannot-open-001.log"
    raw_lines = lines.read_bytes().split(b"\n")
    log = tmp_path / "job.out"
    log.write_bytes(b"\n".join(raw_lines[:8]) + b"\n")
    result = tailer.read(FilePosition(path=str(log)))
    assert b"Start from epoch 0" in log.read_bytes() and result.latest_progress is None
    append(log, raw_lines[8] + b"\n")
    result = tailer.read(result.position)
    assert result.latest_progress is not None and result.latest_progress.line_number == 9
    assert result.latest_progress.signal.arms


def test_live_throughput_comes_from_the_progress_parse(tmp_path, tailer):
    # realworld maxtext-progress-002.log: "completed step: 9, seconds: 1.341, TFLOP/s/device: 257.929,
    # Tokens/s/device: 36653.244, loss: 0.000" — no configured rate rule reads it; the sample is the rates of the
    # same reading that gave the progress marker.
    source = Path(__file__).resolve().parents[1] / "fixtures" / "realworld" / "maxtext-progress-002.log"
    log = tmp_path / "job.out"
    log.write_bytes(source.read_bytes())
    result = tailer.read(FilePosition(path=str(log)))
    assert result.latest_progress is not None and result.latest_throughput is not None
    assert result.latest_progress.signal.iteration == 9
    assert result.latest_throughput.offset == result.latest_progress.offset
    assert result.latest_throughput.signal.rules == ("structure",)
    assert result.latest_throughput.signal.values == {"tflops_per_gpu": 257.929, "tokens_per_s": 36653.244}


def test_a_configured_rate_rule_wins_its_line(tmp_path, tailer):
    # realworld horovod-progress-002.log: the default `it_per_s` rule reads "7.69it/s"; the structural sample of
    # the same line is not added a second time.
    source = Path(__file__).resolve().parents[1] / "fixtures" / "realworld" / "horovod-progress-002.log"
    log = tmp_path / "job.out"
    log.write_bytes(source.read_bytes().split(b"\n")[0] + b"\n")
    result = tailer.read(FilePosition(path=str(log)))
    assert [event.signal.rules for event in result.throughput] == [("it_per_s",)]


def test_live_reads_arm_a_resumed_run_on_its_first_counter_past_the_loaded_checkpoint(tmp_path, tailer):
    # The retry of torchlab's DDP job (its own file) loads iter_5.pt and prints "iteration 6 | ...": one counter
    # line past the loaded iteration is an advance, so a retry that hangs or fails one step later is armed.
    source = (Path(__file__).resolve().parents[1] / "fixtures" / "torchlab" / "ddp-kill.log").read_text()
    lines = source.splitlines()
    start = next(i for i, text in enumerate(lines) if text.startswith("loaded checkpoint from"))
    log = tmp_path / "job.out"
    log.write_text("\n".join(lines[start - 2 : start + 2]) + "\n")  # start-up lines, the load, iteration 6
    result = tailer.read(FilePosition(path=str(log)))
    marker = result.latest_progress
    assert marker is not None and marker.signal.arms and marker.signal.iteration == 6
    # without the load line that line still arms: it carries a metric (loss), a training loop's mark
    other = tmp_path / "other.out"
    other.write_text("\n".join([*lines[start - 2 : start], lines[start + 1]]) + "\n")
    alone = tailer.read(FilePosition(path=str(other))).latest_progress
    assert alone is not None and alone.signal.arms
    # a bare counter (no metric, no total) arms on its first line only past a loaded checkpoint
    bare = tmp_path / "bare.out"
    bare.write_text("\n".join([lines[start], "iteration 6"]) + "\n")
    resumed = tailer.read(FilePosition(path=str(bare))).latest_progress
    assert resumed is not None and resumed.signal.arms and resumed.signal.iteration == 6
    fresh = tmp_path / "fresh.out"
    fresh.write_text("iteration 6\n")
    first = tailer.read(FilePosition(path=str(fresh))).latest_progress
    assert first is None or not first.signal.arms


def test_live_reads_learn_an_unknown_counter_with_the_template_miner(tmp_path, tailer):
    # a format of our own (no library prints it): a counter without a keyword, then metric values
    log = tmp_path / "job.out"
    log.write_bytes(b"")
    position = FilePosition(path=str(log))
    armed = []
    for n in (10, 20, 30, 40):
        append(log, f"train {n}: 2.{n:02d}31 0.0010 ok\n")
        result = tailer.read(position)
        position = result.position
        armed.append(result.latest_progress.signal.iteration if result.latest_progress else None)
    assert armed == [None, None, 30, 40]


def test_an_operator_progress_rule_wins_a_strong_counter_line(tmp_path):
    # The operator says torchlab's "iteration N | loss X" lines are pretraining (say, a warm-up loop): their rule
    # decides the phase of the marker on that line; structure does not add a second marker for it.
    ruleset = parse_signature_config(
        "[[progress]]\nname = 'warmup_iterations'\nphase = 'pretraining'\nanchors = ['iteration ']\n"
        "pattern = '^iteration (?P<iteration>\\d+) \\|'\n"
    )
    source = (Path(__file__).resolve().parents[1] / "fixtures" / "torchlab" / "ddp-clean.log").read_bytes()
    log = tmp_path / "job.out"
    log.write_bytes(b"\n".join(source.split(b"\n")[:4]) + b"\n")
    with LogTailer(ruleset, tz=UTC, traceback_wait=0.0, all_progress=True) as tailer:
        result = tailer.read(FilePosition(path=str(log)))
    assert [(e.line_number, e.signal.rule, e.signal.phase) for e in result.progress] == [
        (3, "warmup_iterations", "pretraining"),
        (4, "warmup_iterations", "pretraining"),
    ]
