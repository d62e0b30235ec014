"""`recovery check-policy`: a comment's verdict, problems and exit code."""

from __future__ import annotations

import io
import json
from pathlib import Path

from app.authoring import policy_check
from app.infra.config import Settings

GUIDE_COMMENT = (
    '{"APS":{"workflow_id":"training-example","environment":"customer-slurm","mode":"observe",'
    '"auto_resume_mode":"requeue","max_requeue_times":1}}'
)


def run(text, tmp_path: Path, *, as_json=False, **overrides):
    settings = Settings.build(data_dir=str(tmp_path), environment="customer-slurm", **overrides)
    out = io.StringIO()
    code = policy_check.run(text, as_json=as_json, settings=settings, out=out)
    return code, out.getvalue()


def test_guide_comment_would_enrol(tmp_path):
    code, text = run(GUIDE_COMMENT, tmp_path)
    assert code == 0
    assert text.startswith("VERDICT: would be ENROLLED")
    assert "log_based_timeout_threshold_pretraining" in text


def test_pasted_directive_line_is_understood(tmp_path):
    assert run(f"#SBATCH --comment='{GUIDE_COMMENT}'", tmp_path)[0] == 0
    assert run(f"--comment '{GUIDE_COMMENT}'", tmp_path)[0] == 0


def test_invalid_policy_lists_errors_with_paths(tmp_path):
    code, text = run('{"APS":{"environment":"customer-slurm","mode":"ACT"}}', tmp_path)
    assert code == 1
    assert "$.APS.mode" in text


def test_environment_mismatch(tmp_path):
    code, text = run(GUIDE_COMMENT.replace("customer-slurm", "other"), tmp_path)
    assert code == 1
    assert "ENVIRONMENT_MISMATCH" in text.splitlines()[0]


def test_ordinary_comment_is_not_enrolled(tmp_path):
    assert run("just a note", tmp_path)[0] == 1


def test_empty_input_is_a_usage_error(tmp_path):
    assert run("", tmp_path)[0] == 2
    assert run(None, tmp_path)[0] == 2


def test_json_output(tmp_path):
    code, text = run(GUIDE_COMMENT, tmp_path, as_json=True, acknowledge_scheduler_actions=True)
    payload = json.loads(text)
    assert code == 0 and payload["enrolled"] is True
    assert payload["policy_result"]["status"] == "VALID"
    assert payload["mode"]["mode"] == "observe"  # the job asked for observe
    assert payload["partition_checked"] is False
