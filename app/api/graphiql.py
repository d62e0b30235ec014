"""The GraphiQL page: vendored React and GraphiQL builds from /static (no CDN), started by a static script."""

from __future__ import annotations

from markupsafe import Markup, escape
from starlette.requests import Request
from starlette.responses import HTMLResponse

# Vendored from the npm registry (`npm pack graphiql@3.8.3 react@18.3.1 react-dom@18.3.1`); see static/VENDORED.md.
GRAPHIQL_VERSION = "3.8.3"
REACT_VERSION = "18.3.1"
SCRIPTS = (
    f"react-{REACT_VERSION}.production.min.js",
    f"react-dom-{REACT_VERSION}.production.min.js",
    f"graphiql-{GRAPHIQL_VERSION}.min.js",
    "graphiql-boot.js",
)
STYLES = (f"graphiql-{GRAPHIQL_VERSION}.min.css", "graphiql-page.css")
EXAMPLE_QUERY = """# Recovery GraphQL. Ctrl-Enter runs the query; put `{"Authorization": "Bearer <token>"}` in Headers.
query RecentWorkflows {
  workflows(first: 5) {
    edges { node { key cluster latestState attemptCount } }
  }
}
"""


def graphiql_html(request: Request) -> HTMLResponse:
    """The IDE page; every asset is a same-origin static file, so the dashboard's CSP applies unchanged."""

    def static(name: str) -> str:
        return request.url_for("static", path=name).path

    styles = "".join(Markup('<link rel="stylesheet" href="{}">').format(static(s)) for s in STYLES)
    scripts = "".join(Markup('<script src="{}" defer></script>').format(static(s)) for s in SCRIPTS)
    endpoint = request.url.path
    body = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>GraphiQL · Recovery</title>{styles}{scripts}</head><body>"
        f'<div id="graphiql" class="graphiql-loading" data-endpoint="{escape(endpoint)}" '
        f'data-static="{escape(static(""))}" data-example="{escape(EXAMPLE_QUERY)}">Loading GraphiQL…</div>'
        "<noscript>GraphiQL needs JavaScript; the API itself answers POST /graphql.</noscript>"
        "</body></html>"
    )
    return HTMLResponse(body, headers={"Cache-Control": "no-store"})
