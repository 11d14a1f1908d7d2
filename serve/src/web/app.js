// app.js — the web view of `foya serve`: login (the bearer token, kept in this tab's
// sessionStorage only), the session list (`GET /overview`, one page of the most
// recently updated sessions at a time, "older" / "newer" walking the pages by cursor;
// the page shown is refreshed every second), and a session page that streams `GET /sessions/{id}/events` with fetch (so
// the token goes in the Authorization header, never in a URL) and resumes after a
// dropped connection or a server restart from the last rendered seq (`Last-Event-ID`).

import { Transcript } from "./transcript.js";
import { el, plain, setText, when } from "./text.js";

const TOKEN_KEY = "foya.token";
const $ = (id) => document.getElementById(id);
let page = null; // the open session page, if any
let listTimer = null;
// The list's page: the cursor it starts at (null: the first page), the cursors of the
// pages before it (for "newer"), the cursor of the next (null: this is the last), and
// a counter so an answer for a page no longer shown is dropped.
const list = { cursor: null, before: [], next: null, asked: 0 };
const PAGE_SIZE = 50;

function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

class Unauthorized extends Error {}
class NotFound extends Error {}

/** A call to the API with the token; JSON in and out. Throws with the server's message. */
async function api(method, path, body, extra = {}) {
  const headers = { ...(extra.headers || {}) };
  if (token()) headers.Authorization = "Bearer " + token();
  let payload;
  if (body instanceof Blob) {
    payload = body;
  } else if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    payload = JSON.stringify(body);
  } else if (method === "POST") {
    // An empty POST (cancel) says it is JSON: the server refuses an empty POST of a type
    // another site's form or page could send.
    headers["Content-Type"] = "application/json";
  }
  const resp = await fetch(path, { method, headers, body: payload, signal: extra.signal, cache: "no-store" });
  if (resp.status === 401) throw new Unauthorized("the token was refused");
  if (resp.status === 404 || resp.status === 409) throw new NotFound(path + ": no such session (or deleted)");
  if (!resp.ok) {
    let msg = resp.status + " " + resp.statusText;
    try {
      const j = await resp.json();
      if (j.error) msg = j.error.code + ": " + j.error.message;
    } catch (_) { /* not JSON */ }
    throw new Error(msg);
  }
  if (extra.raw) return resp;
  const text = await resp.text();
  return text ? JSON.parse(text) : null;
}

/** "forget token" is offered only while this tab holds a token (a server started
 *  without `--token-file` never asks for one). */
function showLogout() {
  $("logout").hidden = !token();
}

function showError(text) {
  setText($("error"), text || "");
  $("error").hidden = !text;
}

function showLogin(message) {
  stopPage();
  clearInterval(listTimer);
  $("login").hidden = false;
  $("list").hidden = true;
  $("session").hidden = true;
  setText($("login-message"), message || "");
  showLogout();
  $("token").focus();
}

async function login(ev) {
  ev.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
  $("token").value = "";
  route();
}

/** Shows the page the location hash names: `#/s/<id>` a session, else the list. */
async function route() {
  showError("");
  try {
    await api("GET", "/overview?limit=1");
  } catch (e) {
    if (e instanceof Unauthorized) return showLogin(token() ? "That token was refused." : "");
    return showError(String(e.message || e));
  }
  $("login").hidden = true;
  showLogout();
  const m = location.hash.match(/^#\/s\/([0-9a-f-]+)$/);
  if (m) openSession(m[1]);
  else openList();
}

function openList() {
  stopPage();
  $("list").hidden = false;
  $("session").hidden = true;
  document.title = "Foya sessions";
  refreshList();
  clearInterval(listTimer);
  listTimer = setInterval(refreshList, 1000);
}

/** The overview of the list's current page. */
function pagePath() {
  let path = "/overview?limit=" + PAGE_SIZE;
  if (list.cursor) path += "&cursor=" + encodeURIComponent(list.cursor);
  return path;
}

/** Shows the page after (older) or before (newer) the current one. */
function turnPage(older) {
  if (older) {
    if (!list.next) return;
    list.before.push(list.cursor);
    list.cursor = list.next;
  } else {
    if (list.before.length === 0) return;
    list.cursor = list.before.pop();
  }
  refreshList();
}

async function refreshList() {
  const asked = ++list.asked;
  let data;
  try {
    data = await api("GET", pagePath());
  } catch (e) {
    if (asked !== list.asked) return;
    if (e instanceof Unauthorized) return showLogin("The token was refused.");
    return showError("session list: " + (e.message || e));
  }
  if (asked !== list.asked) return; // a later request (another page) answers instead
  showError("");
  list.next = data.next || null;
  $("older").disabled = !list.next;
  $("newer").disabled = list.before.length === 0;
  setText($("page-no"), "page " + (list.before.length + 1));
  $("pager").hidden = !list.next && list.before.length === 0;
  const rows = $("sessions");
  rows.replaceChildren();
  const live = data.sessions.filter((s) => s.state !== "deleted");
  $("node-col").hidden = !live.some((s) => s.node);
  for (const s of live) {
    const tr = el("tr", "session-row");
    tr.dataset.id = s.id;
    tr.dataset.state = s.state;
    const link = el("a", "open", s.title || "(untitled)");
    link.href = "#/s/" + s.id;
    const title = el("td", "title");
    title.appendChild(link);
    const nodeTd = el("td", "node", s.node || "");
    nodeTd.hidden = $("node-col").hidden;
    tr.append(
      title,
      el("td", "state " + s.state, s.state.replace(/_/g, " ")),
      el("td", "queue", String(s.queue_length)),
      el("td", "activity", when(s.last_activity_ms)),
      nodeTd,
      el("td", "model", s.model),
    );
    rows.appendChild(tr);
  }
  $("empty").hidden = live.length > 0 || list.before.length > 0 || !!list.next;
}

async function createSession(ev) {
  ev.preventDefault();
  const body = {};
  const title = $("new-title").value.trim();
  if (title) body.title = title;
  try {
    const created = await api("POST", "/sessions", body);
    $("new-title").value = "";
    location.hash = "#/s/" + created.id;
  } catch (e) {
    showError("create: " + (e.message || e));
  }
}

function stopPage() {
  if (page) page.stop();
  page = null;
  setText($("conn"), "");
  $("conn").dataset.state = "";
}

function openSession(id) {
  clearInterval(listTimer);
  stopPage();
  $("list").hidden = true;
  $("session").hidden = false;
  page = new SessionPage(id);
  page.start();
}

/** One open session: its transcript and the event stream that feeds it. */
class SessionPage {
  constructor(id) {
    this.id = id;
    this.abort = null;
    this.stopped = false;
    this.backoff = 500;
    $("transcript").replaceChildren();
    this.t = new Transcript($("transcript"), (req, decision) =>
      api("POST", `/sessions/${id}/approvals/${req}`, { decision }));
    this.t.onTitle = (title) => this.title(title);
    this.t.onState = (state) => this.state(state);
    setText($("session-title"), "(untitled)");
    this.state("idle");
  }

  title(text) {
    setText($("session-title"), text);
    document.title = plain(text) + " · Foya";
  }

  state(s) {
    $("session").dataset.state = s;
    setText($("session-state"), s.replace(/_/g, " "));
    $("cancel").disabled = s === "idle" || s === "deleted";
  }

  async start() {
    try {
      const summary = await api("GET", `/sessions/${this.id}`);
      if (summary.title) this.title(summary.title);
    } catch (e) {
      if (e instanceof Unauthorized) return showLogin("The token was refused.");
      showError(String(e.message || e));
    }
    this.loop();
  }

  stop() {
    this.stopped = true;
    if (this.abort) this.abort.abort();
  }

  /** Reads the stream; on any end or error reconnects from the last rendered seq. */
  async loop() {
    while (!this.stopped) {
      setText($("conn"), "connecting…");
      $("conn").dataset.state = "connecting";
      try {
        await this.read();
      } catch (e) {
        if (this.stopped) return;
        if (e instanceof Unauthorized) return showLogin("The token was refused.");
        if (e instanceof NotFound) {
          setText($("conn"), "no such session");
          return showError("This session does not exist (or was deleted).");
        }
        setText($("conn"), "disconnected: " + (e.message || e));
      }
      if (this.stopped) return;
      $("conn").dataset.state = "reconnecting";
      await new Promise((r) => setTimeout(r, this.backoff));
      this.backoff = Math.min(this.backoff * 2, 5000);
    }
  }

  async read() {
    this.abort = new AbortController();
    const headers = {};
    if (this.t.lastSeq > 0) headers["Last-Event-ID"] = String(this.t.lastSeq);
    const resp = await api("GET", `/sessions/${this.id}/events?approver=true`, undefined,
      { headers, signal: this.abort.signal, raw: true });
    setText($("conn"), "live");
    $("conn").dataset.state = "live";
    this.backoff = 500;
    const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += value.replace(/\r\n?/g, "\n");
      let cut;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const block = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        if (this.dispatch(block) === "reconnect") {
          this.abort.abort();
          return;
        }
      }
    }
  }

  /** One SSE block: `event:`, `id:` and `data:` lines. */
  dispatch(block) {
    let type = "message";
    const data = [];
    for (const line of block.split("\n")) {
      if (line.startsWith(":")) continue;
      const i = line.indexOf(":");
      const field = i < 0 ? line : line.slice(0, i);
      const value = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
      if (field === "event") type = value;
      else if (field === "data") data.push(value);
    }
    if (!data.length) return null;
    const u = JSON.parse(data.join("\n"));
    if (type === "event") {
      if (u.seq > this.t.lastSeq + 1) return "reconnect"; // a gap: read it again
      this.t.event(u);
      $("transcript").dataset.lastSeq = String(this.t.lastSeq);
      $("transcript").dataset.rendered = String(this.t.rendered);
    } else if (type === "delta") {
      this.t.delta(u);
    } else if (type === "notice") {
      if (u.type === "closed") {
        this.t.note("meta", "stream closed: " + u.reason);
        if (/delet/.test(u.reason)) this.stopped = true;
      }
      return "reconnect";
    }
    return null;
  }
}

async function submit(ev) {
  ev.preventDefault();
  if (!page) return;
  const id = page.id;
  const text = $("input-text").value;
  const body = { text };
  const cmd = $("input-command").value.trim().replace(/^\//, "");
  if (cmd) {
    const sp = cmd.indexOf(" ");
    body.command = sp < 0 ? { name: cmd } : { name: cmd.slice(0, sp), arguments: cmd.slice(sp + 1) };
  }
  try {
    const files = [...$("input-images").files];
    if (files.length) {
      body.images = [];
      for (const f of files) {
        const up = await api("POST", "/attachments", f, { headers: { "Content-Type": f.type } });
        body.images.push({ id: up.id });
      }
    }
    await api("POST", `/sessions/${id}/inputs`, body);
    $("input-text").value = "";
    $("input-command").value = "";
    $("input-images").value = "";
    showError("");
  } catch (e) {
    showError("submit: " + (e.message || e));
  }
}

async function action(fn) {
  try {
    await fn();
    showError("");
  } catch (e) {
    showError(String(e.message || e));
  }
}

function init() {
  $("login-form").addEventListener("submit", login);
  $("new-session").addEventListener("submit", createSession);
  $("older").addEventListener("click", () => turnPage(true));
  $("newer").addEventListener("click", () => turnPage(false));
  $("input-form").addEventListener("submit", submit);
  // Ctrl+Enter (or Cmd+Enter) in the message sends it.
  $("input-text").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) $("input-form").requestSubmit();
  });
  $("cancel").addEventListener("click", () => action(() => api("POST", `/sessions/${page.id}/cancel`)));
  $("title-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const title = $("title-input").value;
    action(async () => {
      await api("PUT", `/sessions/${page.id}/title`, { title });
      $("title-input").value = "";
    });
  });
  $("delete").addEventListener("click", () => {
    if (!confirm("Delete this session? Its log is tombstoned and its turn cancelled.")) return;
    action(async () => {
      await api("DELETE", `/sessions/${page.id}`);
      location.hash = "#/";
    });
  });
  $("logout").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    showLogin("");
  });
  window.addEventListener("hashchange", route);
  route();
}

init();
