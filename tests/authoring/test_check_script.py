"""`recovery check-script`: real batch scripts on disk, their verdicts, findings and exit codes."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from app.authoring import script_check
from app.infra.config import Settings

GUIDE_REQUEUE = "#SBATCH --requeue"
GUIDE_COMMENT = (
    """#SBATCH --comment='{"APS":{"workflow_id":"training-example","environment":"customer-slurm","mode":"observe","""
    """"auto_resume_mode":"requeue","max_requeue_times":1}}'"""
)


def make_settings(tmp_path: Path, **overrides) -> Settings:
    values = {"data_dir": str(tmp_path / "data"), "environment": "customer-slurm", "managed_partitions": ("gpu",)}
    values.update(overrides)
    return Settings.build(**values)


def write(tmp_path: Path, *lines: str, name: str = "train.sbatch") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def good_script(
    *extra_directives: str, body: tuple[str, ...] = ("srun python -u train.py --resume",), comment: str = GUIDE_COMMENT
) -> tuple[str, ...]:
    return (
        "#!/bin/bash",
        "#SBATCH --job-name=train",
        "#SBATCH --partition=gpu",
        "#SBATCH --output=logs/train-%j.out",
        GUIDE_REQUEUE,
        comment,
        *extra_directives,
        "",
        *body,
    )


def check(path: Path, settings: Settings, *, as_json: bool = False) -> tuple[int, str]:
    out = io.StringIO()
    code = script_check.run(str(path), as_json=as_json, settings=settings, out=out)
    return code, out.getvalue()


def check_json(path: Path, settings: Settings) -> tuple[int, dict]:
    code, text = check(path, settings, as_json=True)
    return code, json.loads(text)


def codes(report: dict) -> list[str]:
    return [p["code"] for p in report["problems"]]


def test_user_guide_script_is_enrolled_and_says_so_first(tmp_path):
    code, text = check(write(tmp_path, *good_script()), make_settings(tmp_path))
    assert code == 0
    first_line = text.splitlines()[0]
    assert first_line.startswith("VERDICT: would be ENROLLED")
    assert "'gpu' is managed" in first_line
    assert "training-example" in text
    assert "960 s" in text and "840 s" in text
    assert "min(1, site ceiling 3) = 1" in text
    assert "Effective mode: observe" in text


def test_user_guide_two_directives_alone_use_the_default_output(tmp_path):
    path = write(tmp_path, "#!/bin/bash", GUIDE_REQUEUE, GUIDE_COMMENT, "", "srun python -u train.py")
    code, report = check_json(path, make_settings(tmp_path, managed_partitions=("*",)))
    assert code == 0
    assert report["enrolled"] is True
    assert report["logs"]["stdout"] == "slurm-%j.out"
    assert report["logs"]["stdout_source"] == "Slurm default"
    assert report["requeue"] == "requeue"
    assert "path-not-per-job" not in codes(report)
    # the default file is the same for every attempt of the job
    assert "path-shared-across-attempts" in codes(report)


def test_no_partition_with_an_allowlist_is_not_confirmed(tmp_path):
    path = write(tmp_path, "#!/bin/bash", GUIDE_REQUEUE, GUIDE_COMMENT, "true")
    code, text = check(path, make_settings(tmp_path))
    assert code == 1
    assert text.startswith("VERDICT: NOT ENROLLED (UNMANAGED_PARTITION)")
    assert "default partition" in text.splitlines()[0]


def test_unmanaged_partition_is_not_enrolled(tmp_path):
    lines = [line.replace("--partition=gpu", "-p cpu") for line in good_script()]
    code, report = check_json(write(tmp_path, *lines), make_settings(tmp_path))
    assert code == 1
    assert report["admission"]["status"] == "UNMANAGED_PARTITION"
    assert report["partition"] == {"name": "cpu", "managed": False, "explanation": report["partition"]["explanation"]}


def test_environment_mismatch_is_not_enrolled(tmp_path):
    code, text = check(write(tmp_path, *good_script()), make_settings(tmp_path, environment="Customer-Slurm"))
    assert code == 1
    assert text.startswith("VERDICT: NOT ENROLLED (ENVIRONMENT_MISMATCH)")
    assert "case-sensitive" in text


def test_invalid_policy_reports_json_paths(tmp_path):
    bad = (
        """#SBATCH --comment='{"APS":{"environment":"customer-slurm","max_requeue_times":"1","""
        """"anomaly_detection_config":{"log_based_timeout_enabled":"true"}}}'"""
    )
    code, text = check(write(tmp_path, *good_script(comment=bad)), make_settings(tmp_path))
    assert code == 1
    assert text.startswith("VERDICT: NOT ENROLLED (NOT_ENROLLED)")
    assert "$.APS.max_requeue_times" in text
    assert "$.APS.anomaly_detection_config.log_based_timeout_enabled" in text


def test_lowercase_wrapper_is_explained(tmp_path):
    bad = """#SBATCH --comment='{"aps":{"environment":"customer-slurm"}}'"""
    code, text = check(write(tmp_path, *good_script(comment=bad)), make_settings(tmp_path))
    assert code == 1
    assert "upper case" in text.splitlines()[0]


def test_missing_comment_is_not_enrolled(tmp_path):
    lines = [line for line in good_script() if not line.startswith("#SBATCH --comment")]
    code, report = check_json(write(tmp_path, *lines), make_settings(tmp_path))
    assert code == 1
    assert report["admission"]["status"] == "NO_POLICY"
    assert "no-comment" in codes(report)


def test_missing_requeue_is_a_warning(tmp_path):
    lines = [line for line in good_script() if line != GUIDE_REQUEUE]
    code, report = check_json(write(tmp_path, *lines), make_settings(tmp_path))
    assert code == 0
    assert report["requeue"] == "site default (JobRequeue)"
    problem = next(p for p in report["problems"] if p["code"] == "no-requeue-flag")
    assert problem["severity"] == "warning"
    assert "JobRequeue" in problem["message"]


def test_no_requeue_is_an_error(tmp_path):
    lines = [("#SBATCH --no-requeue" if line == GUIDE_REQUEUE else line) for line in good_script()]
    code, report = check_json(write(tmp_path, *lines), make_settings(tmp_path))
    problem = next(p for p in report["problems"] if p["code"] == "no-requeue")
    assert problem["severity"] == "error"
    assert problem["line"] == 5
    assert report["requeue"] == "no-requeue"
    assert code == 0  # still enrolled: recovery records Advice, it just cannot requeue


def test_output_without_job_id_collides_across_jobs(tmp_path):
    lines = [line.replace("logs/train-%j.out", "logs/train.out") for line in good_script()]
    code, report = check_json(write(tmp_path, *lines), make_settings(tmp_path))
    problem = next(p for p in report["problems"] if p["code"] == "path-not-per-job")
    assert "logs/train.out" in problem["message"]
    assert problem["line"] == 4


def test_separate_error_path_without_job_id_is_flagged_too(tmp_path):
    code, report = check_json(write(tmp_path, *good_script("#SBATCH -e logs/err.txt")), make_settings(tmp_path))
    assert any(p["code"] == "path-not-per-job" and "stderr" in p["message"] for p in report["problems"])


def test_array_job_default_output_is_per_task(tmp_path):
    path = write(tmp_path, "#!/bin/bash", "#SBATCH --array=0-3", "#SBATCH -p gpu", GUIDE_REQUEUE, GUIDE_COMMENT, "true")
    _, report = check_json(path, make_settings(tmp_path))
    assert report["logs"]["stdout"] == "slurm-%A_%a.out"
    assert "path-not-per-job" not in codes(report)


def test_append_mode_without_shared_flag_asks_for_the_flag(tmp_path):
    code, report = check_json(write(tmp_path, *good_script("#SBATCH --open-mode=append")), make_settings(tmp_path))
    problem = next(p for p in report["problems"] if p["code"] == "path-shared-across-attempts")
    assert "--open-mode=append" in problem["message"]
    assert "log_file_paths_shared_across_attempts" in problem["message"]
    assert "SLURM_RESTART_COUNT" in problem["message"]


def test_shared_flag_silences_the_shared_path_warning(tmp_path):
    comment = (
        """#SBATCH --comment='{"APS":{"environment":"customer-slurm","log_file_paths_shared_across_attempts":true}}'"""
    )
    _, report = check_json(
        write(tmp_path, *good_script("#SBATCH --open-mode=append", comment=comment)), make_settings(tmp_path)
    )
    assert "path-shared-across-attempts" not in codes(report)


def test_truncate_with_shared_flag_warns_about_lost_evidence(tmp_path):
    comment = (
        """#SBATCH --comment='{"APS":{"environment":"customer-slurm","log_file_paths_shared_across_attempts":true}}'"""
    )
    _, report = check_json(
        write(tmp_path, *good_script("#SBATCH --open-mode=truncate", comment=comment)), make_settings(tmp_path)
    )
    assert "truncate-shared" in codes(report)


def test_per_attempt_redirect_counts_as_unique_paths(tmp_path):
    body = ('exec >"logs/train-${SLURM_JOB_ID}-${SLURM_RESTART_COUNT:-0}.out" 2>&1', "srun python -u train.py")
    _, report = check_json(write(tmp_path, *good_script(body=body)), make_settings(tmp_path))
    assert "path-shared-across-attempts" not in codes(report)
    assert "per-attempt-files" in codes(report)


def test_buffered_python_is_reported_with_its_line(tmp_path):
    _, report = check_json(write(tmp_path, *good_script(body=("srun python train.py",))), make_settings(tmp_path))
    problem = next(p for p in report["problems"] if p["code"] == "python-buffering")
    assert problem["line"] == 8
    assert "PYTHONUNBUFFERED" in problem["message"]


def test_unbuffered_script_has_no_buffering_problem(tmp_path):
    body = ("export PYTHONUNBUFFERED=1", "srun python train.py")
    _, report = check_json(write(tmp_path, *good_script(body=body)), make_settings(tmp_path))
    assert "python-buffering" not in codes(report)


def test_comment_after_the_first_command_is_ignored_like_sbatch(tmp_path):
    path = write(
        tmp_path, "#!/bin/bash", "#SBATCH -p gpu", GUIDE_REQUEUE, "module load cuda", GUIDE_COMMENT, "srun true"
    )
    code, report = check_json(path, make_settings(tmp_path))
    assert code == 1
    assert report["admission"]["status"] == "NO_POLICY"
    assert any(p["line"] == 5 and "ignores" in p["message"] for p in report["problems"])


def test_script_sbatch_would_refuse_is_not_enrolled(tmp_path):
    lines = good_script()[1:]  # no shebang
    code, text = check(write(tmp_path, *lines), make_settings(tmp_path))
    assert code == 1
    assert text.startswith("VERDICT: NOT ENROLLED (SBATCH_WOULD_REFUSE)")
    assert "#!" in text


def test_act_resolves_to_act_only_with_the_ceiling(tmp_path):
    comment = """#SBATCH --comment='{"APS":{"environment":"customer-slurm","mode":"act"}}'"""
    path = write(tmp_path, *good_script(comment=comment))
    _, report = check_json(path, make_settings(tmp_path))
    assert report["mode"]["mode"] == "observe"
    assert "RECOVERY_ACKNOWLEDGE_SCHEDULER_ACTIONS" in report["mode"]["reason"]
    _, report = check_json(path, make_settings(tmp_path, acknowledge_scheduler_actions=True))
    assert report["mode"]["mode"] == "act"


def test_json_output_is_complete(tmp_path):
    code, report = check_json(write(tmp_path, *good_script()), make_settings(tmp_path))
    assert code == 0
    assert set(report) >= {
        "file",
        "enrolled",
        "admission",
        "partition",
        "policy_result",
        "mode",
        "requeue",
        "logs",
        "problems",
        "directives",
    }
    assert (
        report["policy_result"]["policy"]["anomaly_detection_config"]["log_based_timeout_threshold_pretraining"] == 960
    )
    assert {"line": 3, "option": "partition", "value": "gpu"} in report["directives"]


@pytest.mark.parametrize("as_json", [False, True])
def test_missing_file_is_a_usage_error(tmp_path, as_json):
    code, text = check(tmp_path / "nope.sbatch", make_settings(tmp_path), as_json=as_json)
    assert code == 2
    assert "no such file" in text
    if as_json:
        assert "error" in json.loads(text)


def test_directory_is_a_usage_error(tmp_path):
    assert check(tmp_path, make_settings(tmp_path))[0] == 2


def test_non_utf8_script_does_not_crash(tmp_path):
    path = tmp_path / "bin.sbatch"
    path.write_bytes(b"#!/bin/bash\n#SBATCH -p gpu\n#SBATCH --comment=\xff\xfe\nsrun true\n")
    code, report = check_json(path, make_settings(tmp_path))
    assert code == 1
    assert report["admission"]["status"] == "NO_POLICY"
