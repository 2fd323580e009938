// The Drover dashboard: a client of the service's public JSON interface, nothing more.
//
// Rules this file keeps (see crates/api/src/dashboard.rs):
// - every value from the server reaches the page as text (textContent, text nodes,
//   attributes set one by one); nothing is ever parsed as HTML;
// - the login lives in sessionStorage (this tab only) and goes with each request as
//   HTTP Basic; fetches use credentials "omit", so the browser neither adds cookies or
//   cached logins nor pops up its own login dialog on a 401;
// - no inline script or style (the Content-Security-Policy forbids them): styles are
//   classes, CSSOM properties or SVG presentation attributes.
"use strict";

const REST = new URL("../rest/", document.baseURI);
const KEY_AUTH = "drover.auth";
const KEY_USER = "drover.user";
const FINAL_STATES = ["COMPLETED", "REMOVED", "VACATED"];
const JOB_STATES = ["IDLE", "STARTING", "RUNNING", "SUSPENDED", "HOLD", "DEFERRED", "BLOCKED",
  "STAGING", "NOTQUEUED", "UNKNOWN", "COMPLETED", "REMOVED", "VACATED"];
const COLORS = ["#2f7dc1", "#e07b00", "#2e9e48", "#c23b6b", "#7a5cc7", "#0f9c9c", "#8c6d1f", "#5b6770"];

// ---------------------------------------------------------------- DOM helpers

const $ = (id) => document.getElementById(id);

// An element with attributes (functions under "on..." become listeners) and children
// (strings become text nodes; null and false are skipped).
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

const SVG_NS = "http://www.w3.org/2000/svg";
function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

function setAttrs(el, attrs) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      el.addEventListener(name.slice(2), value);
    } else if (name === "text") {
      el.textContent = String(value);
    } else {
      el.setAttribute(name, value === true ? "" : String(value));
    }
  }
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
}

// Any JSON value as short text.
function text(value) {
  if (value === null || value === undefined || value === "") return "–";
  if (Array.isArray(value)) {
    return value.length ? value.map((v) => (typeof v === "object" && v ? v.id ?? v.name ?? JSON.stringify(v) : v)).join(", ") : "–";
  }
  if (typeof value === "object") return JSON.stringify(value);
  if (typeof value === "number" && value === -1) return "–";
  return String(value);
}

function badge(state) {
  const value = state === null || state === undefined ? "–" : String(state);
  return h("span", { class: "state state-" + value.replace(/[^A-Za-z]/g, "") }, value);
}

function jobLink(id) {
  return h("a", { href: "#/job/" + encodeURIComponent(id) }, id);
}

// A wire date `yyyy-MM-dd HH:mm:ss UTC` as milliseconds. Charts ask for version 2, whose
// dates are in UTC; a version-1 date in the deployment's zone is only ever shown as text.
function parseDate(value) {
  const m = /^(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)/.exec(value || "");
  if (!m) return null;
  return Date.UTC(+m[1], +m[2] - 1, +m[3], +m[4], +m[5], +m[6]);
}

function pad(n) {
  return String(n).padStart(2, "0");
}

function timeLabel(ms, withDate) {
  const d = new Date(ms);
  const time = pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes());
  return withDate ? pad(d.getUTCMonth() + 1) + "-" + pad(d.getUTCDate()) + " " + time : time;
}

function duration(seconds) {
  if (seconds === null || seconds === undefined || seconds < 0) return "–";
  const h_ = Math.floor(seconds / 3600);
  const m = Math.floor((seconds % 3600) / 60);
  const s_ = Math.floor(seconds % 60);
  return h_ ? `${h_}h ${pad(m)}m` : m ? `${m}m ${pad(s_)}s` : `${s_}s`;
}

// A table: columns are {title, value(row) -> text or Node, sort?, num?}.
function table(columns, rows, options = {}) {
  const head = h("tr", null, columns.map((c) => {
    const th = h("th", { class: c.sort && options.onSort ? "sortable" : null, scope: "col" }, c.title);
    if (c.sort && options.onSort) {
      if (options.sorted && options.sorted.field === c.sort) th.append(options.sorted.dir > 0 ? " ▲" : " ▼");
      th.addEventListener("click", () => options.onSort(c.sort));
    }
    return th;
  }));
  const body = rows.map((row) => {
    const tr = h("tr", { class: options.onRow ? "clickable" : null },
      columns.map((c) => {
        const value = c.value(row);
        return h("td", { class: c.num ? "num" : null, "data-col": c.key || null },
          value instanceof Node ? value : text(value));
      }));
    if (options.onRow) tr.addEventListener("click", (e) => {
      if (e.target.closest("a, button")) return;
      options.onRow(row);
    });
    if (options.rowId) tr.dataset.id = options.rowId(row);
    return tr;
  });
  if (!rows.length) {
    body.push(h("tr", null, h("td", { colspan: columns.length, class: "muted" }, options.empty || "Nothing here.")));
  }
  return h("table", { id: options.id || null }, h("thead", null, head), h("tbody", null, body));
}

// ---------------------------------------------------------------- the interface

class ApiError extends Error {
  constructor(status, messages) {
    super(messages.join("\n") || `HTTP ${status}`);
    this.status = status;
    this.messages = messages;
  }
}

function authHeader() {
  return "Basic " + sessionStorage.getItem(KEY_AUTH);
}

function restUrl(path, params) {
  const url = new URL(path, REST);
  for (const [name, value] of Object.entries(params || {})) {
    if (value === undefined || value === null || value === "") continue;
    url.searchParams.set(name, typeof value === "object" ? JSON.stringify(value) : String(value));
  }
  return url;
}

// Calls the interface with the login; a 401 returns to the login form with the
// server's message.
async function api(path, { method = "GET", params, body, signal } = {}) {
  const headers = { Accept: "application/json", Authorization: authHeader() };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(restUrl(path, params), {
    method, headers, signal, credentials: "omit", cache: "no-store",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const raw = await response.text();
  let data = null;
  try {
    data = raw ? JSON.parse(raw) : null;
  } catch (_) {
    data = null;
  }
  if (!response.ok) {
    const messages = data && Array.isArray(data.messages) ? data.messages.map(String) : [raw.slice(0, 300)];
    const error = new ApiError(response.status, messages);
    if (response.status === 401) logout(error.message);
    throw error;
  }
  return data;
}

// ---------------------------------------------------------------- login

function encodeLogin(user, password) {
  const bytes = new TextEncoder().encode(user + ":" + password);
  let binary = "";
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary);
}

function showLogin(message) {
  stopView();
  $("nav").hidden = true;
  $("who").hidden = true;
  $("view").hidden = true;
  $("banner").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = message || "";
  $("login-user").focus();
}

function logout(message) {
  sessionStorage.removeItem(KEY_AUTH);
  sessionStorage.removeItem(KEY_USER);
  showLogin(message);
}

async function login(event) {
  event.preventDefault();
  const user = $("login-user").value;
  const password = $("login-password").value;
  const button = event.target.querySelector("button");
  button.disabled = true;
  $("login-error").textContent = "";
  try {
    const response = await fetch(restUrl("diag/auth"), {
      headers: { Accept: "application/json", Authorization: "Basic " + encodeLogin(user, password) },
      credentials: "omit", cache: "no-store",
    });
    if (!response.ok) {
      let message = `The service answered ${response.status}`;
      try {
        const data = await response.json();
        if (Array.isArray(data.messages)) message = data.messages.join("\n");
      } catch (_) { /* not JSON */ }
      $("login-error").textContent = message;
      return;
    }
    sessionStorage.setItem(KEY_AUTH, encodeLogin(user, password));
    sessionStorage.setItem(KEY_USER, user);
    $("login-password").value = "";
    start();
  } catch (e) {
    $("login-error").textContent = "Cannot reach the service: " + e.message;
  } finally {
    button.disabled = false;
  }
}

// ---------------------------------------------------------------- views

let cleanup = [];
let viewToken = 0;

function stopView() {
  viewToken++;
  for (const stop of cleanup) stop();
  cleanup = [];
}

// Runs `fn` (which returns a promise) `ms` after `first` settles, then `ms` after each
// run settles, while the current view is shown: a slow answer never piles requests up.
// Skipped while the tab is hidden: a dashboard left open in the background costs the
// server nothing. Returns a function that stops it.
function every(ms, fn, first) {
  let timer = null;
  let stopped = false;
  const next = () => { if (!stopped) timer = setTimeout(tick, ms); };
  const tick = () => {
    if (document.hidden) return next();
    Promise.resolve(fn()).finally(next);
  };
  Promise.resolve(first).finally(next);
  const stop = () => {
    stopped = true;
    clearTimeout(timer);
  };
  cleanup.push(stop);
  return stop;
}

function banner(message) {
  $("banner").textContent = message || "";
  $("banner").hidden = !message;
}

// Calls `fn` and shows what it throws (but a 401, which went to the login form).
async function guarded(fn) {
  try {
    await fn();
    banner("");
  } catch (e) {
    if (e.name === "AbortError") return;
    if (e instanceof ApiError && e.status === 401) return;
    banner(e.message);
  }
}

const VIEWS = {
  queue: queueView,
  job: jobView,
  nodes: nodesView,
  reservations: reservationsView,
  reports: reportsView,
  events: eventsView,
  vms: vmsView,
  services: servicesView,
};

function route() {
  if (!sessionStorage.getItem(KEY_AUTH)) {
    showLogin("");
    return;
  }
  stopView();
  const [, name = "queue", ...rest] = location.hash.split("/");
  const view = VIEWS[name] ? name : "queue";
  for (const a of document.querySelectorAll("nav a")) {
    a.classList.toggle("active", a.dataset.view === view || (view === "job" && a.dataset.view === "queue"));
  }
  banner("");
  const root = $("view");
  clear(root);
  root.hidden = false;
  root.dataset.view = view;
  let arg = rest.join("/");
  try {
    arg = decodeURIComponent(arg);
  } catch (_) { /* a malformed escape is taken as it is */ }
  VIEWS[view](root, arg, viewToken);
}

function start() {
  $("login").hidden = true;
  $("nav").hidden = false;
  $("who").hidden = false;
  $("user").textContent = sessionStorage.getItem(KEY_USER) || "";
  route();
}

// -------- queue

const queue = { state: "", user: "", id: "", sort: "submitDate", dir: -1, offset: 0, max: 20, live: true };

function queueQuery() {
  const query = {};
  if (queue.state === "active") query.state = { $in: JOB_STATES.filter((s) => !FINAL_STATES.includes(s)) };
  else if (queue.state) query.state = queue.state;
  if (queue.user) query.user = queue.user;
  if (queue.id) query.$or = [{ id: queue.id }, { name: queue.id }];
  return query;
}

function queueView(root, _arg, token) {
  const results = h("div", { id: "queue-results" });
  const pager = h("div", { class: "pager" });
  const stateSelect = h("select", { id: "filter-state" },
    h("option", { value: "" }, "any state"), h("option", { value: "active" }, "not finished"),
    JOB_STATES.map((s_) => h("option", { value: s_ }, s_)));
  stateSelect.value = queue.state;
  const userInput = h("input", { id: "filter-user", placeholder: "user", size: 10, value: queue.user });
  const idInput = h("input", { id: "filter-id", placeholder: "job id or name", size: 14, value: queue.id });
  const maxSelect = h("select", { id: "page-size" }, [10, 20, 50, 100].map((n) => h("option", { value: n }, n)));
  maxSelect.value = String(queue.max);
  const live = h("input", { type: "checkbox", id: "queue-live", checked: queue.live });

  const load = () => guarded(async () => {
    const page = await api("jobs", {
      params: {
        query: queueQuery(), sort: { [queue.sort]: queue.dir }, offset: queue.offset, max: queue.max,
        fields: "id,name,user,state,blockReason,submitDate,startDate,completionDate,hosts,commandFile,commandLineArguments",
      },
    });
    if (token !== viewToken) return;
    clear(results);
    results.append(table([
      { title: "Job", key: "id", sort: "id", value: (j) => jobLink(j.id) },
      { title: "Name", key: "name", sort: "name", value: (j) => j.name },
      { title: "User", key: "user", sort: "user", value: (j) => j.user },
      { title: "State", key: "state", sort: "state", value: (j) => {
        const state = badge(j.state);
        // Why a job waits, on hovering its state.
        if (j.blockReason && j.blockReason.message) state.title = j.blockReason.message;
        return state;
      } },
      { title: "Submitted", key: "submitDate", sort: "submitDate", value: (j) => j.submitDate },
      { title: "Started", key: "startDate", sort: "startDate", value: (j) => j.startDate },
      { title: "Completed", key: "completionDate", sort: "completionDate", value: (j) => j.completionDate },
      { title: "Hosts", key: "hosts", value: (j) => j.hosts },
      { title: "Command", key: "command", value: (j) => [j.commandFile, j.commandLineArguments].filter(Boolean).join(" ") },
    ], page.results, {
      id: "queue-table",
      rowId: (j) => j.id,
      onRow: (j) => { location.hash = "#/job/" + encodeURIComponent(j.id); },
      sorted: { field: queue.sort, dir: queue.dir },
      onSort: (field) => {
        queue.dir = queue.sort === field ? -queue.dir : 1;
        queue.sort = field;
        load();
      },
      empty: "No jobs match.",
    }));
    clear(pager);
    const first = page.totalCount ? queue.offset + 1 : 0;
    pager.append(
      h("button", { type: "button", id: "page-prev", disabled: queue.offset === 0, onclick: () => { queue.offset = Math.max(0, queue.offset - queue.max); load(); } }, "‹ Previous"),
      h("span", { id: "page-info" }, `${first}–${queue.offset + page.resultCount} of ${page.totalCount}`),
      h("button", { type: "button", id: "page-next", disabled: queue.offset + page.resultCount >= page.totalCount, onclick: () => { queue.offset += queue.max; load(); } }, "Next ›"),
    );
  });

  const apply = (event) => {
    if (event) event.preventDefault();
    queue.state = stateSelect.value;
    queue.user = userInput.value.trim();
    queue.id = idInput.value.trim();
    queue.max = Number(maxSelect.value);
    queue.offset = 0;
    load();
  };
  stateSelect.addEventListener("change", apply);
  maxSelect.addEventListener("change", apply);
  live.addEventListener("change", () => { queue.live = live.checked; });

  root.append(
    h("h1", null, "Queue"),
    submitPanel(load),
    h("form", { class: "toolbar", id: "queue-filter", onsubmit: apply },
      h("label", null, "State", stateSelect),
      h("label", null, "User", userInput),
      h("label", null, "Job", idInput),
      h("label", null, "Per page", maxSelect),
      h("button", { type: "submit" }, "Filter"),
      h("label", { class: "inline" }, h("span", null, live, " refresh every 2 s"))),
    results, pager);
  every(2000, () => (queue.live ? load() : null), load());
}

function submitPanel(reload) {
  const command = h("input", { id: "submit-command", value: "/bin/sleep", size: 24, required: true });
  const args = h("input", { id: "submit-args", value: "2", size: 16 });
  const name = h("input", { id: "submit-name", placeholder: "optional", size: 12 });
  const duration_ = h("input", { id: "submit-duration", placeholder: "seconds", size: 8, inputmode: "numeric" });
  const result = h("span", { id: "submit-result", class: "muted" });
  const submit = (event) => guarded(async () => {
    event.preventDefault();
    const body = { commandFile: command.value.trim() };
    if (args.value.trim()) body.commandLineArguments = args.value.trim();
    if (name.value.trim()) body.customName = name.value.trim();
    if (duration_.value.trim()) body.duration = Number(duration_.value.trim());
    result.textContent = "";
    try {
      const answer = await api("jobs", { method: "POST", params: { "api-version": 2 }, body });
      result.textContent = "Submitted " + answer.name;
      result.dataset.job = answer.name;
      reload();
    } catch (e) {
      if (e instanceof ApiError && e.status !== 401) {
        result.textContent = e.message;
        return;
      }
      throw e;
    }
  });
  return h("details", { class: "panel", id: "submit-panel" },
    h("summary", null, "Submit a job"),
    h("form", { class: "toolbar", id: "submit-form", onsubmit: submit },
      h("label", null, "Command file", command),
      h("label", null, "Arguments", args),
      h("label", null, "Name", name),
      h("label", null, "Duration", duration_),
      h("button", { type: "submit" }, "Submit"),
      result));
}

// -------- one job

const JOB_FIELDS = ["id", "name", "user", "group", "account", "qos", "queue", "state", "expectedState",
  "queueStatus", "holds", "flags", "blockReason", "commandFile", "commandLineArguments",
  "initialWorkingDirectory", "hosts", "masterHost", "rmName", "submitDate", "startDate",
  "completionDate", "completionCode", "durationRequested", "activeDuration", "effectiveQueueDuration",
  "dedicatedProcessorSeconds", "startPriority", "reservationRequested", "rmStandardOutputFilePath",
  "rmStandardErrorFilePath", "variables"];

function jobView(root, id, token) {
  const title = h("h1", null, "Job ", h("span", { id: "job-id" }, id));
  const actions = h("div", { class: "toolbar" });
  const fields = h("dl", { class: "fields", id: "job-fields" });
  const messages = h("div", { id: "job-messages" });
  const events = h("div", { id: "job-events" });
  const all = h("pre", { id: "job-json" });
  root.append(title, actions,
    h("div", { class: "grid2" },
      h("div", { class: "panel" }, h("h2", null, "Fields"), fields),
      h("div", null,
        h("div", { class: "panel" }, h("h2", null, "Messages"), messages),
        h("div", { class: "panel" }, h("h2", null, "Events"), events))),
    h("details", { class: "panel" }, h("summary", null, "Every field (JSON)"), all));

  const act = (label, path) => h("button", {
    type: "button", "data-action": path,
    onclick: () => guarded(async () => {
      const answer = await api(`jobs/${encodeURIComponent(id)}/${path}`, { method: "PUT", body: path === "hold" ? { holds: ["USER"] } : {} });
      banner("");
      actions.dataset.answer = (answer && answer.messages || []).join(" ");
      load();
    }),
  }, label);
  actions.append(act("Cancel", "cancel"), act("Hold", "hold"), act("Release", "unhold"),
    h("a", { href: "#/queue" }, "← back to the queue"));

  let stop = () => {};
  const load = () => guarded(async () => {
    // Events need events:read, which not every role holds: the job shows without them.
    const [job, history] = await Promise.all([
      api("jobs/" + encodeURIComponent(id)).catch((e) => {
        // No such job (or not the caller's): asking again would not change that.
        if (e instanceof ApiError && e.status === 404) stop();
        throw e;
      }),
      api("events", { params: { query: { "primaryObject.id": id }, sort: { id: 1 }, max: 200 } })
        .catch((e) => { if (e instanceof ApiError && e.status === 403) return e; throw e; }),
    ]);
    if (token !== viewToken) return;
    clear(fields);
    for (const name of JOB_FIELDS) {
      let value = job[name];
      if (name === "blockReason" && value) value = value.message;
      fields.append(h("dt", null, name), h("dd", { "data-field": name }, name === "state" ? badge(value) : text(value)));
    }
    clear(messages);
    messages.append(table([
      { title: "Time", value: (m) => m.creationTime },
      { title: "Author", value: (m) => m.author },
      { title: "Message", value: (m) => m.message },
    ], job.messages || [], { empty: "No messages." }));
    clear(events);
    if (history instanceof ApiError) events.append(h("p", { class: "muted" }, history.message));
    else events.append(table([
      { title: "Time", value: (e) => e.eventTime },
      { title: "Type", key: "type", value: (e) => e.eventType },
      { title: "Status", value: (e) => e.status },
      { title: "Details", value: (e) => Object.entries(e.details || {}).map(([k, v]) => `${k}=${v}`).join(" ") },
    ], history.results, { id: "job-events-table", empty: "No events." }));
    all.textContent = JSON.stringify(job, null, 2);
    for (const button of actions.querySelectorAll("button")) button.disabled = FINAL_STATES.includes(job.state);
  });
  stop = every(2000, load, load());
}

// -------- nodes

function usageBar(total, available) {
  if (!(total > 0) || available < 0) return h("span", { class: "muted" }, "–");
  const used = Math.max(0, total - available);
  const bar = h("span");
  bar.style.width = Math.min(100, (100 * used) / total).toFixed(1) + "%";
  return h("span", { title: `${used} of ${total} in use` },
    h("span", { class: "bar" }, bar), ` ${used} / ${total}`);
}

function nodesView(root, _arg, token) {
  const list = h("div", { id: "nodes" });
  root.append(h("h1", null, "Nodes"), h("p", { class: "muted" }, "Load, and what runs where. Refreshed every 3 s."), list);
  const load = () => guarded(async () => {
    const [nodes, running] = await Promise.all([
      api("nodes", { params: { sort: { id: 1 } } }),
      api("jobs", { params: { query: { state: { $in: ["RUNNING", "STARTING", "SUSPENDED"] } }, fields: "id,user,hosts", max: 1000 } }),
    ]);
    if (token !== viewToken) return;
    const owner = new Map(running.results.map((j) => [j.id, j.user]));
    clear(list);
    list.append(table([
      { title: "Node", key: "id", value: (n) => n.id },
      { title: "State", key: "state", value: (n) => badge(n.state) },
      { title: "Power", value: (n) => n.power },
      { title: "Processors in use", key: "procs", value: (n) => usageBar(n.totalProcessors, n.availableProcessors) },
      { title: "Memory in use (MB)", value: (n) => usageBar(n.totalMemory, n.availableMemory) },
      { title: "CPU load", num: true, value: (n) => (n.cpuLoad >= 0 ? n.cpuLoad.toFixed(2) : "–") },
      { title: "Jobs", key: "jobs", value: (n) => h("span", { class: "chips" }, (n.jobs || []).map((j) => {
        const link = jobLink(j.id);
        if (owner.has(j.id)) link.title = "user " + owner.get(j.id);
        return link;
      })) },
      { title: "VMs", value: (n) => (n.virtualMachines || []).map((v) => v.id) },
      { title: "Reservations", num: true, value: (n) => n.reservationCount },
      { title: "Partition", value: (n) => n.partition },
      { title: "Features", value: (n) => n.features },
    ], nodes.results, { id: "nodes-table", rowId: (n) => n.id, empty: "No nodes." }));
  });
  every(3000, load, load());
}

// -------- reservations (timeline)

function reservationsView(root, _arg, token) {
  const chart = h("div", { class: "panel", id: "gantt" });
  const list = h("div", { id: "reservations" });
  root.append(h("h1", null, "Reservations"),
    h("p", { class: "muted" }, "The reservations, and the jobs running now up to their requested end, on a timeline."),
    chart, list);
  const load = () => guarded(async () => {
    // Version 2 writes dates in UTC (version 1 in the deployment's zone, whose
    // abbreviation a browser cannot read), so that the timeline can place them.
    const [page, running] = await Promise.all([
      api("reservations", { params: { "api-version": 2, sort: { startDate: 1 }, max: 200 } }),
      api("jobs", {
        params: {
          "api-version": 2, query: { "states.state": { $in: ["Running", "Starting", "Suspended"] } },
          sort: { "dates.startDate": 1 }, max: 200,
          fields: "name,customName,dates.startDate,duration,requirements.nodes,credentials.user",
        },
      }),
    ]);
    if (token !== viewToken) return;
    clear(chart);
    chart.append(gantt(page.results, running.results));
    clear(list);
    list.append(table([
      { title: "Reservation", key: "id", value: (r) => r.id },
      { title: "Owner", value: (r) => r.owner && r.owner.name },
      { title: "Start", value: (r) => r.startDate },
      { title: "End", value: (r) => r.endDate },
      { title: "Duration", value: (r) => duration(r.duration) },
      { title: "Nodes", value: (r) => r.allocatedNodes },
      { title: "Processors", num: true, value: (r) => r.allocatedProcessorCount },
      { title: "Active", value: (r) => (r.isActive ? "yes" : "no") },
      { title: "Flags", value: (r) => r.flags },
      { title: "Comments", value: (r) => r.comments },
    ], page.results, { id: "reservations-table", rowId: (r) => r.id, empty: "No reservations." }));
  });
  every(10000, load, load());
}

// One row per reservation and per running job, a bar from its start to its end (a job
// without a requested duration: to now, open-ended), and a line at now.
function gantt(reservations, jobs) {
  const now = Date.now();
  const rows = [];
  reservations.forEach((r, i) => {
    const nodes = (r.allocatedNodes || []).map((n) => n.id).join(",");
    rows.push({
      start: parseDate(r.startDate), end: parseDate(r.endDate), id: r.id, kind: "gantt-bar",
      label: r.id + (nodes ? " · " + nodes : ""),
      fill: r.isActive ? "#2e9e48" : COLORS[i % COLORS.length],
      title: `${r.id}: ${r.startDate} → ${r.endDate}${nodes ? " on " + nodes : ""}`,
    });
  });
  for (const j of jobs) {
    const start = parseDate(j.dates && j.dates.startDate);
    const open = !(j.duration > 0);
    const nodes = [...new Set((j.requirements || []).flatMap((r) => (r.nodes || []).map((n) => n.name)))].join(",");
    rows.push({
      start, end: open ? Math.max(now, start) : start + j.duration * 1000, id: j.name, kind: "gantt-job",
      label: "job " + j.name + (nodes ? " · " + nodes : ""), fill: open ? "#c9d6e3" : "#8fb3d9",
      title: `${j.name}${j.customName ? " (" + j.customName + ")" : ""} of ${j.credentials && j.credentials.user}: ` +
        `from ${j.dates.startDate}, ${open ? "no requested end" : "requested " + duration(j.duration)}${nodes ? " on " + nodes : ""}`,
    });
  }
  const drawn = rows.filter((x) => x.start !== null && x.end !== null && !Number.isNaN(x.end));
  if (!drawn.length) return h("p", { class: "muted" }, "No reservations or running jobs to draw.");
  let t0 = Math.min(now, ...drawn.map((x) => x.start));
  let t1 = Math.max(now, ...drawn.map((x) => x.end));
  const span = Math.max(t1 - t0, 60000);
  t0 -= span * 0.03;
  t1 += span * 0.03;
  const labelW = 170, width = 960, rowH = 26, top = 24;
  const height = top + drawn.length * rowH + 8;
  const x = (t) => labelW + ((t - t0) / (t1 - t0)) * (width - labelW - 10);
  const svg = s("svg", { viewBox: `0 0 ${width} ${height}`, width: "100%", role: "img", "aria-label": "Reservation timeline", id: "gantt-svg" });
  const withDate = t1 - t0 > 20 * 3600 * 1000;
  svg.append(s("text", { x: 4, y: 14, class: "muted" }, "UTC"));
  for (const t of ticks(t0, t1, 8)) {
    svg.append(s("line", { class: "grid", x1: x(t), x2: x(t), y1: top - 4, y2: height - 4 }),
      s("text", { x: x(t), y: 14, "text-anchor": "middle" }, timeLabel(t, withDate)));
  }
  drawn.forEach((row, i) => {
    const y = top + i * rowH;
    svg.append(s("text", { x: 4, y: y + rowH / 2 + 4 }, row.label.length > 26 ? row.label.slice(0, 25) + "…" : row.label));
    svg.append(s("rect", {
      x: x(row.start), y: y + 4, width: Math.max(2, x(row.end) - x(row.start)), height: rowH - 8, rx: 3,
      fill: row.fill, "data-id": row.id, class: row.kind,
    }, s("title", null, row.title)));
  });
  svg.append(s("line", { class: "now", x1: x(now), x2: x(now), y1: top - 6, y2: height - 2 }),
    s("text", { x: x(now) + 3, y: height - 4, fill: "#b3261e" }, "now"));
  return svg;
}

// About `n` round instants between t0 and t1.
function ticks(t0, t1, n) {
  const steps = [60e3, 300e3, 600e3, 900e3, 1800e3, 3600e3, 7200e3, 3 * 3600e3, 6 * 3600e3, 12 * 3600e3, 86400e3, 2 * 86400e3, 7 * 86400e3];
  const step = steps.find((st) => (t1 - t0) / st <= n) || Math.ceil((t1 - t0) / n / 86400e3) * 86400e3;
  const out = [];
  for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) out.push(t);
  return out;
}

// -------- reports (charts)

function reportsView(root, name, token) {
  if (name) return reportView(root, name, token);
  const list = h("div", { id: "reports" });
  root.append(h("h1", null, "Reports"), list);
  guarded(async () => {
    const page = await api("reports", { params: { sort: { name: 1 } } });
    if (token !== viewToken) return;
    list.append(table([
      { title: "Report", key: "name", value: (r) => h("a", { href: "#/reports/" + encodeURIComponent(r.name) }, r.name) },
      { title: "Description", value: (r) => r.description },
      { title: "Datapoint (s)", num: true, value: (r) => r.datapointDuration },
      { title: "Size", num: true, value: (r) => r.reportSize },
      { title: "Min. samples", num: true, value: (r) => r.minimumSampleSize },
    ], page.results, {
      id: "reports-table",
      rowId: (r) => r.name,
      onRow: (r) => { location.hash = "#/reports/" + encodeURIComponent(r.name); },
      empty: "No reports. Create one with POST /rest/reports and feed it samples.",
    }));
  });
}

function reportView(root, name, token) {
  const chart = h("div", { class: "panel", id: "report-chart" });
  const info = h("p", { class: "muted", id: "report-info" });
  root.append(h("h1", null, "Report ", h("span", { id: "report-name" }, name)),
    h("p", null, h("a", { href: "#/reports" }, "← all reports")), info, chart);
  const load = () => guarded(async () => {
    const report = await api("reports/" + encodeURIComponent(name), { params: { "api-version": 2 } });
    if (token !== viewToken) return;
    const points = report.datapoints || [];
    info.textContent = `${points.length} datapoints of ${report.datapointDuration} s (at most ${report.reportSize}), ` +
      `consolidated by ${report.consolidationFunction || "average"}.` + (report.description ? " " + report.description : "");
    clear(chart);
    chart.append(lineChart(points));
  });
  every(5000, load, load());
}

// Each numeric key of the datapoints' `data` is a line over the datapoints' periods.
function lineChart(points) {
  const series = new Map();
  const rows = points
    .map((p) => ({ t: (parseDate(p.startDate) + parseDate(p.endDate)) / 2, data: p.data, p }))
    .filter((r) => !Number.isNaN(r.t))
    .sort((a, b) => a.t - b.t);
  for (const r of rows) {
    for (const [key, value] of Object.entries(r.data || {})) {
      if (typeof value !== "number") continue;
      if (!series.has(key)) series.set(key, []);
    }
  }
  if (!rows.length || !series.size) return h("p", { class: "muted" }, "No datapoints yet.");
  const values = rows.flatMap((r) => [...series.keys()].map((k) => r.data && r.data[k]).filter((v) => typeof v === "number"));
  let lo = Math.min(0, ...values), hi = Math.max(...values);
  if (hi === lo) hi = lo + 1;
  const yStep = niceStep((hi - lo) / 5);
  hi = Math.ceil(hi / yStep) * yStep;
  lo = Math.floor(lo / yStep) * yStep;
  let t0 = rows[0].t, t1 = rows[rows.length - 1].t;
  if (t1 === t0) { t0 -= 60000; t1 += 60000; }
  const width = 960, height = 340, left = 56, right = 16, top = 14, bottom = 30;
  const x = (t) => left + ((t - t0) / (t1 - t0)) * (width - left - right);
  const y = (v) => top + (1 - (v - lo) / (hi - lo)) * (height - top - bottom);
  const svg = s("svg", { viewBox: `0 0 ${width} ${height}`, width: "100%", role: "img", "aria-label": "Report datapoints over time", id: "report-svg" });
  for (let v = lo; v <= hi + yStep / 2; v += yStep) {
    svg.append(s("line", { class: "grid", x1: left, x2: width - right, y1: y(v), y2: y(v) }),
      s("text", { x: left - 6, y: y(v) + 4, "text-anchor": "end" }, formatNumber(v)));
  }
  const withDate = t1 - t0 > 20 * 3600 * 1000;
  for (const t of ticks(t0, t1, 8)) {
    svg.append(s("text", { x: x(t), y: height - 10, "text-anchor": "middle" }, timeLabel(t, withDate)));
  }
  svg.append(s("text", { x: left - 6, y: height - 10, "text-anchor": "end" }, "UTC"));
  svg.append(s("line", { class: "axis", x1: left, x2: left, y1: top, y2: height - bottom }),
    s("line", { class: "axis", x1: left, x2: width - right, y1: height - bottom, y2: height - bottom }));
  const legend = h("div", { class: "legend", id: "report-legend" });
  [...series.keys()].forEach((key, i) => {
    const color = COLORS[i % COLORS.length];
    // Gaps (null data, a key missing) break the line.
    let d = "", pen = "M";
    for (const r of rows) {
      const v = r.data && r.data[key];
      if (typeof v !== "number") { pen = "M"; continue; }
      d += `${pen}${x(r.t).toFixed(1)},${y(v).toFixed(1)} `;
      pen = "L";
    }
    svg.append(s("path", { d, fill: "none", stroke: color, "stroke-width": 2, class: "series", "data-key": key }));
    for (const r of rows) {
      const v = r.data && r.data[key];
      if (typeof v !== "number") continue;
      svg.append(s("circle", { cx: x(r.t), cy: y(v), r: 3, fill: color, class: "point" },
        s("title", null, `${key} = ${formatNumber(v)} (${r.p.startDate} – ${r.p.endDate})`)));
    }
    const swatch = h("span", null, key);
    swatch.style.setProperty("--swatch", color);
    legend.append(swatch);
  });
  return h("div", null, svg, legend);
}

function niceStep(raw) {
  const power = Math.pow(10, Math.floor(Math.log10(raw || 1)));
  const n = raw / power;
  return (n <= 1 ? 1 : n <= 2 ? 2 : n <= 5 ? 5 : 10) * power;
}

function formatNumber(v) {
  return Math.abs(v) >= 1000 || Number.isInteger(v) ? String(Math.round(v)) : v.toFixed(2).replace(/\.?0+$/, "");
}

// -------- live events

function eventsView(root, _arg, token) {
  const status = h("span", { id: "stream-status" }, h("span", { class: "live" }), "connecting");
  const severity = h("select", { id: "events-severity" },
    ["", "DEBUG", "INFO", "WARN", "ERROR", "FATAL"].map((v) => h("option", { value: v }, v || "any severity")));
  const type = h("input", { id: "events-type", placeholder: "event type", size: 12 });
  const body = h("tbody");
  const feed = h("table", { id: "events-table" },
    h("thead", null, h("tr", null, ["Time", "Severity", "Type", "Origin", "Objects", "Message"].map((t) => h("th", null, t)))),
    body);
  root.append(h("h1", null, "Events"),
    h("form", { class: "toolbar", onsubmit: (e) => { e.preventDefault(); restart(); } },
      h("label", null, "Severity", severity), h("label", null, "Type", type),
      h("button", { type: "submit" }, "Filter"), status),
    feed);

  let controller = null;
  let lastId = null;
  const shown = new Set();
  const query = () => {
    const q = {};
    if (severity.value) q.severity = severity.value;
    if (type.value.trim()) q.eventType = type.value.trim();
    return q;
  };
  const setStatus = (live, label) => {
    status.firstChild.classList.toggle("on", live);
    status.lastChild.textContent = label;
  };
  const row = (e) => h("tr", { "data-id": e.id },
    h("td", null, text(e.eventDate)), h("td", null, badge(e.severity)), h("td", { "data-col": "type" }, text(e.eventType)),
    h("td", null, text(e.origin)),
    h("td", null, (e.associatedObjects || []).map((o, i) => [i ? ", " : "", o.type === "job" ? jobLink(o.id) : `${o.type} ${o.id}`])),
    h("td", null, text(e.message || (e.arguments || []).join(" "))));
  const add = (e, live) => {
    if (!e || !e.id || shown.has(e.id)) return;
    shown.add(e.id);
    if (!lastId || e.id > lastId) lastId = e.id;
    const tr = row(e);
    if (live) tr.classList.add("fresh");
    body.prepend(tr);
    while (body.children.length > 300) {
      shown.delete(body.lastChild.dataset.id);
      body.lastChild.remove();
    }
  };

  async function follow(myToken) {
    let delay = 1000;
    while (myToken === viewToken) {
      controller = new AbortController();
      try {
        const headers = { Accept: "text/event-stream", Authorization: authHeader() };
        if (lastId) headers["Last-Event-ID"] = lastId;
        const response = await fetch(restUrl("events/stream", { "api-version": 3, query: query() }), {
          headers, credentials: "omit", cache: "no-store", signal: controller.signal,
        });
        if (response.status === 401) {
          const data = await response.json().catch(() => ({}));
          logout((data.messages || ["Your login is no longer valid"]).join("\n"));
          return;
        }
        if (!response.ok) {
          const data = await response.json().catch(() => ({}));
          throw new Error((data.messages || [`HTTP ${response.status}`]).join("\n"));
        }
        setStatus(true, "live");
        delay = 1000;
        await readSse(response.body, (message) => {
          if (myToken !== viewToken) return;
          try {
            add(JSON.parse(message.data), true);
          } catch (_) { /* not an event */ }
        });
        if (myToken === viewToken) setStatus(false, "reconnecting");
      } catch (e) {
        if (e.name === "AbortError" || myToken !== viewToken) return;
        setStatus(false, "reconnecting: " + e.message);
      }
      await new Promise((resolve) => setTimeout(resolve, delay));
      delay = Math.min(delay * 2, 15000);
    }
  }

  let streamToken = 0;
  function restart() {
    if (controller) controller.abort();
    clear(body);
    shown.clear();
    lastId = null;
    const myToken = token;
    const mine = ++streamToken;
    setStatus(false, "connecting");
    guarded(async () => {
      const page = await api("events", { params: { "api-version": 3, query: query(), sort: { id: -1 }, max: 50 } })
        .catch((e) => { setStatus(false, "not connected"); throw e; });
      if (myToken !== viewToken || mine !== streamToken) return;
      for (const e of page.results.slice().reverse()) add(e, false);
      // The stream resumes after the newest listed event, so none falls in between.
      follow(myToken);
    });
  }
  cleanup.push(() => { if (controller) controller.abort(); });
  restart();
}

// Reads a Server-Sent Events body, calling `onMessage({id, event, data})` for each message.
async function readSse(stream, onMessage) {
  const reader = stream.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let message = { data: [], id: null, event: "message" };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    const lines = buffer.split(/\r\n|\r|\n/);
    buffer = lines.pop();
    for (const line of lines) {
      if (line === "") {
        if (message.data.length) onMessage({ id: message.id, event: message.event, data: message.data.join("\n") });
        message = { data: [], id: null, event: "message" };
        continue;
      }
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "data") message.data.push(value);
      else if (field === "id") message.id = value;
      else if (field === "event") message.event = value;
    }
  }
}

// -------- VMs and services

function simpleList(root, token, title, path, id, columns, empty) {
  const list = h("div");
  root.append(h("h1", null, title), list);
  const load = () => guarded(async () => {
    const page = await api(path, { params: { max: 500 } });
    if (token !== viewToken) return;
    clear(list);
    list.append(table(columns, page.results, { id, empty }));
  });
  every(5000, load, load());
}

function vmsView(root, _arg, token) {
  simpleList(root, token, "Virtual machines", "vms", "vms-table", [
    { title: "VM", value: (v) => v.id },
    { title: "State", value: (v) => badge(v.state) },
    { title: "Power", value: (v) => v.powerState },
    { title: "Node", value: (v) => v.node && v.node.id },
    { title: "OS", value: (v) => v.os },
    { title: "Processors", num: true, value: (v) => v.totalProcessors },
    { title: "Memory (MB)", num: true, value: (v) => v.totalMemory },
    { title: "Job", value: (v) => (v.trackingJob && v.trackingJob.id ? jobLink(v.trackingJob.id) : null) },
    { title: "Address", value: (v) => v.networkAddress },
    { title: "Started", value: (v) => v.startDate },
  ], "No virtual machines.");
}

function servicesView(root, _arg, token) {
  simpleList(root, token, "Services", "services", "services-table", [
    { title: "Service", value: (v) => v.name },
    { title: "Type", value: (v) => v.type },
    { title: "Label", value: (v) => v.label },
    { title: "Status", value: (v) => v.status },
    { title: "Code", num: true, value: (v) => v.statusCode },
    { title: "User", value: (v) => v.user },
    { title: "Account", value: (v) => v.account },
    { title: "Parent", value: (v) => v.parent },
    { title: "Contains", value: (v) => v.includedServices },
    { title: "Created", value: (v) => v.dateCreated },
  ], "No services.");
}

// ---------------------------------------------------------------- start

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", login);
  $("logout").addEventListener("click", () => logout(""));
  window.addEventListener("hashchange", route);
  if (sessionStorage.getItem(KEY_AUTH)) start();
  else showLogin("");
});
