"""check-policy/check-script know what they judge against (flags, a running service, nothing), suggest the nearest
key for a typo, and check-log counts the silence after a log's last line."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest

from app.authoring import log_check, policy_check, script_check
from app.authoring.target import resolve
from app.domain.admission.policy import parse_comment
from app.infra.config import Settings
from app.infra.context import AppContext
from app.main import create_app
from tests.views.server import serve

COMMENT = '{"APS":{"environment":"prod","max_requeue_time":3}}'


def test_a_typo_names_the_nearest_key_and_the_default_used_instead() -> None:
    (warning,) = parse_comment(COMMENT).warnings
    assert warning.message == (
        "unknown key; kept but not used; did you mean max_requeue_times? Without it, max_requeue_times takes its "
        "default null (the site ceiling applies)"
    )
    assert "did you mean" not in parse_comment('{"APS":{"environment":"prod","colour":1}}').warnings[0].message


def test_without_environment_or_server_it_says_so_and_does_not_refuse_for_that(tmp_path: Path) -> None:
    settings = Settings.build(data_dir=str(tmp_path))  # a laptop: environment 'default'
    out = io.StringIO()
    judge = lambda comment: resolve(settings, comment=comment, env={})  # noqa: E731
    code = policy_check.run(COMMENT, as_json=False, settings=settings, out=out, target=judge)
    text = out.getvalue()
    assert code == 0 and "Judged WITHOUT knowing the installation" in text and "assumed environment 'prod'" in text
    assert "1 key(s) are not recognised" in text
    strict = lambda comment: resolve(settings, environment="dev", partitions="gpu", comment=comment, env={})  # noqa: E731
    out = io.StringIO()
    assert policy_check.run(COMMENT, as_json=True, settings=settings, out=out, target=strict) == 1
    judged = json.loads(out.getvalue())["judged_against"]
    assert judged == {
        "environment": "dev",
        "managed_partitions": ["gpu"],
        "source": "--environment, --partitions",
        "known": True,
    }


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_server_tells_its_environment_and_partitions(database, tmp_path: Path) -> None:
    served = Settings.build(
        database_url=database.url,
        data_dir=str(tmp_path),
        environment="site-a",
        managed_partitions="gpu,a100",
        dev_no_auth=True,
    )
    app = create_app(served, ctx=AppContext(settings=served, engine=database.engine, sessions=database.sessions))
    script = tmp_path / "train.sbatch"
    script.write_text(
        "#!/bin/bash\n#SBATCH --requeue\n#SBATCH --partition=cpu\n"
        '#SBATCH --comment=\'{"APS":{"environment":"site-a"}}\'\nsrun python train.py\n'
    )
    laptop = Settings.build(data_dir=str(tmp_path))
    async with serve(app) as base:
        judge = lambda comment: resolve(laptop, server=base, comment=comment, env={})  # noqa: E731
        out = io.StringIO()
        code = await asyncio.to_thread(
            script_check.run, str(script), as_json=True, settings=laptop, out=out, target=judge
        )
    report = json.loads(out.getvalue())
    assert code == 1 and report["admission"]["status"] == "UNMANAGED_PARTITION"  # cpu is not gpu or a100
    assert report["judged_against"]["environment"] == "site-a" and report["judged_against"]["source"].startswith(
        "asked the service at http://127.0.0.1:"
    )


def test_check_log_counts_the_silence_after_the_last_line(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(
        "2025-01-01T00:00:00Z iteration 10/100 | lm loss: 2.1\n2025-01-01T00:00:30Z iteration 11/100 | lm loss: 2.0\n"
    )
    policy = '{"APS":{"environment":"x","anomaly_detection_config":{"log_based_timeout_threshold_trainingloop":60}}}'
    out = io.StringIO()
    log_check.run(str(log), as_json=True, settings=Settings.build(data_dir=str(tmp_path)), out=out, policy=policy)
    hang = json.loads(out.getvalue())["hang_detector"]
    end = hang["end_of_file"]
    assert hang["would_raise_no_progress_at_line"] is None  # no gap between its lines reaches the threshold
    assert end["last_line"] == 2 and end["threshold_seconds"] == 60 and end["would_have_raised_by_now"]
    assert end["would_raise_at"].startswith("2025-01-01T00:01:30")
