//! Owns the pure halves of compaction: the summarisation request's messages and what a
//! compaction checkpoint keeps verbatim. When and how to run them is the turn's job.

use super::estimate::message_tokens;
use super::{FILE_TOOLS, history};
use foya_protocol::{AssistantMessage, Event, Input, Message};
use std::collections::BTreeSet;

/// System prompt for the summarisation request.
pub const COMPACTION_SYSTEM_PROMPT: &str = "You summarise a coding agent's conversation so the \
agent can continue the task from the summary alone. Be factual and specific; keep exact file \
paths, names, commands and error messages. Do not call tools.";

/// The final user instruction of a summarisation request.
pub const COMPACTION_INSTRUCTION: &str = "Write a checkpoint summary of the conversation above \
so the work can continue without it. Use these headings:\n\
## Task\nWhat the user asked for, including constraints and preferences.\n\
## Decisions\nWhat was decided and why.\n\
## Files touched\nEach file read, created or changed, with what was done to it.\n\
## Open items\nWhat remains to do, next steps, and unresolved errors or questions.";

/// Marker placed first when older messages were left out of a summarisation request.
pub const OMITTED_NOTE: &str = "[Earlier messages were omitted to fit the summarisation request.]";

/// Messages of a summarisation request: the effective history (see [`history`]) and the
/// final [`COMPACTION_INSTRUCTION`] user message, within `budget_tokens` (estimated).
/// The summariser receives what it is asked to summarise: when the whole does not fit,
/// every text longer than a common cap — a tool result, a user or assistant text, a long
/// string argument of a tool call — is cut to the cap (its beginning and its end, with a
/// line saying how much was cut in between), the cap chosen as large as fits and no
/// smaller than `MIN_CUT_CHARS`. Only when that is still too large are images replaced
/// by a line naming them, and then the oldest units dropped — a user message, or an
/// assistant message with its tool results, so the result stays well-formed — with an
/// [`OMITTED_NOTE`] user message first (also when the first kept message is not a user
/// message). The instruction is always last.
#[must_use]
pub fn compaction_request(history_events: &[Event], budget_tokens: u64) -> Vec<Message> {
    let messages = history(history_events);
    let instruction = Message::User(Input::text(COMPACTION_INSTRUCTION));
    let note = Message::User(Input::text(OMITTED_NOTE));
    // A request opens with a user message (Anthropic requires it).
    let opens_with_note = !matches!(messages.first(), Some(Message::User(_)) | None);
    let fixed = message_tokens(&instruction)
        + if opens_with_note {
            message_tokens(&note)
        } else {
            0
        };
    let fits = |messages: &[Message]| {
        messages.iter().map(message_tokens).sum::<u64>() + fixed <= budget_tokens
    };
    let mut messages = if fits(&messages) {
        messages
    } else {
        let cut = cut_to_fit(&messages, |m| fits(m));
        if fits(&cut) { cut } else { without_images(cut) }
    };
    if !fits(&messages) {
        let budget = budget_tokens.saturating_sub(message_tokens(&instruction));
        messages = drop_oldest(messages, budget);
    } else if opens_with_note {
        messages.insert(0, note);
    }
    messages.push(instruction);
    messages
}

/// Shortest cap, in characters, a text of a summarisation request is cut to before
/// whole messages are dropped instead.
const MIN_CUT_CHARS: usize = 200;

/// Words of the line that takes the place of a text's middle cut from a summarisation
/// request (followed by the number of characters cut).
pub const CUT_NOTE: &str = "characters cut to fit the summarisation request";

/// `messages` with every text cut to the largest common cap (at least [`MIN_CUT_CHARS`])
/// for which `fits` holds; with the smallest cap when none does.
fn cut_to_fit(messages: &[Message], fits: impl Fn(&[Message]) -> bool) -> Vec<Message> {
    let longest = messages.iter().map(longest_text).max().unwrap_or(0);
    let cut =
        |cap: usize| -> Vec<Message> { messages.iter().map(|m| cut_message(m, cap)).collect() };
    if longest <= MIN_CUT_CHARS {
        return messages.to_vec();
    }
    // Largest cap in [MIN_CUT_CHARS, longest) that fits, by bisection.
    let (mut lo, mut hi) = (MIN_CUT_CHARS, longest);
    let mut best = cut(MIN_CUT_CHARS);
    if !fits(&best) {
        return best;
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        let candidate = cut(mid);
        if fits(&candidate) {
            lo = mid;
            best = candidate;
        } else {
            hi = mid;
        }
    }
    best
}

/// Characters of the longest text of `message` that [`cut_message`] may cut.
fn longest_text(message: &Message) -> usize {
    let len = |t: &str| t.chars().count();
    match message {
        Message::System { text } => len(text),
        Message::User(input) => len(&input.text),
        Message::Assistant(a) => a
            .tool_calls
            .iter()
            .map(|c| longest_string(&c.arguments))
            .chain([len(&a.text), len(&a.reasoning)])
            .max()
            .unwrap_or(0),
        Message::Tool(t) => len(&t.content),
    }
}

fn longest_string(value: &serde_json::Value) -> usize {
    match value {
        serde_json::Value::String(s) => s.chars().count(),
        serde_json::Value::Array(items) => items.iter().map(longest_string).max().unwrap_or(0),
        serde_json::Value::Object(map) => map.values().map(longest_string).max().unwrap_or(0),
        _ => 0,
    }
}

/// `message` with each of its texts longer than `cap` characters cut to `cap` (see
/// [`cut_text`]); opaque reasoning blocks are left alone.
fn cut_message(message: &Message, cap: usize) -> Message {
    match message {
        Message::System { text } => Message::System {
            text: cut_text(text, cap),
        },
        Message::User(input) => {
            let mut input = input.clone();
            input.text = cut_text(&input.text, cap);
            Message::User(input)
        }
        Message::Assistant(a) => {
            let mut a = a.clone();
            a.text = cut_text(&a.text, cap);
            a.reasoning = cut_text(&a.reasoning, cap);
            for call in &mut a.tool_calls {
                cut_strings(&mut call.arguments, cap);
            }
            Message::Assistant(a)
        }
        Message::Tool(t) => {
            let mut t = t.clone();
            t.content = cut_text(&t.content, cap);
            Message::Tool(t)
        }
    }
}

fn cut_strings(value: &mut serde_json::Value, cap: usize) {
    match value {
        serde_json::Value::String(s) => *s = cut_text(s, cap),
        serde_json::Value::Array(items) => items.iter_mut().for_each(|v| cut_strings(v, cap)),
        serde_json::Value::Object(map) => map.values_mut().for_each(|v| cut_strings(v, cap)),
        _ => {}
    }
}

/// Words of the line that takes the place of the middle of the turn's input a checkpoint
/// keeps cut (followed by the number of characters cut).
pub const KEPT_CUT_NOTE: &str = "characters cut by compaction";

/// `text` when it has at most `cap` characters; else its first and last `cap / 2`
/// characters around a line `[… N characters cut to fit the summarisation request …]`.
#[must_use]
fn cut_text(text: &str, cap: usize) -> String {
    cut_text_with(text, cap, CUT_NOTE)
}

/// [`cut_text`] with `note` as the words of the line.
fn cut_text_with(text: &str, cap: usize, note: &str) -> String {
    let count = text.chars().count();
    if count <= cap {
        return text.to_owned();
    }
    let half = cap / 2;
    let head: String = text.chars().take(half).collect();
    let tail: String = text.chars().skip(count - half).collect();
    format!("{head}\n[… {} {note} …]\n{tail}", count - 2 * half)
}

/// `messages` without their oldest units (a user message, or an assistant message with
/// its tool results) until the rest fits `budget` with an [`OMITTED_NOTE`] first; the
/// note opens the list when anything was dropped or the first kept message is not a
/// user message.
fn drop_oldest(messages: Vec<Message>, budget: u64) -> Vec<Message> {
    let note = Message::User(Input::text(OMITTED_NOTE));
    let units = units(&messages);
    let mut total: u64 = messages.iter().map(message_tokens).sum::<u64>() + message_tokens(&note);
    let mut first = 0;
    while first < units.len() && total > budget {
        total -= units[first]
            .iter()
            .map(|&i| message_tokens(&messages[i]))
            .sum::<u64>();
        first += 1;
    }
    let start = units
        .get(first)
        .and_then(|u| u.first().copied())
        .unwrap_or(messages.len());
    let mut out = Vec::new();
    if start > 0 || !matches!(messages.get(start), Some(Message::User(_)) | None) {
        out.push(note);
    }
    out.extend(messages.into_iter().skip(start));
    out
}

pub use foya_core::turn::can_shrink;

/// Indices of `messages` grouped into droppable units: an assistant message with the
/// tool results after it, or any other single message.
fn units(messages: &[Message]) -> Vec<Vec<usize>> {
    let mut units: Vec<Vec<usize>> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        match (m, units.last_mut()) {
            (Message::Tool(_), Some(unit)) => unit.push(i),
            _ => units.push(vec![i]),
        }
    }
    units
}

/// Least budget, in estimated tokens, worth spending on the tail of a tool result too
/// large to keep whole.
pub const MIN_TRUNCATED_TOKENS: u64 = 64;

/// Marker opening a tool result kept by a checkpoint with its beginning cut.
pub const TRUNCATED_NOTE: &str = "[earlier output omitted by compaction]\n";

/// What a compaction checkpoint keeps verbatim after its summary (the work in progress),
/// chosen from the effective history within `keep_budget_tokens` (estimated), in this
/// order of priority:
/// 1. the user messages of the current turn (from the latest user input on, stop-hook
///    continuations included), newest first;
/// 2. the most recent tool exchanges — an assistant message's tool calls with all their
///    results — newest first, contiguous: the first that does not fit is kept with the
///    tail of each result (the end of a test run or a log is where the verdict is, after
///    [`TRUNCATED_NOTE`]) when at least [`MIN_TRUNCATED_TOKENS`] remain, and ends this
///    run;
/// 3. the files touched: for each path of a [`FILE_TOOLS`] call not already kept, the
///    latest successful result, as an assistant message holding just that call followed
///    by its result;
/// 4. earlier user messages, contiguous from the newest.
///
/// Kept messages are returned in their original order, well-formed (no dangling call, no
/// orphan result). Answer text and reasoning of the kept assistant messages are not kept.
///
/// The turn's latest user input comes first of all: when it does not fit whole, it is
/// kept with the middle of its text cut (see `cut_text`) to what the budget leaves.
#[must_use]
pub fn checkpoint_kept(history_events: &[Event], keep_budget_tokens: u64) -> Vec<Message> {
    kept(history_events, keep_budget_tokens, false)
}

/// [`checkpoint_kept`] after the provider refused a request as too large: every image is
/// replaced by a line naming it ([`without_images`]) *before* the messages are measured,
/// so an image no longer costs its share of the keep budget and the turn's user message
/// that carried it is still kept.
#[must_use]
pub fn checkpoint_kept_without_images(
    history_events: &[Event],
    keep_budget_tokens: u64,
) -> Vec<Message> {
    kept(history_events, keep_budget_tokens, true)
}

fn kept(history_events: &[Event], keep_budget_tokens: u64, no_images: bool) -> Vec<Message> {
    let messages = history(history_events);
    let turn_start = current_turn_start(history_events, &messages);
    let messages = if no_images {
        without_images(messages)
    } else {
        messages
    };
    let mut keep = Keeper {
        picked: Vec::new(),
        used: 0,
        budget: keep_budget_tokens,
    };
    // 1. The current turn's user messages: its input first (cut when it does not fit
    //    whole), then the others (stop-hook continuations), newest first.
    if let Some(Message::User(input)) = messages.get(turn_start) {
        let whole = Message::User(input.clone());
        if !keep.add(turn_start, vec![whole]) {
            keep.add_cut_input(turn_start, input);
        }
    }
    for (i, m) in messages.iter().enumerate().skip(turn_start + 1).rev() {
        if matches!(m, Message::User(_)) {
            keep.add(i, vec![m.clone()]);
        }
    }
    // 2. The most recent tool exchanges.
    let mut kept_calls: BTreeSet<String> = BTreeSet::new();
    for (i, m) in messages.iter().enumerate().rev() {
        let Message::Assistant(a) = m else { continue };
        if a.tool_calls.is_empty() {
            continue;
        }
        let mut unit = vec![calls_only(a.tool_calls.clone())];
        unit.extend(
            messages[i + 1..]
                .iter()
                .take_while(|m| matches!(m, Message::Tool(_)))
                .cloned(),
        );
        if !keep.add(i, unit.clone()) {
            let room = keep.budget.saturating_sub(keep.used);
            if room >= MIN_TRUNCATED_TOKENS
                && let Some(short) = truncated(&unit, room)
                && keep.add(i, short)
            {
                kept_calls.extend(a.tool_calls.iter().map(|c| c.id.as_str().to_owned()));
            }
            break;
        }
        kept_calls.extend(a.tool_calls.iter().map(|c| c.id.as_str().to_owned()));
    }
    // 3. The latest successful result per file path.
    let mut seen_paths = BTreeSet::new();
    for (i, m) in messages.iter().enumerate().rev() {
        let Message::Tool(result) = m else { continue };
        let Some(call) = messages[..i].iter().rev().find_map(|m| match m {
            Message::Assistant(a) => a.tool_calls.iter().find(|c| c.id == result.tool_call_id),
            _ => None,
        }) else {
            continue;
        };
        let Some(path) = call.arguments.get("path").and_then(|p| p.as_str()) else {
            continue;
        };
        if !FILE_TOOLS.contains(&call.name.as_str()) {
            continue;
        }
        if kept_calls.contains(call.id.as_str()) {
            seen_paths.insert(path.to_owned());
            continue;
        }
        if result.is_error || !seen_paths.insert(path.to_owned()) {
            continue;
        }
        keep.add(i, vec![calls_only(vec![call.clone()]), m.clone()]);
    }
    // 4. Earlier user messages, contiguous from the newest.
    for (i, m) in messages.iter().enumerate().take(turn_start).rev() {
        if matches!(m, Message::User(_)) && !keep.add(i, vec![m.clone()]) {
            break;
        }
    }
    keep.picked.sort_by_key(|(i, _)| *i);
    keep.picked.into_iter().flat_map(|(_, m)| m).collect()
}

/// An assistant message holding just these tool calls.
fn calls_only(tool_calls: Vec<foya_protocol::ToolCall>) -> Message {
    Message::Assistant(AssistantMessage {
        tool_calls,
        finish_reason: Some(foya_protocol::FinishReason::ToolCalls),
        ..AssistantMessage::default()
    })
}

/// Messages picked for a checkpoint, keyed by their first index, within a budget.
struct Keeper {
    picked: Vec<(usize, Vec<Message>)>,
    used: u64,
    budget: u64,
}

impl Keeper {
    /// Keeps `unit` (at history index `at`) when it fits; whether it did.
    fn add(&mut self, at: usize, unit: Vec<Message>) -> bool {
        let cost: u64 = unit.iter().map(message_tokens).sum();
        if self.used + cost > self.budget {
            return false;
        }
        self.used += cost;
        self.picked.push((at, unit));
        true
    }

    /// Keeps user message `input` (at `at`) with its text cut to what the budget leaves,
    /// when anything of it fits.
    fn add_cut_input(&mut self, at: usize, input: &Input) {
        let room = self.budget.saturating_sub(self.used);
        let mut cap = input.text.chars().count();
        while cap > 16 {
            cap /= 2;
            let mut short = input.clone();
            short.text = cut_text_with(&input.text, cap, KEPT_CUT_NOTE);
            if message_tokens(&Message::User(short.clone())) <= room {
                self.add(at, vec![Message::User(short)]);
                return;
            }
        }
    }
}

/// Index in `messages` where the current turn starts: its latest user input (the last
/// `user_message` of the log), or the end when there is none.
fn current_turn_start(events: &[Event], messages: &[Message]) -> usize {
    let Some(input) = events.iter().rev().find_map(|e| match &e.kind {
        foya_protocol::EventKind::UserMessage { input, .. } => Some(input),
        _ => None,
    }) else {
        return messages.len();
    };
    messages
        .iter()
        .rposition(|m| matches!(m, Message::User(u) if u == input))
        .unwrap_or(messages.len())
}

/// `unit` (an assistant message and its tool results) with each result cut to its tail so
/// that the whole fits `room` estimated tokens; `None` when even short tails do not.
fn truncated(unit: &[Message], room: u64) -> Option<Vec<Message>> {
    let longest = unit
        .iter()
        .map(|m| match m {
            Message::Tool(t) => t.content.chars().count(),
            _ => 0,
        })
        .max()?;
    let mut keep_chars = longest;
    while keep_chars > 16 {
        keep_chars /= 2;
        let short: Vec<Message> = unit
            .iter()
            .map(|m| match m {
                Message::Tool(t) => {
                    let count = t.content.chars().count();
                    let mut t = t.clone();
                    if count > keep_chars {
                        let tail: String = t.content.chars().skip(count - keep_chars).collect();
                        t.content = format!("{TRUNCATED_NOTE}{tail}");
                    }
                    Message::Tool(t)
                }
                other => other.clone(),
            })
            .collect();
        if short.iter().map(message_tokens).sum::<u64>() <= room {
            return Some(short);
        }
    }
    None
}

/// `messages` with every image of a user message or a tool result replaced by a line
/// naming it (its attachment id and type), so a request re-sent after the provider
/// refused one as too large carries no image bytes; the model still learns an image was
/// there.
#[must_use]
pub fn without_images(messages: Vec<Message>) -> Vec<Message> {
    messages
        .into_iter()
        .map(|m| match m {
            Message::User(mut input) if !input.images.is_empty() => {
                name_left_out(&mut input.text, std::mem::take(&mut input.images));
                Message::User(input)
            }
            Message::Tool(mut result) if !result.images.is_empty() => {
                name_left_out(&mut result.content, std::mem::take(&mut result.images));
                Message::Tool(result)
            }
            other => other,
        })
        .collect()
}

/// Appends to `text` a line naming each of `images` as left out.
pub(super) fn name_left_out(text: &mut String, images: Vec<foya_protocol::AttachmentRef>) {
    for image in images {
        let kind = image.media_type.as_deref().unwrap_or("image");
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&format!("[{IMAGE_LEFT_OUT} {} ({kind})]", image.id));
    }
}

/// Words of the line that takes an image's place in a compaction checkpoint made after
/// an overflow (see [`without_images`]).
pub const IMAGE_LEFT_OUT: &str = "image left out to fit the context: attachment";
