// The operator console. It holds no data of its own: everything comes from
// the admin API with the token of sessionStorage as a bearer token, and a 401
// signs the tab out. Text from the server is only ever set as textContent.
"use strict";

(function () {
  const TOKEN_KEY = "posting-admin-token";
  const REFRESH_MS = 5000;
  const SERIES = [
    { key: "PENDING", color: "var(--pending)" },
    { key: "PROCESSING", color: "var(--processing)" },
    { key: "RETRY", color: "var(--retry)" },
    { key: "FAIL", color: "var(--fail)", value: (s) => s.failed },
  ];
  // What each overdue reason means (docs/operations.md#postingpostsoverdue
  // says what to do), shown as the reason's tooltip.
  const REASONS = {
    not_reserved: "still RESERVED: no scheduler made it WORKING",
    event_unsent: "its reservation event waits in the outbox",
    event_failed: "its reservation event is FAIL: requeue it",
    no_publication: "the event was sent, but no worker on this database made a publication",
    publication_pending: "the worker holds a PENDING publication: worker down or publisher failing",
    publication_failed: "the publisher refused the post: retry the publication",
    publication_settled: "the publication is settled but the post did not follow",
  };
  const $ = (id) => document.getElementById(id);
  let timer = null;

  class Unauthorized extends Error {}

  async function call(method, path, token) {
    const res = await fetch(path, {
      method,
      headers: { Authorization: "Bearer " + token, Accept: "application/json" },
      cache: "no-store",
      credentials: "omit",
    });
    let body = null;
    try { body = await res.json(); } catch (_) { /* an empty or non-JSON body */ }
    if (res.status === 401) throw new Unauthorized((body && body.detail) || "the admin token was refused");
    if (!res.ok) throw new Error((body && body.detail) || (method + " " + path + ": HTTP " + res.status));
    return body;
  }

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  function age(seconds) {
    if (seconds === null || seconds === undefined) return "none";
    const s = Math.round(seconds);
    if (s < 120) return s + " s";
    if (s < 7200) return Math.round(s / 60) + " min";
    if (s < 172800) return (s / 3600).toFixed(1) + " h";
    return (s / 86400).toFixed(1) + " d";
  }

  function time(iso) {
    if (!iso) return "";
    const d = new Date(iso);
    return isNaN(d) ? iso : d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
  }

  function showSignIn(message) {
    stop();
    sessionStorage.removeItem(TOKEN_KEY);
    clearData();
    $("console").hidden = true;
    $("session").hidden = true;
    $("signin").hidden = false;
    const err = $("signin-error");
    err.textContent = message || "";
    err.hidden = !message;
    $("token").focus();
  }

  // clearData removes every value shown, so that nothing stays on screen
  // after signing out or a refused token.
  function clearData() {
    for (const id of ["fail-rows", "posts", "series", "overdue-rows", "chart", "legend"]) $(id).replaceChildren();
    for (const o of document.querySelectorAll("main output")) o.textContent = "–";
    for (const id of ["discarded", "oldest-row", "chart-window", "updated", "overdue-oldest", "overdue-grace", "overdue-more"]) $(id).textContent = "";
    $("overdue-card").classList.remove("alarm");
  }

  function showConsole() {
    $("signin").hidden = true;
    $("console").hidden = false;
    $("session").hidden = false;
  }

  function stop() {
    if (timer) clearTimeout(timer);
    timer = null;
  }

  async function load() {
    stop();
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (!token) { showSignIn(); return; }
    try {
      const [stats, history, failed, pending, retry, posts, overdue, series] = await Promise.all([
        call("GET", "/admin/outbox/stats", token),
        call("GET", "/admin/outbox/history", token),
        call("GET", "/admin/outbox?status=FAIL&limit=200", token),
        call("GET", "/admin/outbox?status=PENDING&limit=1000", token),
        call("GET", "/admin/outbox?status=RETRY&limit=1000", token),
        call("GET", "/admin/posts?limit=20", token),
        call("GET", "/admin/posts/overdue?limit=100", token),
        call("GET", "/admin/series?limit=20", token),
      ]);
      showConsole();
      $("error").hidden = true;
      renderStats(stats);
      renderChart(history, stats);
      renderFailed(failed.items, stats.blocking, pending.items.concat(retry.items));
      renderPosts(posts.items);
      renderOverdue(overdue);
      renderSeries(series.items);
      $("updated").textContent = "updated " + new Date().toISOString().slice(11, 19) + "Z";
    } catch (e) {
      if (e instanceof Unauthorized) { showSignIn(e.message); return; }
      $("error").textContent = "Could not refresh: " + e.message;
      $("error").hidden = false;
    }
    timer = setTimeout(load, REFRESH_MS);
  }

  function renderStats(st) {
    for (const s of ["PENDING", "PROCESSING", "RETRY", "FAIL", "SENT"]) {
      $("count-" + s).textContent = st.counts[s] ?? 0;
    }
    $("count-FAIL").textContent = st.failed;
    $("discarded").textContent = st.discarded ? st.discarded + " discarded" : "";
    const o = st.oldestWaiting;
    $("oldest").textContent = o ? age(o.ageSeconds) : "none";
    $("oldest-row").textContent = o ? "row " + o.id + ", post " + o.postId + ", " + o.status : "";
    $("blocked").textContent = st.blocked;
  }

  function svg(tag, attrs, text) {
    const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function renderChart(history, stats) {
    const samples = history.samples.slice();
    const W = 1000, H = 220, L = 48, R = 12, T = 10, B = 24;
    const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none" });
    $("chart-window").textContent = history.windowSeconds
      ? "(last " + Math.round(history.windowSeconds / 60) + " min, a sample every " + history.intervalSeconds + " s; SENT: " + (stats.counts.SENT ?? 0) + ")"
      : "";
    const value = (s, ser) => (ser.value ? ser.value(s) : (s.counts[ser.key] ?? 0));
    if (samples.length === 0) {
      root.appendChild(svg("text", { x: L, y: H / 2 }, "no samples yet"));
      $("chart").replaceChildren(root);
      return;
    }
    const t0 = Date.parse(samples[0].at);
    const t1 = Math.max(Date.parse(samples[samples.length - 1].at), t0 + 1000);
    let max = 1;
    for (const s of samples) for (const ser of SERIES) max = Math.max(max, value(s, ser));
    const x = (t) => L + ((t - t0) / (t1 - t0)) * (W - L - R);
    const y = (v) => T + (1 - v / max) * (H - T - B);
    root.appendChild(svg("line", { class: "axis", x1: L, y1: y(0), x2: W - R, y2: y(0) }));
    root.appendChild(svg("line", { class: "axis", x1: L, y1: T, x2: L, y2: y(0) }));
    root.appendChild(svg("text", { x: L - 6, y: T + 10, "text-anchor": "end" }, String(max)));
    root.appendChild(svg("text", { x: L - 6, y: y(0), "text-anchor": "end" }, "0"));
    const hhmm = (t) => new Date(t).toISOString().slice(11, 19) + "Z";
    root.appendChild(svg("text", { x: L, y: H - 6 }, hhmm(t0)));
    root.appendChild(svg("text", { x: W - R, y: H - 6, "text-anchor": "end" }, hhmm(t1)));
    // Widest first, so that lines lying on one another stay visible as stripes.
    SERIES.slice().reverse().forEach((ser, i) => {
      const pts = samples.map((s) => x(Date.parse(s.at)).toFixed(1) + "," + y(value(s, ser)).toFixed(1));
      if (pts.length === 1) pts.push((W - R) + "," + y(value(samples[0], ser)).toFixed(1));
      root.appendChild(svg("polyline", { points: pts.join(" "), fill: "none", stroke: ser.color,
        "stroke-width": 2 + 1.5 * (SERIES.length - 1 - i), "stroke-linejoin": "round",
        "vector-effect": "non-scaling-stroke", "data-series": ser.key }));
    });
    $("chart").replaceChildren(root);
    const legend = SERIES.map((ser) => {
      const li = el("li", ser.key + " " + value(samples[samples.length - 1], ser));
      li.style.setProperty("--c", ser.color);
      return li;
    });
    $("legend").replaceChildren(...legend);
  }

  function renderFailed(rows, blocking, waiting) {
    const blocks = new Map(blocking.map((b) => [b.id, b.blocked]));
    const body = $("fail-rows");
    const trs = rows.filter((r) => !r.discardedAt).map((r) => {
      const tr = el("tr");
      tr.dataset.id = r.id;
      tr.appendChild(el("td", r.id));
      tr.appendChild(el("td", r.postId));
      tr.appendChild(el("td", r.eventType));
      tr.appendChild(el("td", r.retryCount));
      tr.appendChild(el("td", r.lastError || "", "error-text"));
      const held = waiting.filter((w) => w.postId === r.postId && w.id > r.id).map((w) => w.id).sort((a, b) => a - b);
      const td = el("td");
      td.appendChild(el("span", blocks.get(r.id) || 0, "blocked-count"));
      if (held.length) td.appendChild(el("div", "rows " + held.slice(0, 10).join(", ") + (held.length > 10 ? ", …" : ""), "blocked-ids"));
      tr.appendChild(td);
      const actions = el("td", null, "actions");
      const rq = el("button", "Requeue", "requeue");
      rq.type = "button";
      rq.addEventListener("click", () => act(rq, "requeue", r.id));
      const dc = el("button", "Discard", "discard");
      dc.type = "button";
      dc.addEventListener("click", () => {
        // Discarding lets the post's later events go out without this one:
        // a second click confirms it.
        if (!dc.classList.contains("confirming")) {
          dc.classList.add("confirming");
          dc.textContent = "Discard for good?";
          return;
        }
        act(dc, "discard", r.id);
      });
      actions.append(rq, " ", dc);
      tr.appendChild(actions);
      return tr;
    });
    body.replaceChildren(...trs);
    $("fail-empty").hidden = trs.length > 0;
  }

  async function act(button, verb, id) {
    const token = sessionStorage.getItem(TOKEN_KEY);
    button.disabled = true;
    try {
      await call("POST", "/admin/outbox/" + encodeURIComponent(id) + "/" + verb, token);
    } catch (e) {
      if (e instanceof Unauthorized) { showSignIn(e.message); return; }
      $("error").textContent = verb + " of row " + id + " failed: " + e.message;
      $("error").hidden = false;
    }
    await load();
  }

  function renderPosts(posts) {
    const trs = posts.map((p) => {
      const tr = el("tr");
      tr.dataset.id = p.id;
      tr.appendChild(el("td", p.id));
      tr.appendChild(el("td", p.title));
      const st = el("td");
      st.appendChild(el("span", p.status, "badge " + p.status));
      tr.appendChild(st);
      tr.appendChild(el("td", time(p.scheduledAt)));
      tr.appendChild(el("td", time(p.createdAt)));
      return tr;
    });
    $("posts").replaceChildren(...trs);
    $("posts-empty").hidden = trs.length > 0;
  }

  // renderSeries shows the latest recurring series, each with its next
  // occurrences as local time and instant.
  function renderSeries(series) {
    const trs = series.map((s) => {
      const tr = el("tr");
      tr.dataset.id = s.id;
      tr.appendChild(el("td", s.id));
      tr.appendChild(el("td", s.title));
      const st = el("td");
      st.appendChild(el("span", s.status, "badge " + s.status));
      tr.appendChild(st);
      tr.appendChild(el("td", s.timeZone));
      tr.appendChild(el("td", s.rrule));
      tr.appendChild(el("td", s.nextOccurrences.map((o) => o.occurrence.replace("T", " ") + " (" + time(o.scheduledAt) + ")").join(", ")));
      return tr;
    });
    $("series").replaceChildren(...trs);
    $("series-empty").hidden = trs.length > 0;
  }

  // renderOverdue shows the posts past their time that are neither
  // published, cancelled nor expired, longest overdue first, and why.
  function renderOverdue(o) {
    $("count-overdue").textContent = o.count;
    $("overdue-card").classList.toggle("alarm", o.count > 0);
    $("overdue-oldest").textContent = o.count ? "oldest " + age(o.oldestSeconds) : "";
    $("overdue-grace").textContent = "more than " + age(o.graceSeconds) + " past their time, neither published, cancelled nor expired";
    const trs = o.items.map((p) => {
      const tr = el("tr");
      tr.dataset.id = p.postId;
      tr.appendChild(el("td", p.postId));
      const st = el("td");
      st.appendChild(el("span", p.status, "badge " + p.status));
      tr.appendChild(st);
      tr.appendChild(el("td", time(p.scheduledAt)));
      tr.appendChild(el("td", age(p.overdueSeconds)));
      const reason = el("td", p.reason, "reason");
      reason.title = REASONS[p.reason] || "";
      tr.appendChild(reason);
      tr.appendChild(el("td", p.reannounced));
      tr.appendChild(el("td", p.eventStatus || "–"));
      tr.appendChild(el("td", p.publicationStatus
        ? p.publicationStatus + (p.publicationAttempts ? " (" + p.publicationAttempts + " failed)" : "")
        : "–"));
      tr.appendChild(el("td", p.detail || "", "error-text"));
      return tr;
    });
    $("overdue-rows").replaceChildren(...trs);
    $("overdue-empty").hidden = o.count > 0;
    const more = $("overdue-more");
    more.textContent = o.count > trs.length ? "The " + trs.length + " longest overdue of " + o.count + "; posting posts overdue --limit 1000 lists more." : "";
    more.hidden = !more.textContent;
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("signin-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const token = $("token").value.trim();
      $("token").value = "";
      if (!token) return;
      sessionStorage.setItem(TOKEN_KEY, token);
      load();
    });
    $("signout").addEventListener("click", () => showSignIn());
    $("refresh").addEventListener("click", () => load());
    if (sessionStorage.getItem(TOKEN_KEY)) load(); else showSignIn();
  });
})();
