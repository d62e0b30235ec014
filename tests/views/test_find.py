"""Find by what people know (jump box, job-id search, workflow URLs, HTML 404) and the story on the pages."""

from __future__ import annotations

from app.jobs import service as jobs
from tests.factories import OBSERVED, RECOVERED, STOPPED, dashboard_registration, seed_history, seed_stories
from tests.views.html import parse


async def test_the_jump_box_resolves_job_attempt_uuid_and_workflow_ids(viewer, sessions) -> None:
    seeded = await seed_history(sessions)
    page = parse((await viewer.get("/dashboard/advice")).text)
    assert page.by_id("jump").attrs["action"] == "/dashboard/go"  # on every page, not only the Overview
    expected = {
        "4242": "/dashboard/jobs/4242",
        " 4242/1 ": "/dashboard/jobs/4242/attempts/1",
        "4242-0": "/dashboard/jobs/4242/attempts/0",
        seeded.attempt_uuids[1].upper(): "/dashboard/jobs/4242/attempts/1",
        "llama-pretrain": "/dashboard/workflow/llama-pretrain",
        # what sbatch, squeue and sacct print around the id
        "job 4242": "/dashboard/jobs/4242",
        "Submitted batch job 4242": "/dashboard/jobs/4242",
        "#4242": "/dashboard/jobs/4242",
        "4242.0": "/dashboard/jobs/4242",
        "4242.batch": "/dashboard/jobs/4242",
    }
    for typed, location in expected.items():
        response = await viewer.get("/dashboard/go", params={"q": typed}, follow_redirects=False)
        assert response.status_code == 303 and response.headers["location"] == location, typed
    missing = await viewer.get("/dashboard/go", params={"q": "4250"})
    doc = parse(missing.text)
    assert missing.status_code == 404 and "No job, attempt or workflow matches '4250'" in doc.find("main").text
    assert "/dashboard/jobs/4242" in [a.attrs["href"] for a in doc.find("main").find_all("a")]  # the nearest id
    assert (await viewer.get("/dashboard/go", params={"q": "job 4242 now"})).status_code == 404  # not only an id
    no_attempt = await viewer.get("/dashboard/go", params={"q": "4242/7"})
    assert no_attempt.status_code == 404 and "has no attempt 7; 2 attempt(s)" in no_attempt.text
    lama = parse((await viewer.get("/dashboard/go", params={"q": "llama"})).text)
    assert "/dashboard/workflow/llama-pretrain" in [a.attrs["href"] for a in lama.find("main").find_all("a")]


async def test_overview_search_matches_job_ids_and_unknown_pages_say_what_to_try(viewer, sessions) -> None:
    await seed_history(sessions)
    found = parse((await viewer.get("/dashboard/workflow", params={"q": "4242"})).text)
    assert [r.attrs["data-workflow"] for r in found.find_all("tr", data_workflow=True)] == ["llama-pretrain"]
    lost = await viewer.get("/dashboard/nowhere/at/all")
    assert lost.status_code == 404 and lost.headers["content-type"].startswith("text/html")
    assert "There is no dashboard page at /dashboard/nowhere/at/all" in parse(lost.text).find("main").text
    api = await viewer.get("/v1/nowhere")
    assert api.status_code == 404 and api.json()["error"]["code"] == "NOT_FOUND"
    unknown = await viewer.get("/dashboard/workflow/llama")
    assert unknown.status_code == 404 and "/dashboard/workflow/llama-pretrain" in unknown.text
    # the same workflow id on a second cluster: ?cluster= picks one, the page names the other
    async with sessions() as session, session.begin():
        await jobs.register_job(session, registration=dashboard_registration(777, cluster="alpha"))
    alpha = parse((await viewer.get("/dashboard/workflow/llama-pretrain", params={"cluster": "alpha"})).text)
    assert "alpha" in alpha.find("dl", class_="facts").text
    assert alpha.by_id("same-key").find("a").attrs["href"] == "/dashboard/workflow/llama-pretrain?cluster=test"


async def test_outcomes_facets_and_stories_of_a_recovered_a_stopped_and_an_observed_run(viewer, sessions) -> None:
    await seed_stories(sessions)
    doc = parse((await viewer.get("/dashboard/workflow")).text)
    outcome = {
        r.attrs["data-workflow"]: r.find(None, data_outcome=True).text for r in doc.find_all("tr", data_workflow=True)
    }
    assert outcome == {"wf-recovered": "recovered", "wf-stopped": "stopped", "wf-observed": "observe only"}
    facets = {
        (a.attrs["data-facet"], a.attrs["data-value"]): a.find("span").text for a in doc.by_id("facets").find_all("a")
    }
    assert facets[("outcome", "recovered")] == "1" and ("outcome", "running") not in facets  # no 0 facets
    assert facets[("category", "xid")] == "1" and facets[("rule", "restart_allowed")] == "2"
    for value, expected in (("stopped", ["wf-stopped"]), ("observe only", ["wf-observed"])):
        rows = parse((await viewer.get("/dashboard/workflow", params={"outcome": value})).text)
        assert [r.attrs["data-workflow"] for r in rows.find_all("tr", data_workflow=True)] == expected
    by_rule = parse((await viewer.get("/dashboard/workflow", params={"rule": "retry_limit"})).text)
    assert [r.attrs["data-workflow"] for r in by_rule.find_all("tr", data_workflow=True)] == ["wf-stopped"]
    failed = parse((await viewer.get("/dashboard/workflow", params={"failed": "1"})).text)
    assert len(failed.find_all("tr", data_workflow=True)) == 3
    stories = {}
    for job_id in (RECOVERED, STOPPED, OBSERVED):
        page = parse((await viewer.get(f"/dashboard/jobs/{job_id}/attempts/0")).text)
        stories[job_id] = page.by_id("story").find("span", class_="sentence").text
    assert stories[RECOVERED] == (
        "Attempt 0 crashed (Xid 79) on gpu-b02 at line 812 of 5101-0.err; Recovery restarted it excluding gpu-b02; "
        "attempt 1 started on gpu-b03 and loaded checkpoint iteration 1200."
    )
    assert stories[STOPPED].endswith(
        "Recovery stopped here by rule retry_limit; stopped: resubmit (sbatch the same script); "
        "no checkpoint save was seen in its logs."
    )
    assert "observe only: would have restarted as attempt 1" in stories[OBSERVED]
    observed = parse((await viewer.get(f"/dashboard/jobs/{OBSERVED}/attempts/0")).text)
    chip = observed.find("span", class_="action-shadow")
    assert chip.text == "observe only · not run" and "0ms" not in observed.by_id("advice").text
    assert "would have restarted as attempt 1" in observed.by_id("advice").text
    second = parse((await viewer.get(f"/dashboard/jobs/{RECOVERED}/attempts/1")).text)
    links = [a.attrs["href"] for a in second.by_id("story").find_all("a")]
    assert "/dashboard/jobs/5101/attempts/0" in links  # attempt 1 links back to the failure that caused it


async def test_operator_actions_say_what_they_did_and_cannot_do_and_veto_asks_first(operator, sessions) -> None:
    ids = await seed_stories(sessions)
    advice_id = ids["observed_advice"]
    listing = parse((await operator.get("/dashboard/advice", params={"show": "all", "job": str(OBSERVED)})).text)
    assert [r.attrs["data-advice"] for r in listing.find_all("tr", data_advice=True)] == [str(advice_id)]
    by_workflow = parse(
        (await operator.get("/dashboard/advice", params={"show": "all", "workflow": "wf-stopped"})).text
    )
    (stopped,) = by_workflow.find_all("tr", data_advice=True)
    assert "resolved: no action applies" in stopped.text and not stopped.find_all("button")  # no re-run on resolved
    row = listing.by_id(f"advice-{advice_id}")
    assert [b.text for b in row.find_all("button")] == ["Approve", "Veto", "Re-run reconciliation"]
    assert "A veto cannot be undone" in row.find("form", class_="veto").attrs["hx-confirm"]
    approved = await operator.post(f"/dashboard/advice/{advice_id}/approve", follow_redirects=True)
    banner = parse(approved.text).by_id("action-result").text
    assert f"Approved Advice {advice_id}" in banner and "Approval cannot make it act" in banner
    assert parse(approved.text).by_id("action-results").find("button", class_="dismiss")
    again = parse((await operator.get("/dashboard/advice", params={"job": str(OBSERVED)})).text)
    assert "Approve" not in [b.text for b in again.by_id(f"advice-{advice_id}").find_all("button")]
    # without JavaScript a veto first shows a confirmation page; nothing changed yet
    ask = await operator.post(f"/dashboard/advice/{advice_id}/veto", data={"reason": "bad node list"})
    page = parse(ask.text)
    assert ask.status_code == 200 and "A veto cannot be undone." in page.by_id("confirm-veto").text
    assert page.find("input", name="reason").attrs["value"] == "bad node list"
    still = parse((await operator.get("/dashboard/advice", params={"job": str(OBSERVED)})).text)
    assert "Veto" in [b.text for b in still.by_id(f"advice-{advice_id}").find_all("button")]
    vetoed = await operator.post(
        f"/dashboard/advice/{advice_id}/veto", data={"reason": "bad node list", "confirm": "yes"}, follow_redirects=True
    )
    assert "Recovery will not act on it again" in parse(vetoed.text).by_id("action-result").text
