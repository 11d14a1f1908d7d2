// transcript.js — renders one session's updates (persisted events and live deltas, as
// the SSE stream sends them) into the session page. Persisted events are applied once
// each, in seq order: `lastSeq` is the last one rendered, and the stream is resumed from
// it. Live deltas fill the answer, reasoning and tool output in progress; the persisted
// `assistant_message` then replaces the streamed text, so a reload (no deltas replayed)
// and a live view end with the same transcript.

import { appendText, el, plain, setText, when } from "./text.js";

/** Output longer than this (characters or lines) is folded. */
const FOLD_CHARS = 600;
const FOLD_LINES = 12;

const STATE_LABEL = {
  queued: "queued",
  waiting: "waiting for approval",
  running: "running",
  finished: "finished",
  error: "error",
};

export class Transcript {
  /** `root`: the element to fill; `decide(requestId, decision)`: answers an approval. */
  constructor(root, decide) {
    this.root = root;
    this.decide = decide;
    this.lastSeq = 0;
    this.rendered = 0; // persisted events rendered: equals lastSeq when none was missed
    this.tools = new Map(); // tool call id -> card
    this.live = null; // { run, answer, reasoning } of the step being streamed
    this.queued = new Map(); // input id -> element
    this.onTitle = () => {};
    this.onState = () => {};
  }

  /** Applies one persisted event; false when it was already rendered (seq <= lastSeq). */
  event(e) {
    if (e.seq <= this.lastSeq) return false;
    this.lastSeq = e.seq;
    this.rendered += 1;
    const fn = this["on_" + e.type];
    if (fn) fn.call(this, e);
    return true;
  }

  /** Applies one live delta. */
  delta(d) {
    switch (d.type) {
      case "text_delta":
        appendText(this.step(d.run_id).answer, d.text);
        break;
      case "reasoning_delta": {
        const step = this.step(d.run_id);
        step.reasoningBox.hidden = false;
        appendText(step.reasoning, d.text);
        break;
      }
      case "tool_call_queued":
        this.tool(d.tool_call_id, d.name);
        break;
      case "tool_output": {
        const card = this.tool(d.tool_call_id);
        card.liveOut.hidden = false;
        appendText(card.liveOut, d.chunk);
        break;
      }
      default:
        break;
    }
  }

  add(node) {
    this.root.appendChild(node);
    node.dataset.kind = node.dataset.kind || "item";
    if (typeof node.scrollIntoView === "function") node.scrollIntoView({ block: "nearest" });
    return node;
  }

  note(kind, text) {
    const n = this.add(el("div", "note " + kind, text));
    n.dataset.kind = kind;
    return n;
  }

  /** The block of the step being streamed (created on its first delta). */
  step(run) {
    if (!this.live || this.live.run !== run) {
      const box = el("div", "assistant live");
      box.dataset.kind = "assistant";
      const reasoningBox = el("details", "reasoning");
      reasoningBox.appendChild(el("summary", "", "reasoning"));
      const reasoning = el("pre", "reasoning-text");
      reasoningBox.appendChild(reasoning);
      reasoningBox.hidden = true;
      const answer = el("div", "answer");
      box.append(reasoningBox, answer);
      this.add(box);
      this.live = { run, box, answer, reasoning, reasoningBox };
    }
    return this.live;
  }

  tool(id, name) {
    let card = this.tools.get(id);
    if (!card) {
      const box = el("div", "tool");
      box.dataset.kind = "tool";
      box.dataset.toolCallId = id;
      const head = el("div", "tool-head");
      const nameEl = el("span", "tool-name", name || "tool");
      const stateEl = el("span", "tool-state");
      head.append(nameEl, stateEl);
      const args = el("pre", "tool-args");
      args.hidden = true;
      const approval = el("div", "approval");
      approval.hidden = true;
      const liveOut = el("pre", "tool-output live");
      liveOut.hidden = true;
      const output = el("div", "tool-result");
      box.append(head, args, approval, liveOut, output);
      this.add(box);
      card = { box, nameEl, stateEl, args, approval, liveOut, output };
      this.tools.set(id, card);
      this.setToolState(card, "queued");
    } else if (name) {
      setText(card.nameEl, name);
    }
    return card;
  }

  setToolState(card, state) {
    card.state = state;
    card.box.dataset.state = state;
    setText(card.stateEl, STATE_LABEL[state] || state);
  }

  on_session_created(e) {
    this.note("meta", `session created · model ${e.config.model || "?"} · ${e.config.cwd} · approval ${e.config.approval_mode}`);
  }

  on_title_set(e) {
    this.onTitle(e.title);
  }

  on_input_queued(e) {
    const n = this.userBlock(e.input, "queued input");
    n.classList.add("queued");
    this.queued.set(e.input_id, n);
  }

  on_input_dropped(e) {
    const n = this.queued.get(e.input_id);
    if (n) n.classList.add("dropped");
    this.note("meta", `queued input dropped: ${e.reason}`);
    this.queued.delete(e.input_id);
  }

  on_user_message(e) {
    const q = this.queued.get(e.input_id);
    if (q) {
      q.classList.remove("queued");
      setText(q.querySelector(".who"), "you");
      this.queued.delete(e.input_id);
      this.root.appendChild(q); // the turn starts now: move it to the end
    } else {
      this.userBlock(e.input, "you");
    }
  }

  userBlock(input, who) {
    const box = el("div", "user");
    box.dataset.kind = "user";
    box.appendChild(el("div", "who", who));
    if (input.command) {
      const args = input.command.arguments ? " " + input.command.arguments : "";
      box.appendChild(el("div", "command", "/" + input.command.name + args));
    }
    if (input.text) box.appendChild(el("div", "text", input.text));
    for (const img of input.images || []) box.appendChild(el("div", "image", "image " + img.id));
    return this.add(box);
  }

  on_turn_started() {
    this.live = null;
    this.onState("running");
  }

  on_step_started(e) {
    this.live = null;
    this.note("step", `step ${e.step}`);
  }

  on_assistant_message(e) {
    const m = e;
    const step = this.live && this.live.run === e.run_id ? this.live : this.step(e.run_id);
    step.box.classList.remove("live");
    setText(step.answer, m.text || "");
    // A message with only tool calls shows as its calls.
    step.box.classList.toggle("empty", !m.text && !m.reasoning && !m.interrupted);
    if (m.reasoning) {
      step.reasoningBox.hidden = false;
      setText(step.reasoning, m.reasoning);
    }
    if (m.interrupted) step.box.appendChild(el("div", "meta", "(interrupted)"));
    if (m.finish_reason) step.box.dataset.finish = m.finish_reason;
    this.live = null;
    for (const call of m.tool_calls || []) {
      const card = this.tool(call.id, call.name);
      card.args.hidden = false;
      setText(card.args, JSON.stringify(call.arguments, null, 2));
      // A call queued before its message keeps its place; move it after the text.
      this.root.appendChild(card.box);
    }
  }

  on_approval_requested(e) {
    const card = this.tool(e.tool_call_id, e.tool_name);
    this.setToolState(card, "waiting");
    const a = card.approval;
    a.hidden = false;
    a.replaceChildren();
    a.appendChild(el("div", "approval-what", `${e.tool_name}: ${e.action}`));
    a.appendChild(el("div", "approval-why", e.reason));
    // `grant` "": no session grant is offered (a protected path, a command that can run
    // other code); absent (an older log): what it covers is not known.
    const noGrant = e.grant === "";
    const grant = e.grant ? `covers every later call matching ${e.grant}` : "covers this kind of call";
    const buttons = el("div", "approval-buttons");
    const btn = (label, decision, title) => {
      const b = el("button", "decide " + decision, label);
      b.dataset.decision = decision;
      if (title) b.title = plain(title);
      b.addEventListener("click", () => {
        for (const x of buttons.querySelectorAll("button")) x.disabled = true;
        this.decide(e.request_id, decision).catch((err) => {
          for (const x of buttons.querySelectorAll("button")) x.disabled = false;
          a.appendChild(el("div", "error", String(err.message || err)));
        });
      });
      return b;
    };
    if (noGrant) {
      buttons.append(btn("Allow once", "allow_once"), btn("Deny", "deny"));
      a.appendChild(buttons);
      a.appendChild(el("div", "grant", "No “allow for this session” is offered for this call: allow it once or deny it."));
    } else {
      buttons.append(
        btn("Allow once", "allow_once"),
        btn("Allow for this session", "allow_for_session", grant),
        btn("Deny", "deny"),
      );
      a.appendChild(buttons);
      a.appendChild(el("div", "grant", "“Allow for this session” " + grant + "."));
    }
    if (typeof card.box.scrollIntoView === "function") card.box.scrollIntoView({ block: "end" });
    this.onState("waiting_for_approval");
  }

  on_approval_decided(e) {
    const card = this.tool(e.tool_call_id);
    const what = { allow_once: "allowed once", allow_for_session: "allowed for this session", deny: "denied" }[e.decision] || e.decision;
    const extra = e.grant ? ` (grant ${e.grant})` : e.message ? ` (${e.message})` : "";
    card.approval.replaceChildren(el("div", "decided", "approval: " + what + extra));
    card.approval.hidden = false;
    if (e.decision === "deny") this.setToolState(card, "error");
    else this.setToolState(card, "queued");
    this.onState("running");
  }

  on_tool_started(e) {
    this.setToolState(this.tool(e.tool_call_id, e.name), "running");
  }

  on_tool_update(e) {
    const card = this.tool(e.tool_call_id);
    card.liveOut.hidden = false;
    appendText(card.liveOut, e.message + "\n");
  }

  on_tool_finished(e) {
    const card = this.tool(e.tool_call_id);
    this.setToolState(card, e.is_error ? "error" : "finished");
    card.stateEl.appendChild(document.createTextNode(` · ${e.duration_ms} ms`));
  }

  on_tool_message(e) {
    const card = this.tool(e.tool_call_id);
    if (card.state === "queued" || card.state === "running" || card.state === "waiting") {
      this.setToolState(card, e.is_error ? "error" : "finished");
    }
    card.liveOut.hidden = true;
    const text = e.content || "";
    const lines = text.split("\n").length;
    const out = el("pre", "tool-output");
    appendText(out, text);
    card.output.replaceChildren();
    if (text.length > FOLD_CHARS || lines > FOLD_LINES) {
      const d = el("details", "fold");
      d.appendChild(el("summary", "", `output · ${lines} lines, ${text.length} characters`));
      d.appendChild(out);
      card.output.appendChild(d);
    } else {
      card.output.appendChild(out);
    }
  }

  on_usage(e) {
    let t = `usage · input ${e.input_tokens} · output ${e.output_tokens}`;
    if (e.cached_input_tokens != null) t += ` · cached ${e.cached_input_tokens}`;
    if (e.reasoning_tokens != null) t += ` · reasoning ${e.reasoning_tokens}`;
    this.note("usage", t);
  }

  on_provider_retry(e) {
    this.note("retry", `retry ${e.attempt}/${e.max_attempts} in ${e.delay_ms} ms: ${e.error.class} ${e.error.message || ""}`);
  }

  on_compaction_started(e) {
    this.note("compaction", `compacting (${e.trigger}, ~${e.tokens_before} tokens)`);
    this.onState("compacting");
  }

  on_compaction_checkpoint(e) {
    const box = el("details", "checkpoint");
    box.dataset.kind = "checkpoint";
    box.appendChild(el("summary", "", `compaction checkpoint · up to seq ${e.covers_up_to} · ~${e.tokens_before} → ~${e.tokens_after} tokens`));
    box.appendChild(el("pre", "summary-text", e.summary));
    this.add(box);
  }

  on_hook_continued(e) {
    this.note("meta", `stop hook continued the turn (${e.count}): ${e.reason}`);
  }

  on_hook_ran(e) {
    if (e.decision === "none") return;
    const why = e.reason ? `: ${e.reason}` : "";
    this.note("meta", `${e.hook_event} hook ${e.decision}${why}`);
  }

  on_turn_cancelled(e) {
    this.note("cancelled", `cancelling: ${e.reason}`);
  }

  on_turn_complete(e) {
    this.live = null;
    let t = "turn " + e.status;
    if (e.reason) t += ` · ${e.reason}`;
    if (e.error) t += ` · ${e.error.class}: ${e.error.message}`;
    const n = this.note("turn-end " + e.status, t + " · " + when(e.at_ms));
    n.dataset.kind = "turn_end";
    n.dataset.status = e.status;
    for (const card of this.tools.values()) {
      if (card.state === "queued" || card.state === "running" || card.state === "waiting") this.setToolState(card, "error");
      card.approval.querySelectorAll("button").forEach((b) => { b.disabled = true; });
    }
    this.onState("idle");
  }

  on_session_deleted() {
    this.note("deleted", "this session was deleted");
    this.onState("deleted");
  }
}
