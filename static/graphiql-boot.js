// Recovery: starts the vendored GraphiQL (React UMD builds from static/) against this server's /graphql.
// Loaded as a file: the page runs under the dashboard's CSP (script-src 'self', no inline script, no CDN).
(function () {
  "use strict";
  var root = document.getElementById("graphiql");
  if (!root) { return; }
  if (!window.React || !window.ReactDOM || !window.GraphiQL) {
    root.textContent = "GraphiQL could not start: its scripts did not load from " + (root.getAttribute("data-static") || "/static") + ".";
    return;
  }
  var endpoint = new URL(root.getAttribute("data-endpoint") || "graphql", window.location.href);
  endpoint.search = ""; endpoint.hash = "";
  var ws = new URL(endpoint.toString());
  ws.protocol = endpoint.protocol === "https:" ? "wss:" : "ws:";
  var params = new URLSearchParams(window.location.search);
  var fetcher = window.GraphiQL.createFetcher({ url: endpoint.toString(), subscriptionUrl: ws.toString() });
  var example = root.getAttribute("data-example") || "";

  function App() {
    var state = window.React.useState(params.get("query") || example);
    function onEditQuery(text) {
      state[1](text);
      var next = new URLSearchParams(window.location.search);
      next.set("query", text);
      window.history.replaceState(null, "", "?" + next.toString());
    }
    return window.React.createElement(window.GraphiQL, {
      fetcher: fetcher,
      query: state[0],
      onEditQuery: onEditQuery,
      defaultEditorToolsVisibility: true,
      isHeadersEditorEnabled: true,
      shouldPersistHeaders: false,
      inputValueDeprecation: true
    });
  }
  root.textContent = "";
  window.ReactDOM.createRoot(root).render(window.React.createElement(App));
})();
