"""`recovery check-log`: what a job author learns about a log file."""

import io
import json
from pathlib import Path

from app.authoring.log_check import EXIT_OK, EXIT_USAGE, run
from app.infra.config import Settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def check(path, tmp_path, as_json=True, **overrides):
    out = io.StringIO()
    code = run(str(path), as_json=as_json, settings=Settings.build(data_dir=str(tmp_path), **overrides), out=out)
    return code, out.getvalue()


def test_megatron_log_report(tmp_path):
    code, text = check(FIXTURES / "megatron_crash.log", tmp_path)
    data = json.loads(text)
    assert code == EXIT_OK
    crashes = [(c["category"], c["nodes"], c["xid"]) for c in data["crash_signatures"]]
    assert crashes == [("CUDA_OOM", [], None), ("XID", ["node002"], 79), ("NODE_FAIL", ["node002"], None)]
    # "loading checkpoint ... at iteration 1000" then "successfully loaded ... at iteration 1000": one load.
    assert [(c["kind"], c["iteration"]) for c in data["checkpoints"]] == [("loaded", 1000), ("saved", 1010)]
    hang = data["hang_detector"]
    assert hang["armed"] and hang["first_marker"]["phase"] == "pretraining" and hang["first_marker"]["line"] == 8
    assert hang["thresholds_seconds"] == {"pretraining": 960, "trainingloop": 840}
    assert hang["would_raise_no_progress_at_line"] == 21 and hang["no_progress_phase"] == "trainingloop"
    assert data["progress"]["trainingloop"]["count"] == 20
    assert data["throughput"]["tflops_per_gpu"]["min"] == 400 and data["throughput"]["tflops_per_gpu"]["max"] == 404


def test_hf_log_report_human(tmp_path):
    code, text = check(FIXTURES / "hf_crash.log", tmp_path, as_json=False)
    assert code == EXIT_OK
    assert "CUDA_ERROR" in text and "arms at line 1 in phase pretraining" in text
    assert "no silence long enough" in text and "samples_per_s: 1 samples" in text


def test_generic_training_started_does_not_arm(tmp_path):
    log = tmp_path / "plain.log"
    log.write_text("training started\n2026-01-01 00:00:00 hello\n2026-01-01 05:00:00 still here\n")
    code, text = check(log, tmp_path, as_json=False)
    assert code == EXIT_OK and "would NOT arm" in text


def test_signatures_file_is_used(tmp_path):
    config = tmp_path / "signatures.toml"
    config.write_text(
        '[[progress]]\nname = "hb"\nphase = "trainingloop"\nanchors = ["HEARTBEAT"]\npattern = "HEARTBEAT"\n'
    )
    log = tmp_path / "custom.log"
    log.write_text("2026-01-01 00:00:00 HEARTBEAT\n2026-01-01 00:20:00 HEARTBEAT\n")
    code, text = check(log, tmp_path, signatures_file=str(config))
    hang = json.loads(text)["hang_detector"]
    assert code == EXIT_OK and hang["armed"] and hang["would_raise_no_progress_at_line"] == 2


def test_usage_errors(tmp_path):
    assert check(tmp_path / "missing.log", tmp_path)[0] == EXIT_USAGE
    log = tmp_path / "x.log"
    log.write_text("x\n")
    bad = tmp_path / "bad.toml"
    bad.write_text("[[crash]\n")
    assert check(log, tmp_path, signatures_file=str(bad))[0] == EXIT_USAGE


def _policy(**detection):
    return json.dumps({"APS": {"environment": "customer-slurm", "anomaly_detection_config": detection}})


def test_the_jobs_policy_sets_the_thresholds(tmp_path):
    out = io.StringIO()
    policy = _policy(log_based_timeout_threshold_trainingloop=100000, log_based_timeout_threshold_pretraining=50)
    code = run(
        str(FIXTURES / "megatron_crash.log"),
        as_json=True,
        settings=Settings.build(data_dir=str(tmp_path)),
        out=out,
        policy=policy,
    )
    hang = json.loads(out.getvalue())["hang_detector"]
    assert code == EXIT_OK
    assert hang["thresholds_seconds"] == {"pretraining": 50, "trainingloop": 100000}
    assert hang["thresholds_from"] == "the given policy"
    assert hang["would_raise_no_progress_at_line"] != 21  # the default threshold's verdict no longer holds


def test_the_jobs_script_sets_the_thresholds(tmp_path):
    script = tmp_path / "job.sbatch"
    comment = _policy(log_based_timeout_threshold_trainingloop=1234)
    script.write_text(f"#!/bin/bash\n#SBATCH --comment='{comment}'\nsrun python train.py\n")
    out = io.StringIO()
    code = run(
        str(FIXTURES / "megatron_crash.log"),
        as_json=False,
        settings=Settings.build(data_dir=str(tmp_path)),
        out=out,
        script=str(script),
    )
    assert code == EXIT_OK
    assert f"trainingloop 1234 s (from the policy in {script})" in out.getvalue()


def test_a_bad_policy_or_script_is_a_usage_error(tmp_path, capsys):
    settings = Settings.build(data_dir=str(tmp_path))
    log = str(FIXTURES / "megatron_crash.log")
    assert run(log, as_json=True, settings=settings, policy='{"APS": {"mode": "act"}}') == EXIT_USAGE
    assert "not a valid policy" in capsys.readouterr().err
    plain = tmp_path / "plain.sbatch"
    plain.write_text("#!/bin/bash\nsrun true\n")
    assert run(log, as_json=True, settings=settings, script=str(plain)) == EXIT_USAGE
    assert "no #SBATCH --comment" in capsys.readouterr().err
    assert run(log, as_json=True, settings=settings, script=str(tmp_path / "missing")) == EXIT_USAGE
    assert run(log, as_json=True, settings=settings, policy=_policy(), script=str(plain)) == EXIT_USAGE


# A cascade as a user would paste it: lines quoted from https://github.com/NVIDIA/nccl/issues/1405 (the IB
# failure naming its host), then the launcher's summary from https://github.com/lzhxmu/CPPO/issues/6.
CASCADE = "\n".join(
    [
        "kp-ddp-worker-0:3468:3905 [4] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion from peer 10.216.210.236<54862> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid fd00:1148:9000:5000:4:200:3:ff22 remoteGidsfd00:1148:9000:5000:4:200:3:ff1f",  # noqa: E501 - quoted as printed
        "kp-ddp-worker-0:3468:3905 [4] NCCL INFO transport/net.cc:1302 -> 6",
        "Root Cause (first observed failure):",
        "[0]:",
        "  time      : 2025-05-21_15:43:03",
        "  host      : kp-ddp-worker-0",
        "  rank      : 0 (local_rank: 0)",
        "  exitcode  : -9 (pid: 14750)",
        "  error_file: <N/A>",
        "  traceback : Signal 9 (SIGKILL) received by PID 14750",
        "",
    ]
)


def test_root_cause_outlook_blame_and_advisor_verdict_json(tmp_path):
    log = tmp_path / "cascade.log"
    log.write_text(CASCADE)
    code, text = check(log, tmp_path)
    data = json.loads(text)
    assert code == EXIT_OK
    assert (data["primary_category"], data["outlook"]) == ("NCCL_ERROR", "infrastructure")
    assert data["blamed_nodes"] == [{"node": "kp-ddp-worker-0", "provenance": "line"}]
    assert data["root_cause"]["line"] == 1 and data["root_cause"]["consequences"] == 2
    assert [(c["category"], c["role"]) for c in data["crash_signatures"]] == [
        ("NCCL_ERROR", "primary"),
        ("HOST_OOM", "consequence"),
        ("HOST_OOM", "consequence"),
    ]
    assert data["advisor"]["would_retry"] is True and data["advisor"]["exclusions"] == ["kp-ddp-worker-0"]


def test_root_cause_human_output_and_allocation_from_nodes(tmp_path):
    log = tmp_path / "xid.log"
    log.write_text("NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus\n")
    out = io.StringIO()
    settings = Settings.build(data_dir=str(tmp_path))
    assert run(str(log), as_json=False, settings=settings, out=out, nodes="gpu17") == EXIT_OK
    text = out.getvalue()
    assert "Root cause: XID at line 1 (nvidia_xid)" in text
    assert "Outlook: infrastructure" in text and "Blamed nodes: gpu17 (from allocation)" in text
    assert "Advisor would retry: yes (RESTART, rule restart_allowed)" in text and "excluding gpu17" in text


def test_crash_free_log_has_no_verdict(tmp_path):
    log = tmp_path / "ok.log"
    log.write_text("validation finished: 0 errors, errors=0\n")
    data = json.loads(check(log, tmp_path)[1])
    assert (data["crashed"], data["primary_category"], data["outlook"], data["blamed_nodes"]) == (
        False,
        None,
        "none",
        [],
    )
    assert data["advisor"]["would_retry"] is None


def test_nodes_take_a_slurm_hostlist_and_name_the_failed_process(tmp_path):
    """A real torchrun capture (tests/fixtures/torchrun/): rank 1 SIGKILLed on node2, the survivor's gloo error."""
    capture = Path(__file__).resolve().parent.parent / "fixtures" / "torchrun" / "ddp-kill.log"
    settings = Settings.build(data_dir=str(tmp_path))
    out = io.StringIO()
    assert run(str(capture), as_json=True, settings=settings, out=out, nodes="node[1-2]") == EXIT_OK
    data = json.loads(out.getvalue())
    root = data["root_cause"]
    assert (data["primary_category"], root["node"], root["rank"]) == ("HOST_OOM", "node2", 1)
    assert root["fingerprint_id"].startswith("fp-") and "Connection reset" not in root["text"]
    gloo = next(c for c in data["crash_signatures"] if "Connection reset by peer" in c["detail"])
    assert gloo["role"] == "known consequence"
    human = io.StringIO()
    assert run(str(capture), as_json=False, settings=settings, out=human, nodes="node[1-2]") == EXIT_OK
    assert "Root cause: HOST_OOM at line 58 (torch_elastic_sigkill) on node2, rank 1" in human.getvalue()
    assert "Fingerprint: fp-" in human.getvalue()
