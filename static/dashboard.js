// Recovery dashboard: CSRF header for htmx requests, local time on hover, polling while live streams are down.
// Loaded as a file (the CSP forbids inline scripts); no framework.
(function () {
  "use strict";
  var POLL_MS = 10000;

  function csrfToken() {
    var meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.getAttribute("content") : "";
  }

  // Every htmx request carries the session's CSRF token (the server refuses unsafe methods without it).
  document.addEventListener("htmx:configRequest", function (evt) {
    var token = csrfToken();
    if (token) { evt.detail.headers["X-CSRF-Token"] = token; }
  });

  function localText(iso) {
    var d = new Date(iso);
    if (isNaN(d.getTime())) { return ""; }
    return d.toLocaleString(undefined, { year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short" });
  }

  // The "local time" toggle: each <time> gets its local text beside it (shown while the toggle is on, remembered).
  var LOCAL_KEY = "recovery.localTimes";
  function setLocal(on) {
    document.documentElement.setAttribute("data-local-times", on ? "on" : "off");
    var button = document.getElementById("local-toggle");
    if (button) { button.setAttribute("aria-pressed", on ? "true" : "false"); }
    try { window.localStorage.setItem(LOCAL_KEY, on ? "on" : "off"); } catch (e) { /* storage may be off */ }
  }
  function storedLocal() {
    try { return window.localStorage.getItem(LOCAL_KEY) === "on"; } catch (e) { return false; }
  }

  // <time datetime> in tables: UTC text, local time as the tooltip and (toggle on) beside it.
  // SVG marks carry data-utc: append the local time to their <title>.
  function localise(root) {
    root.querySelectorAll("time[datetime]:not([data-local])").forEach(function (el) {
      var local = localText(el.getAttribute("datetime"));
      if (local) {
        el.setAttribute("title", "local: " + local);
        var span = document.createElement("span");
        span.className = "local-time";
        span.textContent = "local " + local;
        el.insertAdjacentElement("afterend", span);
      }
      el.setAttribute("data-local", "1");
    });
    root.querySelectorAll("svg [data-utc]:not([data-local])").forEach(function (el) {
      var title = el.querySelector("title");
      var local = localText(el.getAttribute("data-utc"));
      if (title && local) { title.textContent = title.textContent + " — local " + local; }
      el.setAttribute("data-local", "1");
    });
  }

  // Phones show each table row as a card (dashboard.css): each cell is labelled with its column's heading.
  function labelCells(root) {
    var own = root.closest ? root.closest("table.grid") : null;  // a swapped-in row: label it from its table
    (own ? [own] : root.querySelectorAll("table.grid")).forEach(function (table) {
      var heads = Array.prototype.map.call(table.querySelectorAll("thead th"), function (th) { return th.textContent.trim(); });
      if (!heads.length) { return; }
      table.querySelectorAll("tbody tr").forEach(function (row) {
        Array.prototype.forEach.call(row.children, function (cell, i) {
          if (heads[i] && !cell.hasAttribute("data-label") && !(cell.colSpan > 1)) { cell.setAttribute("data-label", heads[i]); }
        });
      });
    });
  }

  // What an operator action did (HX-Trigger "recovery:action-result"): a banner outside the live region that
  // stays until dismissed. textContent only: the message may quote what a job controls.
  function dismissable(banner) {
    var button = banner.querySelector("button.dismiss");
    if (button) {
      button.hidden = false;
      button.addEventListener("click", function () { banner.remove(); });
    }
  }
  document.addEventListener("recovery:action-result", function (evt) {
    var box = document.getElementById("action-results");
    var result = evt.detail || {};
    if (!box || !result.message) { return; }
    var banner = document.createElement("div");
    banner.className = "result-banner" + (result.failed ? " refused" : "");
    banner.setAttribute("role", "status");
    banner.appendChild(document.createTextNode(result.message));
    if (result.cannot) {
      var cannot = document.createElement("span");
      cannot.className = "cannot";
      cannot.textContent = result.cannot;
      banner.appendChild(cannot);
    }
    var button = document.createElement("button");
    button.type = "button";
    button.className = "dismiss";
    button.textContent = "Dismiss";
    banner.appendChild(button);
    box.insertBefore(banner, box.firstChild);
    dismissable(banner);
  });

  // Live regions re-fetch on "sse:changed"; while their stream is not open, poll every 10 s instead.
  var openSources = new WeakSet();
  document.addEventListener("htmx:sseOpen", function (evt) { openSources.add(evt.target); document.body.setAttribute("data-live", "sse"); });
  document.addEventListener("htmx:sseError", function (evt) { openSources.delete(evt.target); document.body.setAttribute("data-live", "polling"); });
  document.addEventListener("htmx:sseClose", function (evt) { openSources.delete(evt.target); });

  function poll() {
    if (document.hidden || !window.htmx) { return; }
    document.querySelectorAll("[data-live]").forEach(function (el) {
      if (el === document.body) { return; }
      var source = el.closest("[sse-connect]");
      if (!source || !openSources.has(source)) { window.htmx.trigger(el, "recovery:poll"); }
    });
  }

  // A fragment request refused with 401 means the session ended: reload, which leads to the login page.
  document.addEventListener("htmx:responseError", function (evt) {
    if (evt.detail.xhr && evt.detail.xhr.status === 401) { window.location.reload(); }
  });

  document.addEventListener("DOMContentLoaded", function () {
    var toggle = document.getElementById("local-toggle");
    if (toggle) {
      toggle.hidden = false;
      toggle.addEventListener("click", function () { setLocal(toggle.getAttribute("aria-pressed") !== "true"); });
    }
    setLocal(storedLocal());
    localise(document);
    labelCells(document);
    document.querySelectorAll(".result-banner").forEach(dismissable);
    window.setInterval(poll, POLL_MS);
  });
  document.addEventListener("htmx:afterSettle", function (evt) {
    var root = evt.target.ownerDocument ? evt.target : document;
    localise(root);
    labelCells(root);
  });
})();
