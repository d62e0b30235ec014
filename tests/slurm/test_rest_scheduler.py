"""The slurmrestd adapter against a real slurmrestd (22.05, JWT and unix socket) on the lab's twin cluster."""

from __future__ import annotations

import dataclasses
import subprocess

import pytest

from app.config import Settings
from app.slurm.cli_scheduler import CliScheduler
from app.slurm.errors import JobNotFound, JobStateConflict, TransientSchedulerError
from app.slurm.rest_auth import SignedTokens, TokenFile
from app.slurm.rest_scheduler import RestScheduler, RestUnsupported
from tests.plugins.slurmrestd import RestLab, controller_outage

pytestmark = [pytest.mark.slurm]


def _settings(restlab: RestLab, **changes: object) -> Settings:
    base = Settings.build(cluster=restlab.cluster, slurmrestd_url=restlab.url, slurmrestd_jwt_key=restlab.jwt_key)
    return dataclasses.replace(base, **{"slurmrestd_user": restlab.user, **changes})  # type: ignore[arg-type]


def _rest(restlab: RestLab, **changes: object) -> RestScheduler:
    settings = _settings(restlab, **changes)
    fallback = CliScheduler(settings, env=restlab.slurm.env()) if settings.slurmrestd_cli_fallback else None
    return RestScheduler(settings, fallback=fallback)


async def test_discovers_the_newest_api_and_lists_jobs_with_a_signed_jwt(slurmrestd: RestLab) -> None:
    rest = _rest(slurmrestd)
    job_id = slurmrestd.slurm.submit(
        "#!/bin/bash\nsleep 30\n", sbatch_args=[*slurmrestd.as_user, "--requeue", "-o", "/dev/null"]
    )
    snapshot = await rest.list_jobs()
    await rest.aclose()
    assert rest.version == "v0.0.38" and rest.excluded_nodes_field is None  # 22.05 offers v0.0.36-v0.0.38
    assert isinstance(rest.tokens, SignedTokens)
    job = snapshot.get(job_id)
    assert job is not None and job.cluster == "restlab"
    assert snapshot.data_parser == "openapi/v0.0.38" and (snapshot.slurm_release or "").startswith("22.05")


async def test_unix_socket_needs_no_token(slurmrestd: RestLab) -> None:
    rest = RestScheduler(_settings(slurmrestd, slurmrestd_url=slurmrestd.socket_url, slurmrestd_jwt_key=""))
    snapshot = await rest.list_jobs()
    await rest.aclose()
    assert rest.tokens is None and snapshot.data_parser == "openapi/v0.0.38"


async def test_bad_token_is_refused_not_mistaken_for_an_empty_cluster(slurmrestd: RestLab, tmp_path) -> None:
    wrong = tmp_path / "wrong.key"
    wrong.write_bytes(b"x" * 48)
    rest = _rest(slurmrestd, slurmrestd_jwt_key=str(wrong))
    # slurmrestd passes the token on; slurmctld rejects its signature and the answer is an error, not "no jobs"
    with pytest.raises(TransientSchedulerError, match="Failed while looking for jobs"):
        await rest.list_jobs()
    await rest.aclose()


async def test_release_and_cancel_over_rest_classify_errors_like_the_cli(slurmrestd: RestLab) -> None:
    lab = slurmrestd.slurm
    rest = _rest(slurmrestd)
    job_id = lab.submit("#!/bin/bash\nsleep 60\n", sbatch_args=[*slurmrestd.as_user, "--requeue", "-o", "/dev/null"])
    lab.wait_state(job_id, "RUNNING")
    await rest.requeue_hold(job_id)  # no REST form: the CLI fallback runs scontrol requeuehold
    shown = lab.scontrol_show(job_id)
    assert shown["Restarts"] == "1" and shown["Priority"] == "0"
    await rest.set_excluded_nodes(job_id, ["node8"])  # v0.0.38 has no excluded_nodes: CLI fallback
    assert lab.scontrol_show(job_id)["ExcNodeList"] == "node8"
    await rest.release(job_id)  # POST /slurm/v0.0.38/job/{id} {"hold": false}
    assert lab.scontrol_show(job_id)["Priority"] != "0"
    with pytest.raises(JobNotFound):
        await rest.release(999_999_999)
    await rest.cancel(job_id)
    lab.wait_state(job_id, "CANCELLED")
    await rest.cancel(job_id)  # already ended: not an error, as scancel
    with pytest.raises(JobStateConflict):
        await rest.release(job_id)
    await rest.aclose()


async def test_without_cli_fallback_requeue_hold_is_refused_with_the_reason(slurmrestd: RestLab) -> None:
    rest = _rest(slurmrestd, slurmrestd_cli_fallback=False)
    with pytest.raises(RestUnsupported) as caught:
        await rest.requeue_hold(1)
    await rest.aclose()
    assert "no form for requeue_hold" in str(caught.value)


async def test_without_scontrol_on_the_host_requeue_hold_is_refused_not_retried(slurmrestd: RestLab, tmp_path) -> None:
    settings = _settings(slurmrestd, slurm_bin_dir=str(tmp_path))  # a directory without Slurm's commands
    rest = RestScheduler(settings)
    with pytest.raises(RestUnsupported, match="scontrol is not installed"):
        await rest.requeue_hold(1)
    await rest.aclose()


async def test_array_task_is_named_in_the_path(slurmrestd: RestLab) -> None:
    lab = slurmrestd.slurm
    rest = _rest(slurmrestd)
    array_id = lab.submit(
        "#!/bin/bash\nsleep 60\n", sbatch_args=[*slurmrestd.as_user, "--array=1-2", "-o", "/dev/null"]
    )
    lab.wait_state(array_id, "RUNNING")
    snapshot = await rest.list_jobs()
    tasks = {j.array_task_id: j for j in snapshot.jobs if j.array_job_id == array_id}
    await rest.cancel(tasks[2].scheduler_id)  # DELETE /slurm/v0.0.38/job/<array>_2
    lab.wait_state(tasks[2].job_id, "CANCELLED")
    assert lab.state(tasks[1].job_id) == "RUNNING"
    await rest.aclose()


async def test_token_file_from_scontrol_token(slurmrestd: RestLab, tmp_path) -> None:
    result = subprocess.run(
        ["scontrol", "token", f"username={slurmrestd.user}", "lifespan=600"],
        env=slurmrestd.slurm.env(),
        capture_output=True,
        text=True,
        timeout=15,
        check=True,
    )
    token_file = tmp_path / "slurm_jwt"
    token_file.write_text(result.stdout)  # "SLURM_JWT=eyJ..."
    rest = _rest(slurmrestd, slurmrestd_jwt_key="", slurmrestd_token_file=str(token_file), slurmrestd_user="")
    snapshot = await rest.list_jobs()
    await rest.aclose()
    assert isinstance(rest.tokens, TokenFile) and rest.tokens.token().user == slurmrestd.user  # from claim `sun`
    assert snapshot.data_parser == "openapi/v0.0.38"


async def test_slurmctld_outage_is_could_not_observe_not_an_empty_cluster(slurmrestd: RestLab) -> None:
    rest = _rest(slurmrestd)
    job_id = slurmrestd.slurm.submit("#!/bin/bash\nsleep 60\n", sbatch_args=[*slurmrestd.as_user, "-o", "/dev/null"])
    assert (await rest.list_jobs()).get(job_id) is not None
    with controller_outage():
        # slurmrestd 22.05 answers HTTP 500 with Slurm's error ("Failed while looking for jobs") instead
        # of jobs: transient, so the observer records scheduler.unreachable and marks nothing gone
        with pytest.raises(TransientSchedulerError, match="Failed while looking for jobs"):
            await rest.list_jobs()
    assert (await rest.list_jobs()).get(job_id) is not None
    await rest.aclose()


async def test_array_task_with_the_array_id_is_held_and_released_alone(slurmrestd: RestLab) -> None:
    lab = slurmrestd.slurm
    rest = _rest(slurmrestd)
    array_id = lab.submit(
        "#!/bin/bash\nsleep 60\n", sbatch_args=[*slurmrestd.as_user, "--requeue", "--array=1-2", "-o", "/dev/null"]
    )
    lab.wait_state(array_id, "RUNNING")
    snapshot = await rest.list_jobs()
    tasks = {j.array_task_id: j for j in snapshot.jobs if j.array_job_id == array_id}
    assert tasks[2].job_id == array_id  # the last task keeps the array's id
    await rest.requeue_hold(tasks[2].scheduler_id)  # scontrol requeuehold <array>_2 (fallback)
    await rest.release(tasks[2].scheduler_id)  # POST /slurm/v0.0.38/job/<array>_2 {"hold": false}
    # `scontrol show job <array id>` lists every task: ask for the task by its pair
    shown = lab.scontrol_show(tasks[2].scheduler_id)  # type: ignore[arg-type]
    assert (shown["JobId"], shown["Restarts"]) == (str(array_id), "1") and shown["Priority"] != "0"
    sibling = lab.scontrol_show(tasks[1].job_id)
    assert sibling["Restarts"] == "0" and sibling["JobState"] == "RUNNING"
    await rest.aclose()
