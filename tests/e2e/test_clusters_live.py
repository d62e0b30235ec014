"""Two live clusters in one installation: the lab (CLI adapter) and its JWT twin (slurmrestd adapter).

One process runs one worker per cluster of a RECOVERY_CLUSTERS_FILE (each its own Slurm settings,
environment and `worker:<cluster>` lease), as `recovery up` does; one API shows both clusters.
"""

from __future__ import annotations

import asyncio
import dataclasses

import httpx
import pytest
from sqlalchemy import select

from app.advice.models import Advice
from app.infra.clusters import every_cluster
from app.infra.context import AppContext
from app.main import create_app
from tests.api.helpers import run_graphql
from tests.e2e.harness import batch_script, eventually, lab_context, policy_comment, unique_environment, watching
from tests.plugins.slurm_lab import SlurmLab
from tests.plugins.slurmrestd import RestLab
from worker.registry import cluster_runners

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


async def converged(ctx: AppContext, cluster: str, job_id: int) -> Advice | None:
    async with ctx.sessions() as session:
        found = await session.scalar(
            select(Advice).where(
                Advice.cluster == cluster, Advice.slurm_job_id == job_id, Advice.disposition == "CONVERGED"
            )
        )
    return found


async def test_two_clusters_each_with_its_own_worker_one_api(
    ctx: AppContext, slurm_lab: SlurmLab, slurmrestd: RestLab, tmp_path
) -> None:
    env_a, env_b = unique_environment(), unique_environment()
    clusters_file = tmp_path / "clusters.toml"
    clusters_file.write_text(
        f"""
[clusters.lab]
environment = "{env_a}"
slurm_conf = "{slurm_lab.slurm_conf}"

[clusters.{slurmrestd.cluster}]
environment = "{env_b}"
slurm_api = "rest"
slurmrestd_url = "{slurmrestd.url}"
slurmrestd_jwt_key = "{slurmrestd.jwt_key}"
slurmrestd_user = "{slurmrestd.user}"
slurm_conf = "{slurmrestd.slurm.slurm_conf}"
"""
    )
    base = lab_context(ctx, "installation-default", clusters_file=str(clusters_file))
    clusters = every_cluster(base.settings)
    assert [(c.cluster, c.slurm_api) for c in clusters] == [("lab", "cli"), ("restlab", "rest")]
    runners = cluster_runners(base, clusters)
    tasks = [asyncio.create_task(runner.run()) for runner in runners]
    try:
        # jobs that end before a worker's first complete look are adopted (history only), so submit after it
        await asyncio.gather(*(watching(runner) for runner in runners))
        job_a = slurm_lab.submit(batch_script(policy_comment(env_a), "sleep 1; exit 1", name="e2e-lab"))
        job_b = slurmrestd.slurm.submit(
            batch_script(policy_comment(env_b), "sleep 1; exit 1", name="e2e-twin"), sbatch_args=slurmrestd.as_user
        )
        advice_a = await eventually(lambda: converged(base, "lab", job_a), what="the lab job's Advice converged")
        advice_b = await eventually(lambda: converged(base, "restlab", job_b), what="the twin job's Advice converged")
        api_settings = dataclasses.replace(base.settings, dev_no_auth=True)
        app = create_app(
            api_settings, ctx=AppContext(settings=api_settings, engine=base.engine, sessions=base.sessions)
        )
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            shown = await run_graphql(client, "{ clusters { name enrolledJobCount worker { holder active } } }")
            by_cluster = {}
            for name in ("lab", "restlab"):
                body = await run_graphql(
                    client, f'{{ workflows(filter: {{cluster: "{name}"}}) {{ nodes {{ cluster latestJobName }} }} }}'
                )
                by_cluster[name] = body["data"]["workflows"]["nodes"]
    finally:
        for runner in runners:
            runner.stop()
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
    assert (advice_a.operation, advice_b.operation) == ("RESTART", "RESTART")
    assert slurm_lab.scontrol_show(job_a)["Restarts"] == "1"
    assert slurmrestd.slurm.scontrol_show(job_b)["Restarts"] == "1"
    clusters_shown = {c["name"]: c for c in shown["data"]["clusters"]}
    assert {"lab", "restlab"} <= set(clusters_shown)
    assert clusters_shown["lab"]["worker"]["active"] and clusters_shown["restlab"]["worker"]["active"]
    assert clusters_shown["lab"]["worker"]["holder"] != clusters_shown["restlab"]["worker"]["holder"]
    assert by_cluster == {
        "lab": [{"cluster": "lab", "latestJobName": "e2e-lab"}],
        "restlab": [{"cluster": "restlab", "latestJobName": "e2e-twin"}],
    }
