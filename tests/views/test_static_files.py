"""Static files: gzip when asked, validators (ETag, Last-Modified) answered with 304, Cache-Control by name."""

from __future__ import annotations

from app.api.graphiql import SCRIPTS, STYLES
from views.static_files import IMMUTABLE, REVALIDATE, accepts_gzip, cache_control_for
from views.templating import HTMX_FILE


def test_cache_policy_by_name_and_accept_encoding() -> None:
    assert (
        cache_control_for(HTMX_FILE) == IMMUTABLE
        and cache_control_for("react-dom-18.3.1.production.min.js") == IMMUTABLE
    )
    assert cache_control_for("dashboard.css") == REVALIDATE and cache_control_for("graphiql-boot.js") == REVALIDATE
    headers = {"accept-encoding": "br, gzip;q=0.8"}
    assert accepts_gzip(headers) and not accepts_gzip({"accept-encoding": "gzip;q=0, br"})  # type: ignore[arg-type]
    assert not accepts_gzip({})  # type: ignore[arg-type]


async def test_static_files_are_compressed_and_revalidated(anonymous) -> None:
    raw = await anonymous.get("/static/dashboard.css", headers={"Accept-Encoding": "identity"})
    assert (
        raw.status_code == 200 and "content-encoding" not in raw.headers and raw.headers["cache-control"] == "no-cache"
    )
    assert raw.headers["content-type"].startswith("text/css") and raw.headers["vary"] == "Accept-Encoding"
    zipped = await anonymous.get("/static/dashboard.css", headers={"Accept-Encoding": "gzip"})
    assert zipped.headers["content-encoding"] == "gzip" and zipped.content == raw.content  # httpx decodes
    assert int(zipped.headers["content-length"]) < len(raw.content) / 2
    assert zipped.headers["etag"] != raw.headers["etag"]  # one entity tag per encoding
    again = await anonymous.get("/static/dashboard.css", headers={"If-None-Match": raw.headers["etag"]})
    assert again.status_code == 304 and not again.content and again.headers["etag"]
    since = await anonymous.get("/static/dashboard.css", headers={"If-Modified-Since": raw.headers["last-modified"]})
    assert since.status_code == 304
    changed = await anonymous.get("/static/dashboard.css", headers={"If-None-Match": '"other"'})
    assert changed.status_code == 200
    head = await anonymous.head("/static/dashboard.css", headers={"Accept-Encoding": "gzip"})
    assert head.status_code == 200 and head.content == b""
    vendored = await anonymous.get(f"/static/{SCRIPTS[2]}", headers={"Accept-Encoding": "gzip"})
    assert vendored.headers["cache-control"] == IMMUTABLE and vendored.headers["content-encoding"] == "gzip"
    assert int(vendored.headers["content-length"]) < len(vendored.content) / 3
    for name in (*SCRIPTS, *STYLES):
        assert (await anonymous.get(f"/static/{name}")).status_code == 200, name
    assert (await anonymous.get("/static/../app/config.py")).status_code == 404
    assert (await anonymous.get("/static/nothing.js")).status_code == 404
    assert (await anonymous.post("/static/dashboard.css")).status_code == 405
