"""Dashboard pages show what the user guide promises, checked by parsing their HTML."""

from __future__ import annotations

import datetime as dt
import json

from sqlalchemy import update

from app.advice.models import Advice
from app.audit import service as audit
from app.infra.db import utcnow
from app.jobs import service as jobs
from app.leases import service as leases
from tests.factories import CLUSTER, dashboard_registration, seed_history
from tests.views.helpers import dashboard_settings, open_client
from tests.views.html import parse


async def test_overview_lists_workflow_with_story_line_state_anomaly_and_active_advice(viewer, sessions) -> None:
    seeded = await seed_history(sessions)
    page = await viewer.get("/dashboard/workflow")
    assert page.status_code == 200
    doc = parse(page.text)
    assert doc.find("h1").text == "Workflows Overview"
    # the story has its own full-width line: workflow id, outcome, sentence
    story = doc.find("tr", data_workflow="llama-pretrain")
    assert story.find("td").attrs["colspan"] == "6"
    assert story.find(None, data_outcome=True).text == "observe only"
    sentence = story.find("a", class_="sentence").text
    assert sentence.startswith("Attempt 0 crashed (Xid 79) on gpu-a02")
    assert "would have restarted as attempt 1" in sentence
    assert story.find("a").attrs["href"] == "/dashboard/workflow/llama-pretrain?cluster=test"
    # its facts below; cluster and environment, the same on every row, are said once above the table
    row = doc.find("tr", data_facts_of="llama-pretrain")
    cells = [td.text for td in row.find_all("td")]
    assert cells[1] == "RUNNING" and cells[2] == "2"  # the latest job's 2 attempts
    assert "CRASH · xid" in cells[3] and "RESTART 4242/0" in cells[4]
    assert "cluster test" in doc.by_id("same-values").text and "environment test-env" in doc.by_id("same-values").text
    assert row.find("a", data_job="4242").attrs["href"] == "/dashboard/jobs/4242"
    assert seeded.workflow_id
    # the live region re-fetches itself on SSE "changed" events (and polls when the stream is down)
    live = doc.by_id("workflow-live")
    assert "sse:changed" in live.attrs["hx-trigger"] and live.attrs["hx-get"] == "/dashboard/workflow"
    assert doc.find(None, sse_connect="/dashboard/live?view=overview")
    # refused jobs are listed with their reason
    refused = doc.by_id("not-enrolled")
    assert "environment 'prod' is not 'test-env'" in refused.text and str(seeded.refused_job_id) in refused.text


async def test_dashboard_root_is_the_operators_home(viewer) -> None:
    response = await viewer.get("/dashboard/", follow_redirects=False)
    assert response.status_code == 200 and parse(response.text).by_id("needs-you")


async def test_empty_overview_explains_the_two_sbatch_lines(viewer) -> None:
    doc = parse((await viewer.get("/dashboard/workflow")).text)
    empty = doc.by_id("empty-state")
    assert "No enrolled jobs yet" in empty.text
    directives = empty.find("pre").text
    assert "#SBATCH --requeue" in directives
    assert (
        '#SBATCH --comment=\'{"APS":{"workflow_id":"training-example","environment":"test-env","mode":"observe",'
        '"auto_resume_mode":"requeue","max_requeue_times":1}}\'' in empty.find("pre").children[0]
    )


async def test_overview_filters_and_failed_only(viewer, sessions) -> None:
    await seed_history(sessions)
    async with sessions() as session, session.begin():
        job = await jobs.register_job(
            session, registration=dashboard_registration(777, workflow_key="healthy-run", name="bert")
        )
        await jobs.create_attempt(session, job=job, attempt_index=0, state="RUNNING")
    everything = parse((await viewer.get("/dashboard/workflow")).text).find_all("tr", data_workflow=True)
    assert [r.attrs["data-workflow"] for r in everything] == ["healthy-run", "llama-pretrain"]  # newest first
    failed = parse((await viewer.get("/dashboard/workflow?failed=1")).text).find_all("tr", data_workflow=True)
    assert [r.attrs["data-workflow"] for r in failed] == ["llama-pretrain"]
    searched = parse((await viewer.get("/dashboard/workflow?q=BERT")).text).find_all("tr", data_workflow=True)
    assert [r.attrs["data-workflow"] for r in searched] == ["healthy-run"]
    none = await viewer.get("/dashboard/workflow?cluster=nowhere")
    assert "No workflows match these filters" in parse(none.text).by_id("workflow-live").text
    # htmx asks for the fragment only: the same partial the page includes
    fragment = await viewer.get("/dashboard/workflow?state=RUNNING", headers={"HX-Request": "true"})
    assert fragment.text.lstrip().startswith('<section id="workflow-live"') and "<html" not in fragment.text


async def test_workflow_page_shows_jobs_attempts_and_decisions(viewer, sessions) -> None:
    seeded = await seed_history(sessions)
    old = await viewer.get(f"/dashboard/workflow/{seeded.workflow_id}")  # the old URL (internal number) redirects
    assert old.status_code == 301 and old.headers["location"] == "/dashboard/workflow/llama-pretrain?cluster=test"
    doc = parse((await viewer.get("/dashboard/workflow/llama-pretrain")).text)
    rows = doc.find("table", class_="attempts").find_all("tr", data_attempt=True)
    assert [r.attrs["data-attempt"] for r in rows] == ["0", "1"]
    first = [td.text for td in rows[0].find_all("td")]
    assert first[1] == "FAILED" and first[2] == "gpu-a01, gpu-a02" and first[4] == "31m 00s"
    assert first[5].startswith("It failed, exit code 1 (") and "CRASH · xid on gpu-a02" in first[5]
    assert "RESTART gen 1 · PENDING" in first[6]
    assert "so far" in rows[1].find_all("td")[4].text
    assert (await viewer.get("/dashboard/workflow/999999")).status_code == 404


async def test_job_details_shows_state_policy_evidence_advice_and_raw_json(viewer, sessions) -> None:
    seeded = await seed_history(sessions)
    response = await viewer.get(f"/dashboard/jobs/{seeded.slurm_job_id}/attempts/0")
    assert response.status_code == 200
    doc = parse(response.text)
    assert doc.find("h1").text.startswith("Job Details")
    text = doc.by_id("attempt-details").text
    for expected in (
        "FAILED",
        "gpu-a01, gpu-a02",
        "NonZeroExitCode",
        "/logs/llama-4242-0.out",
        "pretraining 960s, training loop 840s",
        "act requested but RECOVERY_ACKNOWLEDGE_SCHEDULER_ACTIONS is false",
        "requested act",
        "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
        "outlook infrastructure",
        "gpu-a02 from line",
        "/logs/llama-4242-0.err :1312",
        "generation 1",
        "gpu-a02",
        "observed generation —",
        "/ckpt/iter_0001200",
    ):
        assert expected in text, expected
    milestones = [
        tr.find_all("td")[0].text
        for tr in doc.by_id("attempt-details").find_all("tr")
        if tr.find_all("td") and tr.find_all("td")[0].text in ("requeue_hold", "update_exclusions", "release")
    ]
    assert milestones == ["requeue_hold", "update_exclusions", "release"]
    raw = doc.find("details", class_="raw")
    payload = json.loads(raw.find("pre").children[0])
    assert payload["attemptRef"] == "4242-0" and payload["heimdallJobId"] == seeded.attempt_uuids[0]
    assert payload["anomalies"][0]["line_number"] == 1312
    as_json = await viewer.get(f"/dashboard/jobs/{seeded.slurm_job_id}/attempts/0?format=json")
    assert as_json.headers["content-type"].startswith("application/json") and as_json.json() == payload


async def test_attempt_deep_links_by_index_and_uuid(viewer, sessions) -> None:
    seeded = await seed_history(sessions)
    by_uuid = parse((await viewer.get(f"/dashboard/attempts/{seeded.attempt_uuids[1]}")).text)
    assert "attempt 1" in by_uuid.find("h1").text
    unknown_attempt = await viewer.get(f"/dashboard/jobs/{seeded.slurm_job_id}/attempts/7")
    assert (
        unknown_attempt.status_code == 404
        and "has no attempt 7; 2 attempt(s) are recorded" in parse(unknown_attempt.text).find("main").text
    )
    unknown_job = await viewer.get("/dashboard/jobs/31337/attempts/0")
    assert unknown_job.status_code == 404 and "No job 31337 is recorded" in parse(unknown_job.text).find("main").text


async def test_refused_job_page_says_why(viewer, sessions) -> None:
    seeded = await seed_history(sessions)
    doc = parse((await viewer.get(f"/dashboard/jobs/{seeded.refused_job_id}")).text)
    assert "Not enrolled: environment 'prod' is not 'test-env'" in doc.find("p", class_="reason").text


async def test_timeline_page_has_svg_rows_for_every_attempt(viewer, sessions) -> None:
    seeded = await seed_history(sessions)
    doc = parse((await viewer.get(f"/dashboard/jobs/{seeded.slurm_job_id}/attempts/0/timeline")).text)
    svg = doc.find("svg", class_="timeline")
    rows = svg.find_all("g", class_="row")
    assert [r.attrs["data-attempt"] for r in rows] == ["0", "1"] and "focus" in rows[0].attrs["class"]
    kinds = {g.attrs["class"].split()[1] for g in rows[0].find_all("g", class_="mark")}
    # observe mode: its scheduler actions and verification get their own hollow marks, never the acting ones
    assert kinds == {"mark-anomaly", "mark-checkpoint", "mark-advice", "mark-shadow", "mark-shadow-verification"}
    assert rows[1].find_all("g", class_="open")  # attempt 1 is still running
    assert doc.by_id("timeline").attrs["data-running"] == "yes"
    assert doc.find(None, sse_connect=f"/dashboard/live?view=attempt&job={seeded.slurm_job_id}")


async def test_audit_views_disabled_say_so(database, settings, stub_tokens, sessions) -> None:
    seeded = await seed_history(sessions)
    async with await open_client(database, dashboard_settings(settings, audit_views_enabled=False)) as client:
        for path in ("/dashboard/audit", f"/dashboard/jobs/{seeded.slurm_job_id}/attempts/0/timeline"):
            response = await client.get(path)
            assert response.status_code == 404
            assert (
                "turned the audit views off (RECOVERY_AUDIT_VIEWS_ENABLED=false)"
                in parse(response.text).find("main").text
            )
        details = parse((await client.get(f"/dashboard/jobs/{seeded.slurm_job_id}/attempts/0")).text)
        assert not [a for a in details.find_all("a") if "timeline" in (a.attrs.get("href") or "")]
        assert "Audit Events" not in details.find("header").text


async def test_url_prefix_is_honoured_in_links(database, settings, stub_tokens, sessions) -> None:
    seeded = await seed_history(sessions)
    async with await open_client(database, dashboard_settings(settings, url_prefix="/mc/recovery")) as client:
        doc = parse((await client.get("/mc/recovery/dashboard/workflow")).text)
        hrefs = [h for a in doc.find_all("a") if (h := a.attrs.get("href")) and not h.startswith("#")]
        srcs = [s.attrs["src"] for s in doc.find_all("script")] + [link.attrs["href"] for link in doc.find_all("link")]
        assert hrefs and all(h.startswith("/mc/recovery/") for h in hrefs), hrefs
        assert all(s.startswith("/mc/recovery/static/") for s in srcs)
        assert "/mc/recovery/dashboard/workflow/llama-pretrain?cluster=test" in hrefs and seeded.workflow_id
        assert (await client.get(srcs[0])).status_code == 200


async def test_array_task_lookup_and_grouping_on_the_job_page(viewer, sessions) -> None:
    # array 151: tasks 1-2 got ids 152-153, the last task (3) kept the array's id 151
    async with sessions() as session, session.begin():
        for job_id, task in ((152, 1), (153, 2), (151, 3)):
            await jobs.register_job(
                session,
                registration=dashboard_registration(job_id, workflow_key="arr", array_job_id=151, array_task_id=task),
            )
    jump = await viewer.get("/dashboard/jobs", params={"job": "151_2"}, follow_redirects=False)
    assert jump.status_code == 303 and jump.headers["location"] == "/dashboard/jobs/153"
    by_path = await viewer.get("/dashboard/jobs/151_3", follow_redirects=False)
    assert by_path.status_code == 303 and by_path.headers["location"] == "/dashboard/jobs/151"
    doc = parse((await viewer.get("/dashboard/jobs/153")).text)
    assert "task 2 of array 151" in doc.find("span", class_="array").text
    assert "151_2" in doc.find("span", class_="array").text
    rows = doc.find("section", class_="array-tasks").find_all("tr")[1:]
    assert [r.find_all("td")[0].text for r in rows] == ["151_1", "151_2", "151_3"]
    assert [r.find("a").attrs["href"] for r in rows] == [
        "/dashboard/jobs/152",
        "/dashboard/jobs/153",
        "/dashboard/jobs/151",
    ]
    missing = await viewer.get("/dashboard/jobs", params={"job": "151_9"})
    assert missing.status_code == 404 and "No job 151_9 is recorded" in parse(missing.text).find("main").text
    bad = await viewer.get("/dashboard/jobs/15x_1")
    assert bad.status_code == 400 and "12345_7" in parse(bad.text).find("main").text
    overview = parse((await viewer.get("/dashboard/workflow")).text)
    assert overview.by_id("jump").attrs["action"] == "/dashboard/go"  # the jump box of every page
    by_box = await viewer.get("/dashboard/go", params={"q": "151_2"}, follow_redirects=False)
    assert by_box.headers["location"] == "/dashboard/jobs/153"


async def test_overview_shows_every_cluster_with_its_worker_and_filters_by_it(viewer, sessions) -> None:
    async with sessions() as session, session.begin():
        await jobs.register_job(
            session, registration=dashboard_registration(500, cluster="alpha", workflow_key="wf-alpha")
        )
        await jobs.register_job(
            session, registration=dashboard_registration(500, cluster="beta", workflow_key="wf-beta")
        )
    await leases.try_acquire(sessions, name="worker:alpha", holder="a:1", seconds=60)
    doc = parse((await viewer.get("/dashboard/workflow")).text)
    items = {li.attrs["data-cluster"]: li for li in doc.by_id("clusters").find_all("li")}
    assert set(items) == {"alpha", "beta"}
    assert "worker running" in items["alpha"].text and "no worker yet" in items["beta"].text
    assert items["beta"].find("a").attrs["href"] == "/dashboard/workflow?cluster=beta"
    beta = parse((await viewer.get("/dashboard/workflow", params={"cluster": "beta"})).text)
    assert [tr.attrs["data-workflow"] for tr in beta.find_all("tr", data_workflow=True)] == ["wf-beta"]
    options = [o.text for o in beta.find("select", name="cluster").find_all("option")]
    assert options == ["any", "alpha", "beta"]


async def test_workflow_page_charts_goodput_and_the_cluster_summary_adds_up(viewer, sessions) -> None:
    seeded = await seed_history(sessions, second_running=False, t0=utcnow() - dt.timedelta(hours=2))
    page = await viewer.get(f"/dashboard/workflow/{seeded.workflow_id}", follow_redirects=True)
    doc = parse(page.text)
    section = doc.by_id("goodput")
    bars = section.find_all("rect", data_bucket=True)
    assert [r.attrs["data-bucket"] for r in bars] == ["productive", "lost_since_checkpoint", "detection_delay"]
    run = section.find("g", data_job=str(seeded.slurm_job_id))
    assert abs(sum(float(r.attrs["data-seconds"]) for r in bars) - float(run.attrs["data-wall"])) < 0.01
    assert section.find("strong", data_effective=True).attrs["data-effective"] == "61.13"
    summary = parse((await viewer.get("/dashboard/goodput?hours=24")).text)
    rows = summary.find("table", class_="goodput-buckets").find_all("tr", data_bucket=True)
    wall = float(summary.by_id("goodput-summary").find_all("dd")[1].attrs["data-seconds"])
    assert wall == 31 * 60 + 5 and abs(sum(float(r.attrs["data-seconds"]) for r in rows) - wall) < 0.01
    assert (await viewer.get("/dashboard/goodput?hours=nonsense")).status_code == 400  # a number in digits 0-9


async def test_job_details_show_the_checkpoint_check_and_the_singleton_twin(viewer, sessions) -> None:
    seeded = await seed_history(sessions)
    check = {"status": "MISSING", "message": "no loadable checkpoint: /ckpt/iter_0001200 does not exist"}
    async with sessions() as session, session.begin():
        await session.execute(
            update(Advice).where(Advice.id == seeded.advice_id).values(checkpoint_check=check, successor_job_id=777)
        )
        await audit.record(
            session,
            component="advisor",
            event_type="checkpoint.checked",
            level="WARNING",
            message="attempt 0: checkpoint check MISSING: " + check["message"],
            cluster=CLUSTER,
            slurm_job_id=seeded.slurm_job_id,
            attempt_index=0,
        )
    doc = parse((await viewer.get(f"/dashboard/jobs/{seeded.slurm_job_id}/attempts/0")).text)
    shown = doc.by_id("checkpoint-check")
    assert shown.attrs["data-status"] == "MISSING" and "no loadable checkpoint" in shown.text
    assert doc.by_id("singleton-twin").find("a").attrs["href"] == "/dashboard/jobs/777"
    timeline = parse((await viewer.get(f"/dashboard/jobs/{seeded.slurm_job_id}/attempts/0/timeline")).text)
    marks = timeline.find("svg", class_="timeline").find_all("g", class_="mark-checkpoint")
    assert any("checkpoint.checked" in m.text and "no loadable checkpoint" in m.text for m in marks)
