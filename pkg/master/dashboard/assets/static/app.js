// Tidemark dashboard: table search, the store buttons, and the live task feed.
// Every value from the server is written with textContent, never as markup.
"use strict";

(function () {
  const csrf = (document.querySelector('meta[name="csrf-token"]') || {}).content || "";

  // Search: hide the rows of the table whose data-search does not contain the text.
  document.querySelectorAll("input[data-filter]").forEach(function (input) {
    const table = document.getElementById(input.dataset.filter);
    if (!table) return;
    const none = document.getElementById("no-match");
    const apply = function () {
      const q = input.value.trim().toLowerCase();
      let shown = 0;
      table.querySelectorAll("tbody tr[data-search]").forEach(function (tr) {
        const hit = q === "" || tr.dataset.search.indexOf(q) >= 0;
        tr.hidden = !hit;
        if (hit) shown++;
      });
      if (none) none.hidden = shown > 0;
    };
    input.addEventListener("input", apply);
    input.form.addEventListener("submit", function (e) { e.preventDefault(); apply(); });
  });

  function text(tag, value, cls) {
    const el = document.createElement(tag);
    el.textContent = value == null ? "" : String(value);
    if (cls) el.className = cls;
    return el;
  }

  function link(href, value) {
    const a = text("a", value);
    a.href = href;
    return a;
  }

  // taskRow builds the same row as the server's "taskrow" template.
  function taskRow(t) {
    const tr = document.createElement("tr");
    tr.dataset.id = t.id;
    let td = document.createElement("td"); td.className = "mono";
    td.appendChild(link("/ui/tasks/" + encodeURIComponent(t.id), t.id.length > 14 ? t.id.slice(0, 8) + "…" + t.id.slice(-4) : t.id));
    tr.appendChild(td);
    tr.appendChild(text("td", t.kind));
    td = document.createElement("td"); td.className = "target";
    td.appendChild(link("/ui/stores/" + encodeURIComponent(t.target), t.target));
    tr.appendChild(td);
    td = document.createElement("td");
    td.appendChild(text("span", t.state, "state state-" + t.state));
    tr.appendChild(td);
    tr.appendChild(text("td", t.enqueued_at || "-", "time"));
    tr.appendChild(text("td", t.finished_at || "-", "time"));
    td = document.createElement("td"); td.className = "result";
    if (t.error) td.appendChild(text("span", t.error, "err")); else td.textContent = t.detail || "";
    tr.appendChild(td);
    return tr;
  }

  const rank = { queued: 0, running: 1, done: 2, failed: 2 };

  // upsert replaces the task's row, or adds it on top when the table's filters
  // (data-state, data-kind, data-target) admit it. Events come in order; an
  // answer read apart from them (the enqueue's, a catch-up's) may be older than
  // the row, so with fromAnswer it never moves a row's state back.
  function upsert(table, t, fromAnswer) {
    const body = table.tBodies[0];
    const old = body.querySelector('tr[data-id="' + CSS.escape(t.id) + '"]');
    if (t.deleted) { if (old) old.remove(); return; }
    if (old && fromAnswer) {
      const shown = old.querySelector(".state");
      if (shown && rank[shown.textContent] >= rank[t.state]) return;
    }
    const row = taskRow(t);
    if (old) { body.replaceChild(row, old); return; }
    const f = table.dataset;
    if ((f.state && f.state !== t.state) || (f.kind && f.kind !== t.kind) || (f.target && f.target !== t.target)) return;
    body.insertBefore(row, body.firstChild);
    const note = document.querySelector(".empty-note");
    if (note) note.hidden = true;
  }

  // catchUp re-reads the unfinished tasks of the table: changes made while the
  // event stream was down were not sent.
  function catchUp(table) {
    table.querySelectorAll("tbody tr[data-id]").forEach(function (tr) {
      const state = tr.querySelector(".state");
      if (state && (state.textContent === "done" || state.textContent === "failed")) return;
      fetch("/ui/tasks/" + encodeURIComponent(tr.dataset.id), { headers: { "Accept": "application/json" }, credentials: "same-origin" })
        .then(function (resp) { return resp.ok ? resp.json() : null; })
        .then(function (t) { if (t) upsert(table, t, true); })
        .catch(function () {});
    });
  }

  const live = document.querySelector("table[data-live]");
  const indicator = document.getElementById("live");
  if (live && indicator) indicator.hidden = false;
  if (live && window.EventSource) {
    const target = live.dataset.target;
    const src = new EventSource("/ui/events" + (target ? "?target=" + encodeURIComponent(target) : ""));
    let dropped = false;
    src.onopen = function () {
      if (indicator) indicator.classList.add("on");
      document.body.dataset.live = "open";
      if (dropped) catchUp(live);
      dropped = false;
    };
    src.onerror = function () {
      if (indicator) indicator.classList.remove("on");
      document.body.dataset.live = "closed";
      dropped = true;
    };
    src.addEventListener("task", function (e) { upsert(live, JSON.parse(e.data)); });
  }

  // The store buttons post with the CSRF token and show the task they created;
  // the feed above then shows it run and finish.
  document.querySelectorAll("form.action-form").forEach(function (form) {
    form.addEventListener("submit", function (e) {
      e.preventDefault();
      const button = form.querySelector("button");
      const out = document.getElementById("action-result");
      button.disabled = true;
      fetch(form.action, {
        method: "POST", body: new URLSearchParams(new FormData(form)), credentials: "same-origin",
        headers: { "Accept": "application/json", "X-CSRF-Token": csrf },
      }).then(function (resp) {
        return resp.json().then(function (body) { return { ok: resp.ok, body: body }; });
      }).then(function (r) {
        out.hidden = false;
        out.textContent = "";
        if (!r.ok) { out.className = "flash error"; out.textContent = r.body.error || "failed"; return; }
        const t = r.body.task;
        out.className = "flash";
        out.appendChild(document.createTextNode((r.body.deduplicated ? "Already queued: " : "Enqueued ") + t.kind + " task "));
        out.appendChild(link("/ui/tasks/" + encodeURIComponent(t.id), t.id));
        out.dataset.task = t.id;
        if (live) upsert(live, t, true);
      }).catch(function (err) {
        out.hidden = false; out.className = "flash error"; out.textContent = String(err);
      }).finally(function () { button.disabled = false; });
    });
  });
})();
