// text.js — model- and tool-produced text as DOM text, never as markup. Control and
// invisible characters are shown as visible marks (as the terminal renderer does):
// C0 controls other than newline and tab as ^X, DEL as ^?, C1 controls, bidirectional
// overrides and isolates (U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, U+061C) and
// zero-width characters (U+200B–U+200D, U+2060, U+FEFF) as \u{…}. A carriage return
// before a newline is dropped. Everything goes through textContent or text nodes.

const HIDDEN = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200b-\u200f\u202a-\u202e\u2060\u2066-\u2069\ufeff]/u;

/** The visible mark for one hidden character. */
export function mark(ch) {
  const code = ch.codePointAt(0);
  if (code < 0x20) return "^" + String.fromCharCode(code + 0x40);
  if (code === 0x7f) return "^?";
  return "\\u{" + code.toString(16) + "}";
}

/** Whether `text` holds a character that would be hidden or reorder text. */
export function hasHidden(text) {
  return HIDDEN.test(text);
}

/**
 * Appends `text` to `parent` as text nodes, each hidden character as a
 * `<span class="ctl">` holding its visible mark (set with textContent).
 */
export function appendText(parent, text) {
  const s = String(text ?? "").replace(/\r\n/g, "\n");
  let run = "";
  for (const ch of s) {
    if (HIDDEN.test(ch)) {
      if (run) parent.appendChild(document.createTextNode(run));
      run = "";
      const span = document.createElement("span");
      span.className = "ctl";
      span.textContent = mark(ch);
      span.title = "hidden character U+" + ch.codePointAt(0).toString(16).toUpperCase().padStart(4, "0");
      parent.appendChild(span);
    } else {
      run += ch;
    }
  }
  if (run) parent.appendChild(document.createTextNode(run));
  return parent;
}

/** Replaces the content of `el` with `text`, made safe as in appendText. */
export function setText(el, text) {
  el.replaceChildren();
  return appendText(el, text);
}

/** One line of text with hidden characters marked, as a plain string (for titles). */
export function plain(text) {
  let out = "";
  for (const ch of String(text ?? "").replace(/\r\n/g, "\n")) out += HIDDEN.test(ch) ? mark(ch) : ch;
  return out;
}

/** A new element with a class and optional safe text. */
export function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) appendText(e, text);
  return e;
}

/** A time as HH:MM:SS (local), or the date and time when not today. */
export function when(ms) {
  if (!ms) return "";
  const d = new Date(ms);
  const today = new Date().toDateString() === d.toDateString();
  return today ? d.toLocaleTimeString() : d.toLocaleString();
}
