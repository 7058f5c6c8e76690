// flowwarden's console: reads the admin endpoint's JSON routes and acts through
// its POST routes. Every value that comes from the instance (a document, an
// error, a stream name) reaches the page through textContent only, never as
// markup; the Content-Security-Policy forbids inline scripts besides.
"use strict";

(function () {
  const TOKEN_KEY = "flowwarden-admin-token";
  const STREAMS_EVERY_MS = 3000;
  const HISTORY_EVERY_MS = 10000;
  const $ = (id) => document.getElementById(id);

  let info = { token_required: false, dlq: false };
  let streams = [];
  let history = null;
  let current = null;        // the entry shown: { id, stream, entry, hidden }
  let showDocuments = false;
  let discardArmed = false;

  // --- small helpers -------------------------------------------------------

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  function cell(tr, label, text, cls) {
    const td = el("td", text, cls);
    td.dataset.label = label;
    tr.appendChild(td);
    return td;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
  }

  function seconds(s) {
    if (s === null || s === undefined || !isFinite(s)) return "–";
    if (s < 1) return (s * 1000).toFixed(0) + " ms";
    if (s < 120) return s.toFixed(1) + " s";
    if (s < 7200) return (s / 60).toFixed(1) + " min";
    if (s < 172800) return (s / 3600).toFixed(1) + " h";
    return (s / 86400).toFixed(1) + " d";
  }

  function rate(r) {
    if (r === null || r === undefined || !isFinite(r)) return "–";
    return r >= 100 ? r.toFixed(0) : r.toFixed(1);
  }

  // A date of relaxed Extended JSON ({"$date": "..."} or {"$date": {"$numberLong": ...}}).
  function dateOf(v) {
    if (!v) return null;
    if (typeof v === "string") return new Date(v);
    if (v.$date !== undefined) {
      const d = v.$date;
      if (typeof d === "string") return new Date(d);
      if (typeof d === "number") return new Date(d);
      if (d && d.$numberLong) return new Date(Number(d.$numberLong));
    }
    return null;
  }

  function ageOf(v) {
    const d = dateOf(v);
    return d ? seconds((Date.now() - d.getTime()) / 1000) : "?";
  }

  function idText(v) {
    if (v === null || v === undefined) return "?";
    if (typeof v === "string" || typeof v === "number") return String(v);
    if (v.$oid) return v.$oid;
    return JSON.stringify(v);
  }

  function num(v) {
    if (v === null || v === undefined) return "?";
    if (typeof v === "object" && v.$numberLong) return v.$numberLong;
    return String(v);
  }

  function notice(text, error) {
    const n = $("notice");
    n.textContent = text;
    n.className = error ? "error" : "";
    n.hidden = !text;
  }

  // --- talking to the instance --------------------------------------------

  function token() {
    return sessionStorage.getItem(TOKEN_KEY);
  }

  async function request(method, path, withToken) {
    const headers = {};
    const t = token();
    if (withToken && t) headers.Authorization = "Bearer " + t;
    const resp = await fetch(path, { method, headers, cache: "no-store",
                                     credentials: "omit" });
    let body = null;
    try { body = await resp.json(); } catch (e) { body = null; }
    return { status: resp.status, body };
  }

  // Asks for the token once per tab: resolves when one was entered.
  let tokenWaiters = [];
  function askToken(why) {
    const form = $("token-form");
    form.hidden = false;
    if (why) notice(why, true);
    $("token-input").value = "";
    $("token-input").focus();
    return new Promise((resolve, reject) => tokenWaiters.push({ resolve, reject }));
  }

  function tokenDone(ok) {
    $("token-form").hidden = true;
    const waiters = tokenWaiters;
    tokenWaiters = [];
    for (const w of waiters) (ok ? w.resolve : w.reject)();
  }

  // An action (POST, or a read that needs the token): asks for the token when
  // the instance wants one and the tab has none, and again after a 401.
  async function act(method, path) {
    for (let tries = 0; tries < 3; tries++) {
      if (info.token_required && !token()) {
        try { await askToken(""); } catch (e) { return null; }
      }
      const r = await request(method, path, true);
      if (r.status !== 401) return r;
      sessionStorage.removeItem(TOKEN_KEY);
      try {
        await askToken("Refused: " + (r.body && r.body.error ? r.body.error : "401"));
      } catch (e) {
        return r;
      }
    }
    return null;
  }

  function errorOf(r) {
    if (!r) return "cancelled";
    return (r.body && (r.body.error || r.body.message)) || ("HTTP " + r.status);
  }

  // --- streams --------------------------------------------------------------

  // Keys the table shows in their own column; any other key a stream has
  // (units and their holders in shared mode, partitions, ...) is listed in
  // the Units column as it comes, so fields added later show without a
  // change here.
  const SHOWN = new Set(["name", "state", "ready", "reason", "script_version", "last_event_time",
    "lag_seconds", "events_per_second", "events", "handled", "handler_errors", "retries",
    "restarts", "attempt", "last_error_type", "last_error_time", "last_error_age_seconds",
    "checkpoint_time", "checkpoint_writes", "checkpoint_errors", "dlq_writes", "dlq_pending",
    "dlq_oldest_pending_age_seconds", "circuit", "rate_limit", "lua_memory_bytes", "snapshot",
    "oplog_window_seconds", "headroom_seconds"]);

  function compact(v) {
    if (v === null || v === undefined) return "–";
    if (typeof v !== "object") return String(v);
    if (Array.isArray(v)) return v.map(compact).join(", ");
    return Object.keys(v).map((k) => k + ": " + compact(v[k])).join("; ");
  }

  function unitsCell(tr, s) {
    const td = cell(tr, "Units", null, "units");
    let any = false;
    for (const k of Object.keys(s)) {
      if (SHOWN.has(k)) continue;
      const line = el("div", k + ": " + compact(s[k]));
      td.appendChild(line);
      any = true;
    }
    if (!any) td.textContent = "–";
  }

  function actionButton(td, label, handler) {
    const b = el("button", label, "action");
    b.type = "button";
    b.addEventListener("click", handler);
    td.appendChild(b);
    return b;
  }

  async function streamAction(name, verb) {
    notice(verb + " " + name + "…");
    const r = await act("POST", "/v1/streams/" + encodeURIComponent(name) + "/" + verb);
    if (r && r.status < 300) notice(name + ": " + (r.body.message || verb + " done"));
    else notice(name + ": " + verb + " refused: " + errorOf(r), true);
    refreshStreams();
  }

  function renderStreams(data) {
    const tbody = $("streams").tBodies[0];
    clear(tbody);
    for (const s of data.streams) {
      const tr = el("tr");
      tr.dataset.stream = s.name;
      cell(tr, "Stream", s.name);
      const st = cell(tr, "State", s.state + (s.reason ? " (" + s.reason + ")" : ""),
                      "state-" + s.state);
      st.dataset.field = "state";
      cell(tr, "Lag", seconds(s.lag_seconds), "num").dataset.field = "lag";
      cell(tr, "Events/s", rate(s.events_per_second), "num").dataset.field = "rate";
      cell(tr, "DLQ pending", s.dlq_pending === null ? "–" : s.dlq_pending, "num");
      cell(tr, "Oldest", seconds(s.dlq_oldest_pending_age_seconds), "num");
      if (s.circuit) {
        cell(tr, "Circuit", s.circuit.state +
             (s.circuit.error_type ? " (" + s.circuit.error_type + ")" : ""),
             "circuit-" + s.circuit.state);
      } else {
        cell(tr, "Circuit", "–");
      }
      unitsCell(tr, s);
      cell(tr, "Last error", s.last_error_type
           ? s.last_error_type + ", " + seconds(s.last_error_age_seconds) + " ago" : "–");
      const td = cell(tr, "Actions");
      if (s.state === "paused") actionButton(td, "Resume", () => streamAction(s.name, "resume"));
      else actionButton(td, "Pause", () => streamAction(s.name, "pause"));
      actionButton(td, "Snapshot", () => streamAction(s.name, "snapshot"));
      tbody.appendChild(tr);
    }
    const r = data.last_reload;
    $("reload-state").textContent = r ? "Last reload: " + r.result + ", " +
      seconds(r.age_seconds) + " ago: " + r.message : "";
    $("streams-updated").textContent = "Updated " + new Date().toLocaleTimeString();
  }

  function fillStreamSelects(names) {
    for (const id of ["chart-stream", "f-stream"]) {
      const sel = $(id);
      const have = Array.from(sel.options).map((o) => o.value);
      for (const n of names) {
        if (!have.includes(n)) {
          const o = el("option", n);
          o.value = n;
          sel.appendChild(o);
        }
      }
    }
  }

  async function refreshStreams() {
    try {
      const r = await request("GET", "/v1/streams", false);
      if (r.status !== 200 || !r.body) throw new Error(errorOf(r));
      streams = r.body.streams;
      renderStreams(r.body);
      fillStreamSelects(streams.map((s) => s.name));
    } catch (e) {
      $("streams-updated").textContent = "Cannot reach the instance: " + e.message;
    }
  }

  // --- the chart ------------------------------------------------------------

  async function refreshHistory() {
    try {
      const r = await request("GET", "/v1/history", false);
      if (r.status === 200) history = r.body;
    } catch (e) {
      history = null;
    }
    drawChart();
  }

  function line(ctx, pts, color) {
    ctx.strokeStyle = color;
    ctx.lineWidth = 2;
    ctx.beginPath();
    pts.forEach((p, i) => (i ? ctx.lineTo(p[0], p[1]) : ctx.moveTo(p[0], p[1])));
    ctx.stroke();
  }

  function drawChart() {
    const canvas = $("chart");
    const ratio = window.devicePixelRatio || 1;
    const w = canvas.clientWidth, h = canvas.clientHeight;
    if (!w || !h) return;
    canvas.width = Math.round(w * ratio);
    canvas.height = Math.round(h * ratio);
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, w, h);
    const css = getComputedStyle(document.documentElement);
    const muted = css.getPropertyValue("--muted").trim() || "#888";
    ctx.font = "11px system-ui, sans-serif";
    ctx.fillStyle = muted;
    const name = $("chart-stream").value;
    const series = history && history.streams && history.streams[name];
    canvas.dataset.samples = series ? series.t.length : 0;
    if (!series || !series.t.length) {
      ctx.fillText("no samples yet (one every " + (info.history_step_seconds || 5) + " s)",
                   10, h / 2);
      return;
    }
    const pad = { l: 44, r: 44, t: 10, b: 20 };
    // The last 15 minutes, or since the first sample when the instance is
    // younger than that.
    const step = (history.step_seconds || 5) * 1000;
    const end = history.now;
    const start = Math.max(end - history.window_seconds * 1000, series.t[0] - step);
    const maxLag = Math.max(1, ...series.lag_seconds.map((v) => v || 0));
    const maxRate = Math.max(1, ...series.events_per_second.map((v) => v || 0));
    const x = (t) => pad.l + (w - pad.l - pad.r) * (t - start) / (end - start);
    const y = (v, max) => h - pad.b - (h - pad.t - pad.b) * (v || 0) / max;
    ctx.strokeStyle = muted;
    ctx.lineWidth = 0.5;
    ctx.strokeRect(pad.l, pad.t, w - pad.l - pad.r, h - pad.t - pad.b);
    ctx.fillText(maxLag.toFixed(1) + " s", 2, pad.t + 9);
    ctx.fillText(maxRate.toFixed(0) + "/s", w - pad.r + 4, pad.t + 9);
    ctx.fillText("-" + seconds((end - start) / 1000), pad.l, h - 5);
    ctx.fillText("now", w - pad.r - 20, h - 5);
    line(ctx, series.t.map((t, i) => [x(t), y(series.lag_seconds[i], maxLag)]),
         css.getPropertyValue("--lag").trim() || "#b3261e");
    line(ctx, series.t.map((t, i) => [x(t), y(series.events_per_second[i], maxRate)]),
         css.getPropertyValue("--rate").trim() || "#2456a6");
  }

  // --- dead letters ---------------------------------------------------------

  function filterQuery() {
    const q = new URLSearchParams();
    for (const [k, id] of [["stream", "f-stream"], ["status", "f-status"],
                           ["error_type", "f-error-type"], ["since", "f-since"],
                           ["until", "f-until"]]) {
      const v = $(id).value.trim();
      if (v) q.set(k, v);
    }
    return q;
  }

  function renderEntries(entries, label) {
    $("sequences").hidden = true;
    $("dlq").hidden = false;
    const tbody = $("dlq").tBodies[0];
    clear(tbody);
    for (const e of entries) {
      const tr = el("tr", null, "clickable");
      const id = idText(e._id);
      tr.dataset.id = id;
      cell(tr, "Id", id);
      cell(tr, "Stream", e.streamName);
      cell(tr, "Operation", e.operationType);
      cell(tr, "Error type", e.error && e.error.type ? e.error.type
                             : (e.sequenceId ? "(parked)" : "?"));
      cell(tr, "Attempts", num(e.attempts), "num");
      cell(tr, "Age", ageOf(e.createdAt), "num");
      cell(tr, "Status", e.status);
      cell(tr, "Sequence", e.sequenceId ? e.sequenceId + " #" + num(e.sequenceIndex) : "–");
      tr.addEventListener("click", () => showEntry(id, e.streamName));
      tbody.appendChild(tr);
    }
    $("dlq-count").textContent = label.replace("%d", entries.length);
  }

  let searches = 0;
  async function search() {
    const query = filterQuery().toString();
    const mine = ++searches;
    const r = await request("GET", "/v1/dlq/entries?" + query, false);
    if (mine !== searches) return; // a later search answers instead
    if (r.status !== 200) {
      notice("Dead letters: " + errorOf(r), true);
      return;
    }
    notice("");
    renderEntries(r.body.entries, "%d entries (oldest first, at most " + r.body.limit + ")");
    $("dlq").dataset.query = query;
  }

  async function listSequences() {
    const q = new URLSearchParams();
    if ($("f-stream").value) q.set("stream", $("f-stream").value);
    const r = await request("GET", "/v1/dlq/sequences?" + q.toString(), false);
    if (r.status !== 200) {
      notice("Sequences: " + errorOf(r), true);
      return;
    }
    $("dlq").hidden = true;
    $("sequences").hidden = false;
    const tbody = $("sequences").tBodies[0];
    clear(tbody);
    for (const s of r.body.sequences) {
      const tr = el("tr", null, "clickable");
      cell(tr, "Sequence", s.sequenceId);
      cell(tr, "Stream", s.streamName);
      cell(tr, "Open", s.open === null ? "?" : String(s.open));
      cell(tr, "Waiting", num(s.size), "num");
      cell(tr, "Parked", num(s.parked), "num");
      cell(tr, "Head error", s.head && s.head.error ? s.head.error.type + ": " +
           s.head.error.message : "–");
      cell(tr, "Age", s.ageSeconds === null ? "–" : seconds(Number(num(s.ageSeconds))), "num");
      tr.addEventListener("click", () => showSequence(s.streamName, s.sequenceId));
      tbody.appendChild(tr);
    }
    $("dlq-count").textContent = r.body.sequences.length + " sequences";
  }

  // The entries of one key's sequence, in the order they will be replayed.
  async function showSequence(stream, seq) {
    const q = new URLSearchParams({ stream, sequence: seq });
    const r = await request("GET", "/v1/dlq/entries?" + q.toString(), false);
    if (r.status !== 200) {
      notice("Sequence " + seq + ": " + errorOf(r), true);
      return;
    }
    const entries = r.body.entries.slice().sort(
      (a, b) => Number(num(a.sequenceIndex)) - Number(num(b.sequenceIndex)));
    renderEntries(entries, "%d entries of sequence " + seq + ", in replay order");
  }

  function field(dl, name, value) {
    if (value === undefined) return;
    dl.appendChild(el("dt", name));
    dl.appendChild(el("dd", typeof value === "object" && value !== null
                          ? JSON.stringify(value) : value));
  }

  function renderEntry(data) {
    const e = data.entry;
    $("entry").hidden = false;
    $("entry-title").textContent = "Entry " + idText(e._id);
    const dl = $("entry-fields");
    clear(dl);
    field(dl, "Stream", e.streamName);
    field(dl, "Status", e.status);
    field(dl, "Operation", e.operationType);
    field(dl, "Document key", e.documentKey);
    field(dl, "Error type", e.error && e.error.type);
    field(dl, "Error", e.error && e.error.message);
    field(dl, "Attempts", num(e.attempts));
    field(dl, "Reprocess attempts", num(e.reprocessAttempts));
    field(dl, "Last reprocess error", e.lastReprocessError);
    field(dl, "Created", dateOf(e.createdAt) ? dateOf(e.createdAt).toISOString() : undefined);
    field(dl, "Event id", e.eventId);
    if (e.sequenceId) field(dl, "Sequence", e.sequenceId + " #" + num(e.sequenceIndex));
    $("entry-stack").textContent = (e.error && e.error.stackTrace) || "(none stored)";
    const ol = $("entry-history");
    clear(ol);
    for (const h of e.history || []) {
      const at = dateOf(h.at);
      ol.appendChild(el("li", (at ? at.toISOString() : "?") + "  " + h.action + " by " +
                              h.actor + (h.result ? ": " + h.result : "")));
    }
    const docs = {};
    for (const k of ["fullDocument", "fullDocumentBeforeChange", "updateDescription"]) {
      if (e[k] !== undefined) docs[k] = e[k];
    }
    if (data.hidden && data.hidden.length) {
      $("entry-document").textContent = "Hidden: " + data.hidden.join(", ") +
        " (they may hold personal data; Show document reveals them)";
    } else if (Object.keys(docs).length) {
      $("entry-document").textContent = JSON.stringify(docs, null, 2);
    } else {
      $("entry-document").textContent = "(not stored)";
    }
    $("entry-documents").hidden = !(data.hidden && data.hidden.length);
    $("entry-discard").textContent = "Discard";
    discardArmed = false;
  }

  async function showEntry(id, stream) {
    current = { id, stream };
    showDocuments = false;
    $("entry-result").hidden = true;
    for (const tr of $("dlq").tBodies[0].rows) {
      tr.classList.toggle("selected", tr.dataset.id === id);
    }
    await loadEntry();
  }

  async function loadEntry() {
    const q = new URLSearchParams();
    if (current.stream) q.set("stream", current.stream);
    if (showDocuments) q.set("documents", "1");
    const path = "/v1/dlq/entries/" + encodeURIComponent(current.id) + "?" + q.toString();
    const r = showDocuments ? await act("GET", path) : await request("GET", path, false);
    if (!r || r.status !== 200) {
      notice("Entry " + current.id + ": " + errorOf(r), true);
      return;
    }
    renderEntry(r.body);
    $("entry").scrollIntoView({ block: "nearest" });
  }

  async function entryAction(verb, query) {
    if (!current) return;
    const path = "/v1/dlq/entries/" + encodeURIComponent(current.id) + "/" + verb + "?" +
      new URLSearchParams(Object.assign({ stream: current.stream || "" }, query)).toString();
    notice(verb + " " + current.id + "…");
    const r = await act("POST", path);
    const out = $("entry-result");
    if (r && r.body && r.body.output !== undefined) {
      out.hidden = false;
      out.textContent = r.body.result + " (exit " + r.body.exit_code + ")\n" + r.body.output;
    }
    if (r && r.status < 300) {
      notice(current.id + ": " + verb + (query.dry_run ? " (dry run)" : "") + " done");
      if (!query.dry_run) {
        $("entry").hidden = true;
        await search();
      }
    } else {
      notice(current.id + ": " + verb + " failed: " + errorOf(r), true);
    }
  }

  // --- wiring ---------------------------------------------------------------

  function selectTab(name) {
    const dlq = name === "dlq";
    $("streams-view").hidden = dlq;
    $("dlq-view").hidden = !dlq;
    $("tab-streams").setAttribute("aria-selected", String(!dlq));
    $("tab-dlq").setAttribute("aria-selected", String(dlq));
    if (location.hash !== "#" + name) history_replace("#" + name);
    if (dlq && !$("dlq").tBodies[0].rows.length) search();
    if (!dlq) drawChart();
  }

  function history_replace(hash) {
    window.history.replaceState(null, "", hash);
  }

  async function start() {
    $("tab-streams").addEventListener("click", () => selectTab("streams"));
    $("tab-dlq").addEventListener("click", () => selectTab("dlq"));
    $("token-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const t = $("token-input").value.trim();
      if (!t) return;
      sessionStorage.setItem(TOKEN_KEY, t);
      notice("");
      tokenDone(true);
    });
    $("token-cancel").addEventListener("click", () => tokenDone(false));
    $("reload").addEventListener("click", async () => {
      notice("Reloading…");
      const r = await act("POST", "/v1/reload");
      if (r && r.status < 300) notice(r.body.message || "reloaded");
      else notice("Reload refused: " + errorOf(r), true);
      refreshStreams();
    });
    $("chart-stream").addEventListener("change", refreshHistory);
    window.addEventListener("resize", drawChart);
    $("dlq-filter").addEventListener("submit", (ev) => { ev.preventDefault(); search(); });
    $("dlq-sequences").addEventListener("click", listSequences);
    $("entry-close").addEventListener("click", () => { $("entry").hidden = true; });
    $("entry-dry-run").addEventListener("click", () => entryAction("replay", { dry_run: "1" }));
    $("entry-replay").addEventListener("click", () => entryAction("replay", {}));
    $("entry-discard").addEventListener("click", () => {
      if (!discardArmed) {
        discardArmed = true;
        $("entry-discard").textContent = "Confirm discard";
        return;
      }
      discardArmed = false;
      entryAction("discard", { reason: "discarded in the console" });
    });
    $("entry-documents").addEventListener("click", () => { showDocuments = true; loadEntry(); });

    try {
      const r = await request("GET", "/v1/console", false);
      if (r.status === 200) info = r.body;
    } catch (e) { /* refreshStreams says the instance is unreachable */ }
    $("info").textContent = "v" + (info.version || "?") + (info.token_required
      ? " · actions need the admin token" : " · no admin token: actions open to this host");
    $("tab-dlq").hidden = !info.dlq;
    selectTab(location.hash === "#dlq" ? "dlq" : "streams");
    await refreshStreams();
    await refreshHistory();
    setInterval(refreshStreams, STREAMS_EVERY_MS);
    setInterval(refreshHistory, HISTORY_EVERY_MS);
  }

  document.addEventListener("DOMContentLoaded", start);
})();
