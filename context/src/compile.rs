//! Owns [`compile`]: the pure assembly of system prompt, messages, tools and budget.

use super::compaction::name_left_out;
pub(super) use super::estimate::{IMAGE_TOKENS, message_tokens, tool_tokens};
use super::project::ProjectContext;
use super::{
    Budget, CompileInput, CompiledContext, ContextError, HistoryFold, ImageBudget,
    KERNEL_INSTRUCTIONS, estimate_tokens, history,
};
use foya_core::request::Messages;
use foya_protocol::{ApprovalMode, Instructions, InstructionsMode, Message, ToolMessage};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::LazyLock;

/// [`estimate_tokens`] of [`KERNEL_INSTRUCTIONS`], done once per process instead of at
/// every step.
static KERNEL_TOKENS: LazyLock<u64> = LazyLock::new(|| estimate_tokens(KERNEL_INSTRUCTIONS));

/// Compiles the context of one step.
///
/// System prompt layout (sections separated by a blank line; empty ones omitted):
/// [`KERNEL_INSTRUCTIONS`] (or the session's own instructions instead of or after it:
/// [`foya_protocol::SessionConfig::instructions`]), `# Environment`, `# Approval mode`
/// (both left out when the instructions are [`InstructionsMode::Only`]), `# Project instructions`
/// (`## <path>` then the text, outer first), `# Rules` (rules in force: `always` ones and
/// those whose `paths` match a touched path; `## <name> (<path>)`), `# Memory`
/// (`## <path>`), `# Skills` (`- <name>: <description> (<path>)`). Paths under the
/// project root are shown relative to it.
///
/// When `limits.supports_images` is false, tool results are sent without their images
/// (their text names each one).
///
/// # Errors
/// [`ContextError::ImagesNotSupported`] when the effective history's user inputs
/// reference images and `limits.supports_images` is false (nothing is dropped silently).
pub fn compile(input: &CompileInput) -> Result<CompiledContext, ContextError> {
    let messages = history(input.history);
    let tokens = messages.iter().map(message_tokens).sum();
    assemble(input, messages.into(), tokens)
}

/// [`compile`] with the history taken from `fold`, which must have folded exactly
/// `input.history` (the turn keeps one fold per turn and updates it before every step,
/// so a step folds only the events appended since the last one). The result equals
/// [`compile`]'s.
///
/// # Errors
/// As [`compile`].
pub fn compile_folded(
    input: &CompileInput,
    fold: &HistoryFold,
) -> Result<CompiledContext, ContextError> {
    debug_assert_eq!(
        fold.seen(),
        input.history.len(),
        "the fold is not of this log"
    );
    let (messages, tokens) = fold.messages();
    assemble(input, messages, tokens)
}

fn assemble(
    input: &CompileInput,
    mut messages: Messages,
    mut history_tokens: u64,
) -> Result<CompiledContext, ContextError> {
    let project = input.project;
    if !input.limits.supports_images {
        let removed;
        (messages, removed) = without_tool_images(messages);
        history_tokens = history_tokens.saturating_sub(IMAGE_TOKENS * removed);
        let mut ids: Vec<String> = Vec::new();
        for m in &messages {
            if let Message::User(u) = m {
                for image in &u.images {
                    if !ids.contains(&image.id) {
                        ids.push(image.id.clone());
                    }
                }
            }
        }
        if !ids.is_empty() {
            return Err(ContextError::ImagesNotSupported {
                attachment_ids: ids,
            });
        }
    }
    let size = |id: &str| {
        input
            .attachments
            .and_then(|s| s.size(id))
            .map_or(0, base64_len)
    };
    let (before, after);
    (messages, before, after) = within_image_budget(messages, input.limits.images, &size);
    history_tokens = history_tokens.saturating_sub(before).saturating_add(after);

    let show = |p: &Path| {
        p.strip_prefix(&project.root)
            .unwrap_or(p)
            .display()
            .to_string()
    };
    let mut parts = agent_instructions(input.config.instructions.as_ref());
    let alone = input
        .config
        .instructions
        .as_ref()
        .is_some_and(|own| own.mode == InstructionsMode::Only);
    if !alone {
        parts.push(("environment", environment(input).into()));
    }

    let sections = [
        (
            "project_instructions",
            "# Project instructions",
            project
                .instructions
                .iter()
                .map(|(p, t)| format!("## {}\n{t}", show(p)))
                .collect::<Vec<_>>(),
        ),
        ("rules", "# Rules", rules_in_force(input, &show)),
        (
            "memory",
            "# Memory",
            project
                .memory
                .iter()
                .map(|(p, t)| format!("## {}\n{t}", show(p)))
                .collect(),
        ),
        ("skills", "# Skills", skills(project, &show)),
    ];
    for (key, heading, entries) in sections {
        let text = if entries.is_empty() {
            String::new()
        } else {
            format!("{heading}\n{}", entries.join("\n\n"))
        };
        parts.push((key, text.into()));
    }

    let mut sections: BTreeMap<String, u64> = BTreeMap::new();
    for (key, text) in &parts {
        let tokens = if *key == "kernel" {
            *KERNEL_TOKENS
        } else {
            estimate_tokens(text)
        };
        sections.insert((*key).to_owned(), tokens);
    }
    sections.insert("history".to_owned(), history_tokens);
    sections.insert("tools".to_owned(), input.tools.tokens());

    let system = parts
        .into_iter()
        .map(|(_, t)| t)
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n");
    let raw_total: u64 = sections.values().sum();
    let limits = input.limits;
    let estimated_input_tokens = input.calibration.apply(raw_total);
    let threshold_tokens = limits
        .context_window
        .saturating_mul(u64::from(limits.compact_threshold_pct.min(100)))
        / 100;
    let budget = Budget {
        estimated_input_tokens,
        window: limits.context_window,
        reserve: limits.reserved_output,
        threshold_tokens,
        over_threshold: estimated_input_tokens > threshold_tokens,
        fits: estimated_input_tokens.saturating_add(limits.reserved_output)
            <= limits.context_window,
    };
    Ok(CompiledContext {
        system,
        messages,
        tools: std::sync::Arc::clone(input.tools.schemas()),
        budget,
        sections,
    })
}

/// `messages` without the images of tool results, and how many there were: a model
/// without vision reads the line that names each image in the result's text instead.
/// The messages are copied only when there is an image to take out.
fn without_tool_images(messages: Messages) -> (Messages, u64) {
    let count: usize = messages
        .iter()
        .map(|m| match m {
            Message::Tool(t) => t.images.len(),
            _ => 0,
        })
        .sum();
    if count == 0 {
        return (messages, 0);
    }
    let stripped = messages
        .iter()
        .map(|m| match m {
            Message::Tool(t) => Message::Tool(ToolMessage {
                images: Vec::new(),
                ..t.clone()
            }),
            other => other.clone(),
        })
        .collect();
    (
        Messages::new(std::sync::Arc::new(stripped), Vec::new()),
        count as u64,
    )
}

/// The `# Environment` and `# Approval mode` sections of a coding agent's prompt.
fn environment(input: &CompileInput) -> String {
    let project = input.project;
    let env = input.env;
    let mut environment = format!(
        "# Environment\n- Working directory: {}\n- Project root: {}\n- OS: {}\n- Shell: {}\n- Date: {}",
        env.cwd.display(),
        project.root.display(),
        env.os,
        env.shell,
        env.date
    );
    let mode = input.config.approval_mode;
    environment.push_str(&format!(
        "\n\n# Approval mode\n{}: {}",
        mode.as_str(),
        describe(mode)
    ));
    environment
}

/// The system prompt's first parts: the built-in [`KERNEL_INSTRUCTIONS`], the session's
/// own instructions in its place ([`InstructionsMode::Replace`] and
/// [`InstructionsMode::Only`]), or both in this order ([`InstructionsMode::Append`]).
fn agent_instructions(own: Option<&Instructions>) -> Vec<(&'static str, Cow<'_, str>)> {
    let kernel = ("kernel", Cow::Borrowed(KERNEL_INSTRUCTIONS));
    match own {
        None => vec![kernel],
        Some(own) => {
            let text = ("instructions", Cow::Borrowed(own.text.trim()));
            match own.mode {
                InstructionsMode::Replace | InstructionsMode::Only => vec![text],
                InstructionsMode::Append => vec![kernel, text],
            }
        }
    }
}

/// Length of the base64 text of `bytes` bytes (as the request carries them).
fn base64_len(bytes: u64) -> u64 {
    bytes.div_ceil(3).saturating_mul(4)
}

/// `messages` within `budget`: walking from the newest image to the oldest, images are
/// kept while both the count and the bytes (`size` of each attachment id) fit; the first
/// one that does not and every older one are replaced by the line that names an image
/// left out (as a compaction after an overflow does). Also the token estimates of the
/// changed messages before and after. The messages are copied only when one changes.
fn within_image_budget(
    messages: Messages,
    budget: ImageBudget,
    size: &dyn Fn(&str) -> u64,
) -> (Messages, u64, u64) {
    let Some((cut_message, cut_image)) = image_cut(&messages, budget, size) else {
        return (messages, 0, 0);
    };
    let (mut before, mut after) = (0, 0);
    let mut out = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        let leave_out = match i.cmp(&cut_message) {
            std::cmp::Ordering::Less => usize::MAX,
            std::cmp::Ordering::Equal => cut_image + 1,
            std::cmp::Ordering::Greater => 0,
        };
        let changed = match m {
            Message::User(u) if leave_out > 0 && !u.images.is_empty() => {
                let mut u = u.clone();
                let n = leave_out.min(u.images.len());
                name_left_out(&mut u.text, u.images.drain(..n).collect());
                Some(Message::User(u))
            }
            Message::Tool(t) if leave_out > 0 && !t.images.is_empty() => {
                let mut t = t.clone();
                let n = leave_out.min(t.images.len());
                name_left_out(&mut t.content, t.images.drain(..n).collect());
                Some(Message::Tool(t))
            }
            _ => None,
        };
        match changed {
            Some(new) => {
                before += message_tokens(m);
                after += message_tokens(&new);
                out.push(new);
            }
            None => out.push(m.clone()),
        }
    }
    (
        Messages::new(std::sync::Arc::new(out), Vec::new()),
        before,
        after,
    )
}

/// The newest image that does not fit `budget` (message index, image index within the
/// message), counting from the newest; `None` when every image fits.
fn image_cut(
    messages: &Messages,
    budget: ImageBudget,
    size: &dyn Fn(&str) -> u64,
) -> Option<(usize, usize)> {
    let (mut count, mut bytes) = (0usize, 0u64);
    for (i, m) in messages
        .iter()
        .enumerate()
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
    {
        let images = match m {
            Message::User(u) => &u.images,
            Message::Tool(t) => &t.images,
            _ => continue,
        };
        for (j, image) in images.iter().enumerate().rev() {
            count += 1;
            bytes = bytes.saturating_add(size(&image.id));
            if count > budget.max_images || bytes > budget.max_bytes {
                return Some((i, j));
            }
        }
    }
    None
}

fn rules_in_force(input: &CompileInput, show: &dyn Fn(&Path) -> String) -> Vec<String> {
    let project = input.project;
    project
        .rules
        .iter()
        .filter_map(|rule| {
            let why = if rule.always {
                "always".to_owned()
            } else {
                let hit = rule.triggered_by(&project.root, &input.env.cwd, input.touched_paths)?;
                format!(
                    "applies to {}; in force since {} was used",
                    rule.paths.join(", "),
                    hit.display()
                )
            };
            Some(format!(
                "## {} ({}, {why})\n{}",
                rule.name,
                show(&rule.path),
                rule.body
            ))
        })
        .collect()
}

fn skills(project: &ProjectContext, show: &dyn Fn(&Path) -> String) -> Vec<String> {
    if project.skills.is_empty() {
        return Vec::new();
    }
    let mut lines = vec!["Skills hold instructions for specific tasks. When one fits the task, read its SKILL.md with read_file before you start.".to_owned()];
    let list: Vec<String> = project
        .skills
        .iter()
        .map(|s| format!("- {}: {} ({})", s.name, s.description, show(&s.path)))
        .collect();
    lines.push(list.join("\n"));
    lines
}

fn describe(mode: ApprovalMode) -> &'static str {
    match mode {
        ApprovalMode::ReadOnly => {
            "only read-only tools are available; you cannot change files or run commands."
        }
        ApprovalMode::Ask => {
            "every file change, command and network access waits for the user's approval."
        }
        ApprovalMode::AutoEdit => {
            "file changes inside the working directory run without approval; commands wait for approval."
        }
        ApprovalMode::Auto => {
            "changes and commands run without approval inside the sandbox; anything leaving it waits for approval."
        }
        ApprovalMode::Bypass => {
            "no approvals and no sandbox: every action runs immediately, so be careful."
        }
    }
}
