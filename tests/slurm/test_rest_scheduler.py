"""The slurmrestd adapter against real slurmrestd: 22.05 (JWT and unix socket) on the lab's twin cluster, and the
24.11 and 26.05 labs' own slurmrestd (JWT) for the tests marked `slurm_versions`."""

from __future__ import annotations

import dataclasses
import subprocess

import pytest

from app.infra.config import Settings
from app.slurm.cli_scheduler import CliScheduler
from app.slurm.errors import JobNotFound, JobStateConflict, TransientSchedulerError
from app.slurm.rest_auth import SignedTokens, TokenFile
from app.slurm.rest_scheduler import RestScheduler, RestUnsupported
from tests.plugins.slurmrestd import RestLab, controller_outage

# how each release's slurmrestd refuses a token signed with another key (22.05: HTTP 500; 24.11+: HTTP 511)
BAD_TOKEN = "Failed while looking for jobs|Protocol authentication error"
# and how it answers the jobs listing while slurmctld is down
OUTAGE = "Failed while looking for jobs|Unable to contact slurm controller"

pytestmark = [pytest.mark.slurm]


def _settings(restlab: RestLab, **changes: object) -> Settings:
    base = Settings.build(cluster=restlab.cluster, slurmrestd_url=restlab.url, slurmrestd_jwt_key=restlab.jwt_key)
    return dataclasses.replace(base, **{"slurmrestd_user": restlab.user, **changes})  # type: ignore[arg-type]


def _rest(restlab: RestLab, **changes: object) -> RestScheduler:
    settings = _settings(restlab, **changes)
    fallback = CliScheduler(settings, env=restlab.slurm.env()) if settings.slurmrestd_cli_fallback else None
    return RestScheduler(settings, fallback=fallback)


@pytest.mark.slurm_versions
async def test_discovers_the_newest_api_and_lists_jobs_with_a_signed_jwt(rest_lab: RestLab) -> None:
    rest = _rest(rest_lab)
    job_id = rest_lab.slurm.submit(
        "#!/bin/bash\nsleep 30\n", sbatch_args=[*rest_lab.as_user, "--requeue", "-o", "/dev/null"]
    )
    snapshot = await rest.list_jobs()
    await rest.aclose()
    # 22.05 offers v0.0.36-v0.0.38, 24.11 v0.0.40-v0.0.42, 26.05 v0.0.42-v0.0.45 (the first with requeue)
    assert rest.version == rest_lab.api_version
    assert rest.excluded_nodes_field == (None if rest_lab.release == "22.05" else "list")
    assert (rest.requeue_path is not None) == (rest_lab.release == "26.05")
    assert isinstance(rest.tokens, SignedTokens)
    job = snapshot.get(job_id)
    assert job is not None and job.cluster == rest_lab.cluster
    assert (snapshot.data_parser or "").endswith(f"/{rest_lab.api_version}")
    assert (snapshot.slurm_release or "").startswith(rest_lab.release)


async def test_unix_socket_needs_no_token(slurmrestd: RestLab) -> None:
    rest = RestScheduler(_settings(slurmrestd, slurmrestd_url=slurmrestd.socket_url, slurmrestd_jwt_key=""))
    snapshot = await rest.list_jobs()
    await rest.aclose()
    assert rest.tokens is None and snapshot.data_parser == "openapi/v0.0.38"


@pytest.mark.slurm_versions
async def test_bad_token_is_refused_not_mistaken_for_an_empty_cluster(rest_lab: RestLab, tmp_path) -> None:
    wrong = tmp_path / "wrong.key"
    wrong.write_bytes(b"x" * 48)
    rest = _rest(rest_lab, slurmrestd_jwt_key=str(wrong))
    # slurmrestd passes the token on; slurmctld rejects its signature and the answer is an error, not "no jobs"
    with pytest.raises(TransientSchedulerError, match=BAD_TOKEN):
        await rest.list_jobs()
    await rest.aclose()


@pytest.mark.slurm_versions
async def test_release_and_cancel_over_rest_classify_errors_like_the_cli(rest_lab: RestLab) -> None:
    lab = rest_lab.slurm
    rest = _rest(rest_lab)
    job_id = lab.submit("#!/bin/bash\nsleep 60\n", sbatch_args=[*rest_lab.as_user, "--requeue", "-o", "/dev/null"])
    lab.wait_state(job_id, "RUNNING")
    # v0.0.45: GET .../job/{id}/requeue?Hold=true; before it no REST form: the CLI fallback's scontrol requeuehold
    held = await rest.requeue_hold(job_id)
    assert (held.command[0] == "GET") == (rest_lab.release == "26.05")
    shown = lab.scontrol_show(job_id)
    assert shown["Restarts"] == "1" and shown["Priority"] == "0"
    with pytest.raises(JobStateConflict):  # already held: "Job is pending execution", from REST and scontrol alike
        await rest.requeue_hold(job_id)
    excluded = await rest.set_excluded_nodes(job_id, [rest_lab.nodes[0]])  # v0.0.38 has no excluded_nodes: CLI
    assert (excluded.command[0] == "POST") == (rest_lab.release != "22.05")
    assert lab.scontrol_show(job_id)["ExcNodeList"] == rest_lab.nodes[0]
    await rest.release(job_id)  # POST /slurm/vX/job/{id} {"hold": false}
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


@pytest.mark.slurm_versions
async def test_array_task_is_named_in_the_path(rest_lab: RestLab) -> None:
    lab = rest_lab.slurm
    rest = _rest(rest_lab)
    array_id = lab.submit("#!/bin/bash\nsleep 60\n", sbatch_args=[*rest_lab.as_user, "--array=1-2", "-o", "/dev/null"])
    lab.wait_state(array_id, "RUNNING")
    snapshot = await rest.list_jobs()
    tasks = {j.array_task_id: j for j in snapshot.jobs if j.array_job_id == array_id}
    await rest.cancel(tasks[2].scheduler_id)  # DELETE /slurm/vX/job/<array>_2
    lab.wait_state(tasks[2].job_id, "CANCELLED")
    assert lab.state(tasks[1].job_id) == "RUNNING"
    await rest.aclose()


@pytest.mark.slurm_versions
async def test_token_file_from_scontrol_token(rest_lab: RestLab, tmp_path) -> None:
    result = subprocess.run(
        [str(rest_lab.slurm.bin_dir / "scontrol"), "token", f"username={rest_lab.user}", "lifespan=600"],
        env=rest_lab.slurm.env(),
        capture_output=True,
        text=True,
        timeout=15,
        check=True,
    )
    token_file = tmp_path / "slurm_jwt"
    token_file.write_text(result.stdout)  # "SLURM_JWT=eyJ..."
    rest = _rest(rest_lab, slurmrestd_jwt_key="", slurmrestd_token_file=str(token_file), slurmrestd_user="")
    snapshot = await rest.list_jobs()
    await rest.aclose()
    assert isinstance(rest.tokens, TokenFile) and rest.tokens.token().user == rest_lab.user  # from claim `sun`
    assert (snapshot.data_parser or "").endswith(rest_lab.api_version)


@pytest.mark.slurm_versions
async def test_slurmctld_outage_is_could_not_observe_not_an_empty_cluster(rest_lab: RestLab) -> None:
    rest = _rest(rest_lab)
    job_id = rest_lab.slurm.submit("#!/bin/bash\nsleep 60\n", sbatch_args=[*rest_lab.as_user, "-o", "/dev/null"])
    assert (await rest.list_jobs()).get(job_id) is not None
    with controller_outage(rest_lab):
        # slurmrestd answers with Slurm's error instead of jobs (22.05: HTTP 500 "Failed while looking for
        # jobs"): transient, so the observer records scheduler.unreachable and marks nothing gone
        with pytest.raises(TransientSchedulerError, match=OUTAGE):
            await rest.list_jobs()
    assert (await rest.list_jobs()).get(job_id) is not None
    await rest.aclose()


@pytest.mark.slurm_versions
async def test_array_task_with_the_array_id_is_held_and_released_alone(rest_lab: RestLab) -> None:
    lab = rest_lab.slurm
    rest = _rest(rest_lab)
    array_id = lab.submit(
        "#!/bin/bash\nsleep 60\n", sbatch_args=[*rest_lab.as_user, "--requeue", "--array=1-2", "-o", "/dev/null"]
    )
    lab.wait_state(array_id, "RUNNING")
    snapshot = await rest.list_jobs()
    tasks = {j.array_task_id: j for j in snapshot.jobs if j.array_job_id == array_id}
    assert tasks[2].job_id == array_id  # the last task keeps the array's id
    # v0.0.45: GET .../job/<array>_2/requeue?Hold=true; before: scontrol requeuehold <array>_2 (fallback)
    await rest.requeue_hold(tasks[2].scheduler_id)
    # 22.05: POST /slurm/v0.0.38/job/<array>_2; v0.0.40+ refuse updates of a task: scontrol release <array>_2
    released = await rest.release(tasks[2].scheduler_id)
    assert (released.command[0] == "POST") == (rest_lab.release == "22.05")
    # `scontrol show job <array id>` lists every task: ask for the task by its pair
    shown = lab.scontrol_show(tasks[2].scheduler_id)  # type: ignore[arg-type]
    assert (shown["JobId"], shown["Restarts"]) == (str(array_id), "1") and shown["Priority"] != "0"
    sibling = lab.scontrol_show(tasks[1].job_id)
    assert sibling["Restarts"] == "0" and sibling["JobState"] == "RUNNING"
    await rest.aclose()
