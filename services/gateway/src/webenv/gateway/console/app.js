// webenv console: a client of the gateway's public REST API and live WebSocket streams (no build step).
// Pages: runs (counts, pass rates, live progress), a run's episodes (filters), an episode replayed step by step
// (screenshot with the target marked, action, timings, a11y-tree diff, verdict per fact), live farm sessions
// (current screenshot, step rate), training (jobs, checkpoints, learning curve), and the API's routes.
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);
const view = $("#view");
const enc = encodeURIComponent;
const ESC = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ESC[c]);
const short = (v, prefix) => String(v ?? "").replace(prefix, "");
const pct = (x) => (x == null || Number.isNaN(x) ? "–" : `${(100 * x).toFixed(1)}%`);
const secs = (x) => (x ? `${Number(x) >= 1 ? Number(x).toFixed(2) + " s" : (1000 * Number(x)).toFixed(0) + " ms"}` : "–");
const when = (ts) => (ts && !ts.startsWith("1970") ? new Date(ts).toLocaleString() : "–");
let cleanup = [];

class ApiError extends Error {
  constructor(status, body) {
    super((body && body.message) || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

async function api(path, opts = {}) {
  const init = { credentials: "same-origin", ...opts };
  if (opts.body) init.headers = { "Content-Type": "application/json" };
  const r = await fetch(path, init);
  if (!r.ok) {
    let body = {};
    try { body = await r.json(); } catch (_) { /* not JSON */ }
    if (r.status === 401) showLogin();
    throw new ApiError(r.status, body);
  }
  return r.json();
}

// A server-streaming route: newline-delimited {"result": ...} / {"error": status}.
async function* ndjson(path) {
  const r = await fetch(path, { credentials: "same-origin" });
  if (!r.ok) {
    let body = {};
    try { body = await r.json(); } catch (_) { /* not JSON */ }
    if (r.status === 401) showLogin();
    throw new ApiError(r.status, body);
  }
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  const parse = (line) => {
    const o = JSON.parse(line);
    if (o.error) throw new ApiError(500, o.error);
    return o.result;
  };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      if (line.trim()) yield parse(line);
    }
  }
  if (buf.trim()) yield parse(buf);
}

function live(path, onMessage, onClose) {
  const scheme = location.protocol === "https:" ? "wss://" : "ws://";
  const ws = new WebSocket(scheme + location.host + path);
  ws.onmessage = (e) => onMessage(JSON.parse(e.data));
  if (onClose) ws.onclose = onClose;
  cleanup.push(() => ws.close());
  return ws;
}

function every(ms, fn) {
  const id = setInterval(fn, ms);
  cleanup.push(() => clearInterval(id));
}

function errorHtml(e) {
  const reason = (e.body && e.body.details || []).map((d) => d.reason).filter(Boolean).join(", ");
  return `<section class="card"><h2>Error ${esc(e.status || "")}</h2><p class="error">${esc(e.message)}</p>
    ${reason ? `<p class="muted">${esc(reason)}</p>` : ""}</section>`;
}

function badge(text, cls) { return `<span class="badge ${esc(cls || text)}">${esc(text)}</span>`; }
function bar(x) { return `<div class="bar" title="${pct(x)}"><span style="width:${Math.round(100 * (x || 0))}%"></span></div>`; }

// -- login ------------------------------------------------------------------------------------------------------
function showLogin() {
  if ($("#login-form")) return;
  view.innerHTML = "";
  view.appendChild($("#login-template").content.cloneNode(true));
  $("#login-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const r = await fetch("/console/login", { method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json" }, body: JSON.stringify({ token: $("#login-token").value }) });
    if (r.ok) route();
    else $("#login-error").textContent = "Wrong token.";
  });
}

// -- runs --------------------------------------------------------------------------------------------------------
function runRow(run) {
  const c = run.counts || {};
  const rate = c.finished ? c.passed / c.finished : null;
  const state = short(run.state, "RUN_STATE_");
  return `<tr class="clickable" data-run="${esc(run.runId)}">
    <td class="mono">${esc(run.runId)}</td><td>${esc(run.spec?.name || "")}</td><td>${badge(state)}</td>
    <td>${esc(run.spec?.policy || "")}</td><td class="num">${c.planned ?? 0}</td><td class="num">${c.finished ?? 0}</td>
    <td class="num">${c.passed ?? 0}</td><td class="num">${c.errored ?? 0}</td><td class="num">${esc(c.steps ?? 0)}</td>
    <td class="num pass-rate">${pct(rate)}</td><td>${bar(rate)}</td><td>${esc(when(run.createdAt))}</td></tr>`;
}

async function runsPage() {
  const { runs } = await api("/v1/runs?page_size=200");
  view.innerHTML = `<h1>Runs</h1>
    ${runs.length ? `<table id="runs"><thead><tr><th>run</th><th>name</th><th>state</th><th>policy</th>
      <th class="num">planned</th><th class="num">finished</th><th class="num">passed</th><th class="num">errored</th>
      <th class="num">steps</th><th class="num">pass rate</th><th></th><th>created</th></tr></thead>
      <tbody>${runs.map(runRow).join("")}</tbody></table>`
      : `<p class="muted">No runs yet. Start one with <code>webenv run</code> or <code>POST /v1/runs</code>.</p>`}`;
  view.querySelectorAll("tr[data-run]").forEach((tr) =>
    tr.addEventListener("click", () => { location.hash = `#/runs/${enc(tr.dataset.run)}`; }));
  for (const run of runs.filter((r) => ["RUN_STATE_RUNNING", "RUN_STATE_PENDING"].includes(r.state)).slice(0, 20)) {
    live(`/v1/runs/${enc(run.runId)}/live`, (m) => {
      if (m.type !== "progress") return;
      const tr = view.querySelector(`tr[data-run="${CSS.escape(run.runId)}"]`);
      if (tr) tr.outerHTML = runRow(m.progress.run);
      view.querySelectorAll("tr[data-run]").forEach((row) =>
        row.addEventListener("click", () => { location.hash = `#/runs/${enc(row.dataset.run)}`; }));
    });
  }
}

const EPISODE_FIELDS = "runId,episodeId,task.taskId,task.instruction,passed,score,policy,policyVersion,level,split," +
  "stepCount,durationSeconds,error,truncated,finishedAt";

function runStats(run, progress) {
  const c = run.counts || {};
  const rate = c.finished ? c.passed / c.finished : null;
  return `<div class="stats">
    <div class="stat"><b>${badge(short(run.state, "RUN_STATE_"))}</b><span>state</span></div>
    <div class="stat"><b>${c.finished ?? 0} / ${c.planned ?? 0}</b><span>episodes finished</span></div>
    <div class="stat"><b id="run-pass-rate">${pct(rate)}</b><span>pass rate (${c.passed ?? 0} passed)</span></div>
    <div class="stat"><b>${c.errored ?? 0}</b><span>errored</span></div>
    <div class="stat"><b>${esc(c.steps ?? 0)}</b><span>steps</span></div>
    ${progress ? `<div class="stat"><b>${progress.stepsPerSecond.toFixed(1)}</b><span>steps/s</span></div>
      <div class="stat"><b>${progress.episodesPerSecond.toFixed(2)}</b><span>episodes/s</span></div>` : ""}
    <div class="stat"><b>${esc(run.spec?.policy || "–")}</b><span>policy</span></div>
  </div>${run.error ? `<p class="error">${esc(run.error)}</p>` : ""}`;
}

async function runPage(runId) {
  const { run } = await api(`/v1/runs/${enc(runId)}`);
  view.innerHTML = `<h1>Run <span class="mono">${esc(runId)}</span> ${esc(run.spec?.name || "")}</h1>
    <section class="card" id="run-stats">${runStats(run)}</section>
    <section class="card"><h2>Episodes</h2>
      <div class="filters">
        <label>task <input id="f-task" placeholder="task id or instruction"></label>
        <label>verdict <select id="f-verdict"><option value="">all</option><option value="passed">passed</option>
          <option value="failed">failed</option><option value="errored">errored</option></select></label>
        <label>policy version <select id="f-version"><option value="*">all</option></select></label>
        <label>level <select id="f-level"><option value="*">all</option></select></label>
        <span id="ep-count" class="muted"></span>
      </div>
      <table id="episodes"><thead><tr><th>episode</th><th>task</th><th>verdict</th><th class="num">score</th>
        <th>policy version</th><th>level</th><th class="num">steps</th><th class="num">time</th><th>error</th></tr></thead>
        <tbody></tbody></table></section>`;
  let episodes = [];
  const load = async () => {
    const out = [];
    const path = `/v1/episodes?run_ids=${enc(runId)}&filter.include_errored=true&limit=5000&read_mask=${enc(EPISODE_FIELDS)}`;
    for await (const r of ndjson(path)) out.push(r.episode);
    episodes = out;
    const fill = (sel, values, label) => {
      const cur = sel.value;
      sel.innerHTML = `<option value="*">all</option>` + [...new Set(values)].sort()
        .map((v) => `<option value="${esc(v)}">${esc(label(v))}</option>`).join("");
      sel.value = [...sel.options].some((o) => o.value === cur) ? cur : "*";
    };
    fill($("#f-version"), episodes.map((e) => e.policyVersion), (v) => v || "(none)");
    fill($("#f-level"), episodes.map((e) => e.level), (v) => short(v, "COLLECTION_LEVEL_"));
    render();
  };
  const render = () => {
    const q = $("#f-task").value.trim().toLowerCase();
    const verdict = $("#f-verdict").value;
    const version = $("#f-version").value;
    const level = $("#f-level").value;
    const shown = episodes.filter((e) =>
      (!q || e.task.taskId.toLowerCase().includes(q) || (e.task.instruction || "").toLowerCase().includes(q)) &&
      (!verdict || (verdict === "errored" ? !!e.error : verdict === "passed" ? e.passed : !e.passed && !e.error)) &&
      (version === "*" || e.policyVersion === version) && (level === "*" || e.level === level));
    $("#ep-count").textContent = `${shown.length} of ${episodes.length}`;
    $("#episodes tbody").innerHTML = shown.map((e) => `<tr class="clickable" data-ep="${esc(e.episodeId)}">
      <td class="mono">${esc(e.episodeId)}</td><td title="${esc(e.task.instruction)}">${esc(e.task.taskId)}</td>
      <td>${e.error ? badge("errored") : e.passed ? badge("passed", "ok") : badge("failed", "bad")}</td>
      <td class="num">${(e.score ?? 0).toFixed(2)}</td><td>${esc(e.policyVersion || "–")}</td>
      <td>${esc(short(e.level, "COLLECTION_LEVEL_"))}</td><td class="num">${e.stepCount}</td>
      <td class="num">${secs(e.durationSeconds)}</td><td class="error">${esc((e.error || "").slice(0, 120))}</td></tr>`).join("");
    view.querySelectorAll("tr[data-ep]").forEach((tr) => tr.addEventListener("click", () => {
      location.hash = `#/runs/${enc(runId)}/episodes/${enc(tr.dataset.ep)}`;
    }));
  };
  ["#f-task", "#f-verdict", "#f-version", "#f-level"].forEach((s) => $(s).addEventListener("input", render));
  await load();
  if (["RUN_STATE_RUNNING", "RUN_STATE_PENDING"].includes(run.state)) {
    let pending = null;
    live(`/v1/runs/${enc(runId)}/live`, (m) => {
      if (m.type === "progress") {
        $("#run-stats").innerHTML = runStats(m.progress.run, m.progress);
        if (m.progress.finished && m.progress.finished.length && !pending) {
          pending = setTimeout(() => { pending = null; load(); }, 1000);
        }
      } else if (m.type === "end") {
        load();
      }
    });
  }
}

// -- episode replay -----------------------------------------------------------------------------------------------
const actionKind = (a) => Object.keys(a || {})[0] || "";

function targetOf(step) {
  const a = step.action || {};
  const kind = actionKind(a);
  const id = step.targetElementId || (a[kind] && a[kind].target && a[kind].target.elementId) || "";
  if (id) {
    const el = (step.observation.elements || []).find((e) => e.elementId === id);
    return { id, box: el && el.bbox && el.bbox.width ? el.bbox : null };
  }
  if (kind === "clickAt") return { point: a.clickAt };
  return null;
}

// Line diff of two a11y trees (LCS; a set difference when the trees are too large for it).
function lineDiff(before, after) {
  const a = (before || "").split("\n");
  const b = (after || "").split("\n");
  if (a.length * b.length > 4e6) {
    const sa = new Set(a);
    const sb = new Set(b);
    return [...a.filter((l) => !sb.has(l)).map((l) => ["-", l]), ...b.filter((l) => !sa.has(l)).map((l) => ["+", l])];
  }
  const n = a.length;
  const m = b.length;
  const dp = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) dp[i][j] = a[i] === b[j] ? dp[i + 1][j + 1] + 1 : Math.max(dp[i + 1][j], dp[i][j + 1]);
  }
  const out = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (a[i] === b[j]) { out.push([" ", a[i]]); i++; j++; }
    else if (dp[i + 1][j] >= dp[i][j + 1]) out.push(["-", a[i++]]);
    else out.push(["+", b[j++]]);
  }
  while (i < n) out.push(["-", a[i++]]);
  while (j < m) out.push(["+", b[j++]]);
  return out;
}

function diffHtml(rows) {
  const changed = rows.map((r) => r[0] !== " ");
  if (!changed.some(Boolean)) return `<p class="muted">No change in the a11y tree.</p>`;
  const keep = rows.map((_, k) => changed.slice(Math.max(0, k - 2), k + 3).some(Boolean));
  let html = "";
  let gap = 0;
  rows.forEach((r, k) => {
    if (!keep[k]) { gap++; return; }
    if (gap) { html += `<div class="gap">… ${gap} unchanged lines</div>`; gap = 0; }
    html += `<div class="${r[0] === "+" ? "add" : r[0] === "-" ? "del" : ""}">${esc(r[0] + " " + r[1])}</div>`;
  });
  if (gap) html += `<div class="gap">… ${gap} unchanged lines</div>`;
  return `<div class="diff" id="axdiff">${html}</div>`;
}

const TIMING_COLORS = [["policy", "#7e57c2"], ["queue", "#bdbdbd"], ["action", "#42a5f5"], ["settle", "#ffb300"],
  ["observe", "#26a69a"], ["other", "#e0e0e0"]];

function timingsHtml(step) {
  const t = step.timings || {};
  const parts = { policy: step.policySeconds || 0, queue: t.queueSeconds || 0, action: t.actionSeconds || 0,
    settle: t.settleSeconds || 0, observe: t.observeSeconds || 0 };
  const envKnown = parts.queue + parts.action + parts.settle + parts.observe;
  parts.other = Math.max(0, (t.totalSeconds || 0) - envKnown);
  const total = Object.values(parts).reduce((x, y) => x + y, 0) || 1;
  return `<div class="timings">${TIMING_COLORS.map(([k, c]) => `<span title="${k} ${secs(parts[k])}"
      style="width:${(100 * parts[k]) / total}%;background:${c}"></span>`).join("")}</div>
    <div class="legend">${TIMING_COLORS.map(([k, c]) => `<span><i style="background:${c}"></i>${k} ${secs(parts[k])}</span>`).join("")}
      <span>environment total ${secs(t.totalSeconds)}</span></div>`;
}

function verdictHtml(ep) {
  const v = ep.verdict || {};
  const facts = {};
  for (const g of ep.task?.rubric?.groups || []) for (const f of g.facts || []) facts[f.factId] = f.description;
  const results = v.results || [];
  return `<h2>Verdict ${ep.error ? badge("errored") : ep.passed ? badge("passed", "ok") : badge("failed", "bad")}</h2>
    <p>score ${(ep.score ?? 0).toFixed(2)} · judge ${esc(v.judgeVersion || "–")} · answer supported ${v.answerSupported ? "yes" : "no"}</p>
    ${ep.trajectory?.finalAnswer ? `<p>final answer: <b>${esc(ep.trajectory.finalAnswer)}</b></p>` : ""}
    ${ep.error ? `<p class="error">${esc(ep.error)}</p>` : ""}
    ${results.length ? `<table class="facts" id="facts"><thead><tr><th>fact</th><th>outcome</th><th>reason</th></tr></thead><tbody>
      ${results.map((r) => `<tr><td><b>${esc(r.factId)}</b> <span class="muted">${esc(r.groupId)} · ${esc(r.criterionKind)}</span>
        <div>${esc(facts[r.factId] || "")}</div></td>
        <td>${badge(short(r.outcome, "FACT_OUTCOME_"))}</td>
        <td>${esc(r.reason)}${r.evidence && r.evidence.excerpt ? `<div class="muted mono">step ${esc(r.evidence.stepIndex)}: ${esc(r.evidence.excerpt)}</div>` : ""}</td></tr>`).join("")}
      </tbody></table>` : `<p class="muted">No per-fact results (goal-less episode or no verdict).</p>`}`;
}

async function episodePage(runId, episodeId) {
  let ep = null;
  for await (const r of ndjson(`/v1/episodes?run_ids=${enc(runId)}&episode_ids=${enc(episodeId)}&filter.include_errored=true`)) ep = r.episode;
  if (!ep) {
    view.innerHTML = errorHtml(new ApiError(404, { message: `episode ${episodeId} not found in run ${runId}` }));
    return;
  }
  const steps = ep.trajectory.steps || [];
  const final = ep.trajectory.finalObservation || {};
  view.innerHTML = `<h1><a href="#/runs/${enc(runId)}">${esc(runId)}</a> / <span class="mono">${esc(episodeId)}</span></h1>
    <section class="card"><b>${esc(ep.task.taskId)}</b> — ${esc(ep.task.instruction || "")}
      <div class="muted">policy ${esc(ep.policy)} ${esc(ep.policyVersion || "")} · ${esc(short(ep.split, "SPLIT_"))} ·
        ${esc(short(ep.level, "COLLECTION_LEVEL_"))} · ${ep.stepCount} steps · ${secs(ep.durationSeconds)}${ep.truncated ? " · truncated" : ""}</div></section>
    <div class="replay">
      <section class="card steps-list" id="step-list">${steps.map((s, k) => `<div data-k="${k}">${k}. ${esc(s.actionText || actionKind(s.action))}
        ${s.lastActionError ? `<span class="err">!</span>` : ""}</div>`).join("")}
        <div data-k="${steps.length}" class="muted">final page</div></section>
      <section class="card" id="step-main"></section>
      <section class="card" id="verdict">${verdictHtml(ep)}</section>
    </div>`;
  let k = 0;
  let timer = null;
  const show = (next) => {
    k = Math.max(0, Math.min(steps.length, next));
    view.querySelectorAll("#step-list div").forEach((d) => d.classList.toggle("active", Number(d.dataset.k) === k));
    const step = steps[k];
    const obs = step ? step.observation : final;
    const nextObs = step ? (steps[k + 1] ? steps[k + 1].observation : final) : null;
    const target = step ? targetOf(step) : null;
    const shot = step && step.screenshotKey ? `/v1/blobs/${enc(step.screenshotKey)}` : "";
    $("#step-main").innerHTML = `
      <div class="filters"><button class="secondary" id="prev">◀ prev</button><button class="secondary" id="next">next ▶</button>
        <button class="secondary" id="play">${timer ? "pause" : "play"}</button>
        <span class="muted">step ${k} of ${steps.length}</span></div>
      <p class="mono">${esc(obs.url || "")}</p>
      ${shot ? `<div class="shot" id="shot"><img id="shot-img" src="${shot}" alt="screenshot of step ${k}"></div>`
        : `<div class="noshot">no screenshot kept for this ${step ? "step" : "page"} (run spec keep_formats)</div>`}
      ${step ? `<h2 style="margin-top:12px">Action <code id="action-text">${esc(step.actionText)}</code></h2>
        ${target && target.id ? `<p class="muted">target element <b id="target-id">${esc(target.id)}</b>${target.box ? "" : " (no box kept)"}</p>` : ""}
        ${step.lastActionError ? `<p class="error">${esc(step.lastActionError)}</p>` : ""}
        <p class="muted">→ ${esc(step.urlAfter)} · reward ${step.reward ?? 0}${step.repeatedState ? " · repeated state" : ""}${step.parseFailed ? " · unparsable policy output" : ""}</p>
        ${step.rawOutput ? `<details><summary>policy output</summary><pre>${esc(step.rawOutput)}</pre></details>` : ""}
        <h2>Timings</h2>${timingsHtml(step)}
        <h2>A11y tree change</h2>${obs.axtree || nextObs?.axtree ? diffHtml(lineDiff(obs.axtree, nextObs?.axtree)) : `<p class="muted">no a11y tree kept</p>`}`
        : `<h2>Final page</h2>${final.axtree ? `<pre class="diff">${esc(final.axtree)}</pre>` : ""}`}`;
    $("#prev").onclick = () => show(k - 1);
    $("#next").onclick = () => show(k + 1);
    $("#play").onclick = () => {
      if (timer) { clearInterval(timer); timer = null; show(k); return; }
      timer = setInterval(() => { if (k >= steps.length) { clearInterval(timer); timer = null; } show(k + 1); }, 1200);
      show(k);
    };
    const img = $("#shot-img");
    if (img && target && (target.box || target.point)) {
      const place = () => {
        // the image may load after the viewer moved on to another step (screenshots load by reference): mark nothing then
        const shot = $("#shot");
        if (!img.isConnected || !shot) return;
        const scale = img.clientWidth / (img.naturalWidth || img.clientWidth || 1);
        const mark = document.createElement("div");
        mark.className = target.box ? "mark" : "mark point";
        mark.id = "target-mark";
        const b = target.box || { x: target.point.x, y: target.point.y, width: 0, height: 0 };
        Object.assign(mark.style, { left: `${b.x * scale}px`, top: `${b.y * scale}px` });
        if (target.box) Object.assign(mark.style, { width: `${b.width * scale}px`, height: `${b.height * scale}px` });
        $("#target-mark")?.remove();
        shot.appendChild(mark);
      };
      if (img.complete && img.naturalWidth) place(); else img.addEventListener("load", place);
    }
  };
  view.querySelectorAll("#step-list div").forEach((d) => d.addEventListener("click", () => show(Number(d.dataset.k))));
  const onKey = (e) => { if (e.key === "ArrowLeft") show(k - 1); if (e.key === "ArrowRight") show(k + 1); };
  document.addEventListener("keydown", onKey);
  cleanup.push(() => { document.removeEventListener("keydown", onKey); if (timer) clearInterval(timer); });
  show(0);
}

// -- live sessions -------------------------------------------------------------------------------------------------
async function livePage() {
  view.innerHTML = `<h1>Live sessions</h1><p class="muted" id="farm"></p><div class="grid" id="sessions"></div>`;
  const seen = {};
  const thumbs = {};
  let turn = 0;
  const refresh = async () => {
    const [{ sessions }, cap] = await Promise.all([api("/v1/sessions?page_size=200"), api("/v1/farm/capacity")]);
    $("#farm").textContent = `node ${cap.node}: ${cap.activeSessions} of ${cap.maxSessions} sessions, ${cap.browsers} browser(s)` +
      (cap.draining ? " · draining" : "");
    const now = performance.now();
    for (const s of sessions) {
      const prev = seen[s.sessionId];
      const rate = prev && now > prev.t ? (1000 * (s.stepCount - prev.n)) / (now - prev.t) : 0;
      seen[s.sessionId] = { t: prev && s.stepCount === prev.n ? prev.t : now, n: s.stepCount, rate: prev ? (s.stepCount === prev.n ? prev.rate * 0.5 : rate) : 0 };
    }
    $("#sessions").innerHTML = sessions.length ? sessions.map((s) => `<div class="card session-card" data-session="${esc(s.sessionId)}">
      ${thumbs[s.sessionId] ? `<img alt="current screenshot" src="${thumbs[s.sessionId]}">` : `<div class="thumb-empty">no preview yet</div>`}
      <div class="mono">${esc(s.sessionId.slice(0, 12))}</div>
      <div>${esc(s.taskId || (s.tabs?.[0]?.url ?? ""))}</div>
      <div class="muted"><span class="step-count">${s.stepCount}</span> steps · ${seen[s.sessionId].rate.toFixed(2)} steps/s
        ${s.labels?.run_id ? ` · run ${esc(s.labels.run_id)}` : ""}</div></div>`).join("")
      : `<p class="muted">No open sessions on this farm node.</p>`;
    view.querySelectorAll("[data-session]").forEach((el) => el.addEventListener("click", () => {
      location.hash = `#/live/${enc(el.dataset.session)}`;
    }));
    // Previews, two per refresh in turn (the farm bounds captures; a busy answer just skips a turn).
    for (let i = 0; i < Math.min(2, sessions.length); i++) {
      const s = sessions[(turn++) % sessions.length];
      try {
        const shot = await api(`/v1/sessions/${enc(s.sessionId)}/screenshot?screenshot.width=320&screenshot.codec=IMAGE_CODEC_JPEG`);
        thumbs[s.sessionId] = `data:image/jpeg;base64,${shot.screenshot.data}`;
        const card = view.querySelector(`[data-session="${CSS.escape(s.sessionId)}"]`);
        if (card) {
          const img = card.querySelector("img") || document.createElement("img");
          img.alt = "current screenshot";
          img.src = thumbs[s.sessionId];
          card.querySelector(".thumb-empty")?.replaceWith(img);
        }
      } catch (e) {
        if (![404, 400, 429, 503].includes(e.status)) throw e;
      }
    }
  };
  await refresh();
  every(2000, () => refresh().catch((e) => { $("#farm").textContent = e.message; }));
}

async function sessionPage(sessionId) {
  const { session } = await api(`/v1/sessions/${enc(sessionId)}`);
  view.innerHTML = `<h1>Session <span class="mono">${esc(sessionId)}</span></h1>
    <section class="card"><div class="stats">
      <div class="stat"><b id="s-state">${badge(short(session.state, "SESSION_STATE_"))}</b><span>state</span></div>
      <div class="stat"><b id="s-steps">${session.stepCount}</b><span>steps</span></div>
      <div class="stat"><b id="s-rate">–</b><span>steps/s</span></div>
      <div class="stat"><b id="s-dropped">0</b><span>frames dropped</span></div>
      <div class="stat"><b>${esc(session.taskId || "–")}</b><span>task</span></div></div>
      <p class="mono" id="s-url">${esc(session.tabs?.find((t) => t.active)?.url || "")}</p></section>
    <div class="live-layout">
      <section class="card"><div class="shot"><img id="live-frame" alt="current screenshot" style="display:none"></div>
        <div class="noshot" id="no-frame">waiting for a frame…</div></section>
      <section class="card"><h2>Steps</h2><div class="log" id="s-log"><p class="muted">Steps made through this gateway appear here as they happen.</p></div></section>
    </div>`;
  live(`/v1/sessions/${enc(sessionId)}/live?frames=1`, (m) => {
    if (m.type === "progress") {
      $("#s-steps").textContent = m.session.stepCount;
      $("#s-rate").textContent = m.stepRate.toFixed(2);
      $("#s-state").innerHTML = badge(short(m.session.state, "SESSION_STATE_"));
      const tab = (m.session.tabs || []).find((t) => t.active);
      if (tab) $("#s-url").textContent = tab.url;
    } else if (m.type === "step") {
      $("#s-steps").textContent = Math.max(Number($("#s-steps").textContent) || 0, m.stepIndex + 1);
      $("#s-url").textContent = m.observation.url;
      const row = document.createElement("div");
      row.className = "step-row";
      row.innerHTML = `<b>${m.stepIndex}.</b> <code>${esc(m.actionText)}</code> <span class="muted">${secs(m.timings.totalSeconds)}</span>
        ${m.observation.lastActionError ? `<div class="error">${esc(m.observation.lastActionError)}</div>` : ""}
        <div class="muted mono">${esc(m.observation.url)}</div>`;
      $("#s-log .muted")?.remove();
      $("#s-log").prepend(row);
    } else if (m.type === "frame") {
      const img = $("#live-frame");
      img.src = `data:${m.mime};base64,${m.data}`;
      img.style.display = "block";
      img.dataset.step = m.stepIndex;
      $("#no-frame").style.display = "none";
    } else if (m.type === "dropped") {
      $("#s-dropped").textContent = m.dropped;
    } else if (m.type === "end") {
      $("#s-state").innerHTML = badge(short(m.state, "SESSION_STATE_"));
    } else if (m.type === "error") {
      $("#s-log").insertAdjacentHTML("afterbegin", `<p class="error">${esc(m.error.message)}</p>`);
    }
  });
}

// -- training --------------------------------------------------------------------------------------------------------
function lineChart(series, { width = 760, height = 260, yMax = null, yLabel = "" } = {}) {
  const pts = series.flatMap((s) => s.points);
  if (!pts.length) return "";
  const xs = pts.map((p) => p.x);
  const ys = pts.map((p) => p.y);
  const x0 = Math.min(...xs);
  const x1 = Math.max(...xs, x0 + 1);
  const y1 = yMax ?? Math.max(...ys, 1e-9) * 1.1;
  const L = 50;
  const B = 30;
  const sx = (x) => L + ((x - x0) / (x1 - x0)) * (width - L - 10);
  const sy = (y) => height - B - (y / y1) * (height - B - 10);
  const grid = [0, 0.25, 0.5, 0.75, 1].map((f) => `<line x1="${L}" x2="${width - 10}" y1="${sy(f * y1)}" y2="${sy(f * y1)}" stroke="#eee"/>
    <text x="4" y="${sy(f * y1) + 4}">${(f * y1).toFixed(y1 > 10 ? 0 : 2)}</text>`).join("");
  const lines = series.map((s) => `<polyline fill="none" stroke="${s.color}" stroke-width="2"
      points="${s.points.map((p) => `${sx(p.x)},${sy(p.y)}`).join(" ")}"/>
    ${s.points.map((p) => `<circle cx="${sx(p.x)}" cy="${sy(p.y)}" r="3" fill="${s.color}"><title>${esc(p.label)}: ${p.y.toFixed(3)}</title></circle>`).join("")}`).join("");
  const legend = series.map((s, i) => `<text x="${L + 10 + i * 160}" y="${height - 8}" style="fill:${s.color}">■ ${esc(s.name)}</text>`).join("");
  return `<svg viewBox="0 0 ${width} ${height}" width="100%" role="img" aria-label="${esc(yLabel)}">${grid}${lines}${legend}</svg>`;
}

async function trainingPage() {
  let jobs = [];
  let checkpoints = [];
  try {
    ({ jobs } = await api("/v1/jobs?page_size=200"));
    ({ checkpoints } = await api("/v1/checkpoints?page_size=500"));
  } catch (e) {
    if ([501, 503].includes(e.status)) {
      view.innerHTML = `<h1>Training</h1><p class="muted">No trainer answers at this gateway (WEBENV_TRAINER_ADDR): ${esc(e.message)}</p>`;
      return;
    }
    throw e;
  }
  if (!jobs.length && !checkpoints.length) {
    view.innerHTML = `<h1>Training</h1><p class="muted">No training jobs yet.</p>`;
    return;
  }
  const { runs } = await api("/v1/runs?page_size=500");
  const cps = [...checkpoints].sort((a, b) => (a.createdAt < b.createdAt ? -1 : 1));
  const evalRate = (ref) => {
    const rs = runs.filter((r) => r.spec?.policy === ref && r.counts?.finished);
    const fin = rs.reduce((x, r) => x + r.counts.finished, 0);
    return fin ? rs.reduce((x, r) => x + r.counts.passed, 0) / fin : null;
  };
  const pointsOf = (key) => cps.map((c, i) => ({ x: i + 1, y: Number(c[key] || 0), label: c.ref })).filter((p) => p.y > 0);
  const success = cps.map((c, i) => ({ x: i + 1, y: evalRate(c.ref), label: c.ref })).filter((p) => p.y != null);
  view.innerHTML = `<h1>Training</h1>
    <section class="card" id="curve"><h2>Learning curve (by checkpoint, oldest first)</h2>
      ${lineChart([{ name: "training loss", color: "#2457d6", points: pointsOf("loss") },
                   { name: "validation loss", color: "#e53935", points: pointsOf("validationLoss") }], { yLabel: "loss" })}
      ${success.length ? `<h2>Success rate of runs with each checkpoint</h2>${lineChart([{ name: "pass rate", color: "#1a7f37", points: success }], { yMax: 1, yLabel: "pass rate" })}`
        : `<p class="muted">No run has used a checkpoint as its policy yet (RunSpec.policy = "name@version").</p>`}
    </section>
    <section class="card"><h2>Jobs</h2><table id="jobs"><thead><tr><th>job</th><th>name</th><th>algorithm</th><th>state</th>
      <th class="num">step</th><th class="num">loss</th><th class="num">val loss</th><th class="num">val acc</th>
      <th class="num">examples/s</th><th>checkpoint</th><th>created</th></tr></thead><tbody>
      ${jobs.map((j) => `<tr><td class="mono">${esc(j.jobId)}</td><td>${esc(j.spec?.name)}</td>
        <td>${esc(short(j.spec?.algorithm, "TRAINING_ALGORITHM_"))}</td><td>${badge(short(j.state, "JOB_STATE_"))}</td>
        <td class="num">${j.progress?.step ?? 0} / ${j.progress?.totalSteps ?? 0}</td><td class="num">${(j.progress?.loss ?? 0).toFixed(3)}</td>
        <td class="num">${(j.progress?.validationLoss ?? 0).toFixed(3)}</td><td class="num">${pct(j.progress?.validationAccuracy)}</td>
        <td class="num">${(j.progress?.examplesPerSecond ?? 0).toFixed(1)}</td><td>${esc(j.checkpoint?.ref || "")}</td>
        <td>${esc(when(j.createdAt))}</td></tr>`).join("")}</tbody></table></section>
    <section class="card"><h2>Checkpoints</h2><table id="checkpoints"><thead><tr><th>ref</th><th>parent</th><th class="num">episodes</th>
      <th class="num">examples</th><th class="num">steps</th><th class="num">loss</th><th class="num">val loss</th><th>data runs</th></tr></thead><tbody>
      ${checkpoints.map((c) => `<tr><td>${esc(c.ref)}</td><td>${esc(c.parent || "–")}</td><td class="num">${c.episodes}</td>
        <td class="num">${c.examples}</td><td class="num">${c.steps}</td><td class="num">${(c.loss ?? 0).toFixed(3)}</td>
        <td class="num">${(c.validationLoss ?? 0).toFixed(3)}</td><td class="mono">${esc((c.dataRunIds || []).join(", "))}</td></tr>`).join("")}
      </tbody></table></section>`;
}

// -- API reference ---------------------------------------------------------------------------------------------------
async function apiPage() {
  const doc = await (await fetch("/openapi.json")).json();
  const rows = [];
  for (const [path, ops] of Object.entries(doc.paths)) {
    for (const [verb, op] of Object.entries(ops)) rows.push({ path, verb: verb.toUpperCase(), op });
  }
  view.innerHTML = `<h1>API</h1><p>The full document: <a href="/openapi.json">/openapi.json</a> (OpenAPI ${esc(doc.openapi)}).
    Errors are <code>google.rpc.Status</code> JSON; with a token, send <code>Authorization: Bearer …</code>.</p>
    <table id="routes"><thead><tr><th>method</th><th>path</th><th>operation</th><th>description</th></tr></thead><tbody>
    ${rows.map((r) => `<tr><td><b>${r.verb}</b></td><td class="mono">${esc(r.path)}</td><td>${esc(r.op.operationId)}</td>
      <td>${esc(r.op.description || r.op.summary || "")}</td></tr>`).join("")}</tbody></table>`;
}

// -- router ----------------------------------------------------------------------------------------------------------
const ROUTES = [
  [/^#\/runs\/([^/]+)\/episodes\/([^/]+)$/, episodePage, "runs"],
  [/^#\/runs\/([^/]+)$/, runPage, "runs"],
  [/^#\/runs$/, runsPage, "runs"],
  [/^#\/live\/([^/]+)$/, sessionPage, "live"],
  [/^#\/live$/, livePage, "live"],
  [/^#\/training$/, trainingPage, "training"],
  [/^#\/api$/, apiPage, "api"],
];

async function route() {
  cleanup.forEach((f) => { try { f(); } catch (_) { /* already closed */ } });
  cleanup = [];
  const hash = location.hash || "#/runs";
  for (const [re, page, nav] of ROUTES) {
    const m = hash.match(re);
    if (!m) continue;
    document.querySelectorAll("[data-nav]").forEach((a) => a.classList.toggle("active", a.dataset.nav === nav));
    view.innerHTML = `<p class="muted">Loading…</p>`;
    try {
      await page(...m.slice(1).map(decodeURIComponent));
    } catch (e) {
      if (e.status !== 401) view.innerHTML = errorHtml(e);
    }
    return;
  }
  location.hash = "#/runs";
}

window.addEventListener("hashchange", route);
(async () => {
  const auth = await (await fetch("/console/auth", { credentials: "same-origin" })).json();
  $("#status").textContent = auth.required ? "token required" : "";
  if (auth.required && !auth.authenticated) showLogin();
  else route();
})();
