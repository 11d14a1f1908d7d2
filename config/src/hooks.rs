//! Command hooks as configured: the `[hooks]` table of `config.toml` in Claude Code's
//! shape, parsed and merged (user file, then a trusted project's), and the matchers.
//!
//! ```toml
//! [[hooks.PreToolUse]]
//! matcher = "Bash|shell"            # a regex of tool names (whole name); "*" or none: all
//! hooks = [{ type = "command", command = "./.foya/hooks/validate.py", timeout = 30 }]
//!
//! [hooks]
//! stop = ["make lint"]              # the older form: `Stop` command hooks, still read
//! ```
//!
//! A matcher is tested against Foya's tool name and against Claude Code's name of the
//! same tool ([`claude_name`]), so `Edit|Write` matches `edit_file` and `write_file`.

use regex::Regex;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A hook point, named as in Claude Code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HookEvent {
    /// The first turn of a session in this runtime begins (`source`: `startup` for a new
    /// session, `resume` for a stored one).
    SessionStart,
    /// A turn begins with the user's input (`prompt`).
    UserPromptSubmit,
    /// A validated tool call is about to be decided and run.
    PreToolUse,
    /// A tool call ran (`tool_response`).
    PostToolUse,
    /// A compaction is about to summarise the history (`trigger`: `manual` or `auto`).
    PreCompact,
    /// The model stopped without tool calls (a top-level session).
    Stop,
    /// The model of a sub-agent session stopped without tool calls.
    SubagentStop,
    /// The runtime shuts a session down (`reason`).
    SessionEnd,
}

impl HookEvent {
    /// Every hook point.
    pub const ALL: [Self; 8] = [
        Self::SessionStart,
        Self::UserPromptSubmit,
        Self::PreToolUse,
        Self::PostToolUse,
        Self::PreCompact,
        Self::Stop,
        Self::SubagentStop,
        Self::SessionEnd,
    ];

    /// Claude Code's name (`PreToolUse`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::SessionStart => "SessionStart",
            Self::UserPromptSubmit => "UserPromptSubmit",
            Self::PreToolUse => "PreToolUse",
            Self::PostToolUse => "PostToolUse",
            Self::PreCompact => "PreCompact",
            Self::Stop => "Stop",
            Self::SubagentStop => "SubagentStop",
            Self::SessionEnd => "SessionEnd",
        }
    }

    /// The point named `name` (exactly as Claude Code spells it).
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.name() == name)
    }
}

impl HookEvent {
    /// The stop point of a session with `config`: `SubagentStop` in a sub-agent's
    /// session, `Stop` otherwise.
    pub fn stop_of(config: &foya_protocol::SessionConfig) -> Self {
        if config.parent.is_some() {
            Self::SubagentStop
        } else {
            Self::Stop
        }
    }
}

/// Default timeout of a command hook (Claude Code's: 60 s).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Largest `timeout` accepted, in seconds.
pub(crate) const MAX_TIMEOUT_S: u64 = 3_600;

/// Claude Code's tool names and the Foya tools they stand for.
pub(crate) const TOOL_NAMES: [(&str, &str); 9] = [
    ("Bash", "shell"),
    ("Read", "read_file"),
    ("Write", "write_file"),
    ("Edit", "edit_file"),
    ("MultiEdit", "edit_file"),
    ("Glob", "glob"),
    ("Grep", "grep"),
    ("LS", "list_dir"),
    ("Task", "agent"),
];

/// Claude Code's name of Foya tool `name` (`shell` → `Bash`), if it has one.
#[must_use]
pub fn claude_name(name: &str) -> Option<&'static str> {
    TOOL_NAMES
        .iter()
        .find(|(_, foya)| *foya == name)
        .map(|(claude, _)| *claude)
}

/// A call's arguments as a hook sees them (`tool_input`): the file tools' `path` is also
/// given as Claude Code's `file_path`, absolute (resolved against `cwd`), so scripts
/// written for `Edit`/`Write`/`Read` find it where they look.
#[must_use]
pub fn hook_tool_input(
    tool: &str,
    args: &serde_json::Value,
    cwd: &std::path::Path,
) -> serde_json::Value {
    let mut args = args.clone();
    let file_tool = matches!(tool, "read_file" | "write_file" | "edit_file");
    if let (true, Some(map)) = (file_tool, args.as_object_mut())
        && let Some(path) = map.get("path").and_then(serde_json::Value::as_str)
    {
        let absolute = cwd.join(path).to_string_lossy().into_owned();
        map.entry("file_path").or_insert(absolute.into());
    }
    args
}

/// One command hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandHook {
    /// Run with `bash -c` in the session's working directory.
    pub command: String,
    /// Then its process group is killed and the run counts as failed.
    pub timeout: Duration,
}

/// A matcher and the hooks it selects.
#[derive(Debug, Clone)]
pub struct MatcherGroup {
    /// The matcher as written (`None`: every subject).
    pub matcher: Option<String>,
    regex: Option<Regex>,
    /// The hooks, run in order.
    pub hooks: Vec<CommandHook>,
    /// Where it was configured: `None` for the user's own file (it applies to every
    /// session), else the trusted project's root ([`crate::trust::project_key`]): it
    /// applies only to sessions of that project.
    pub origin: Option<PathBuf>,
}

impl MatcherGroup {
    /// A group; `matcher` `None`, `""` or `"*"` selects everything.
    ///
    /// # Errors
    /// The matcher is not a valid regular expression.
    pub fn new(matcher: Option<String>, hooks: Vec<CommandHook>) -> Result<Self, crate::Invalid> {
        let matcher = matcher.filter(|m| !m.is_empty() && m != "*");
        let regex = match &matcher {
            Some(m) => Some(
                Regex::new(&format!("^(?:{m})$"))
                    .map_err(|e| format!("matcher {m:?} is not a valid regex: {e}"))?,
            ),
            None => None,
        };
        Ok(Self {
            matcher,
            regex,
            hooks,
            origin: None,
        })
    }

    /// Whether it applies to a session whose project root is `project`.
    #[must_use]
    pub(crate) fn applies_in(&self, project: Option<&Path>) -> bool {
        self.origin.is_none() || self.origin.as_deref() == project
    }

    /// Whether it selects `subject` (a tool name, a `source`, a `trigger`; `None` for
    /// points without one, which every group selects).
    #[must_use]
    pub fn matches(&self, subject: Option<&str>) -> bool {
        match (&self.regex, subject) {
            (None, _) | (Some(_), None) => true,
            (Some(re), Some(s)) => re.is_match(s) || claude_name(s).is_some_and(|c| re.is_match(c)),
        }
    }
}

impl PartialEq for MatcherGroup {
    fn eq(&self, other: &Self) -> bool {
        self.matcher == other.matcher && self.hooks == other.hooks && self.origin == other.origin
    }
}

/// Every configured command hook, by point.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HookCommands {
    groups: BTreeMap<HookEvent, Vec<MatcherGroup>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GroupToml {
    matcher: Option<String>,
    hooks: Vec<HookToml>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HookToml {
    #[serde(rename = "type")]
    kind: String,
    command: String,
    timeout: Option<u64>,
}

impl HookCommands {
    /// Parses the `[hooks]` table of a config file.
    ///
    /// # Errors
    /// A message naming the key: an unknown point, a hook `type` other than `command`, a
    /// timeout out of 1..=3600 s, an invalid matcher, or a value of the wrong shape.
    pub fn parse(table: &toml::Value) -> Result<Self, crate::Invalid> {
        let table = table
            .as_table()
            .ok_or("[hooks] must be a table of hook points")?;
        let mut out = Self::default();
        for (key, value) in table {
            if key == "stop" {
                out.add(HookEvent::Stop, legacy_stop(value)?);
                continue;
            }
            let event = HookEvent::from_name(key).ok_or_else(|| {
                let known: Vec<&str> = HookEvent::ALL.iter().map(|e| e.name()).collect();
                format!(
                    "[hooks] {key}: unknown hook point (known: {}, and `stop`)",
                    known.join(", ")
                )
            })?;
            let groups: Vec<GroupToml> = value
                .clone()
                .try_into()
                .map_err(|e| format!("[hooks] {key}: {}", e.message()))?;
            for group in groups {
                let hooks = group
                    .hooks
                    .into_iter()
                    .map(|h| command_hook(key, h))
                    .collect::<Result<Vec<_>, _>>()?;
                let group = MatcherGroup::new(group.matcher, hooks)
                    .map_err(|e| format!("[hooks] {key}: {e}"))?;
                out.add(event, vec![group]);
            }
        }
        Ok(out)
    }

    /// `Stop` hooks running `commands` (the older `stop = [...]` form).
    #[must_use]
    pub fn stop_commands(commands: &[String], timeout: Duration) -> Self {
        let hooks = commands
            .iter()
            .map(|command| CommandHook {
                command: command.clone(),
                timeout,
            })
            .collect();
        let mut out = Self::default();
        out.add(
            HookEvent::Stop,
            vec![MatcherGroup {
                matcher: None,
                regex: None,
                hooks,
                origin: None,
            }],
        );
        out
    }

    /// Adds `group` to the hooks of `event` (after those already there).
    pub fn push(&mut self, event: HookEvent, group: MatcherGroup) {
        self.add(event, vec![group]);
    }

    fn add(&mut self, event: HookEvent, groups: Vec<MatcherGroup>) {
        let groups: Vec<_> = groups.into_iter().filter(|g| !g.hooks.is_empty()).collect();
        if !groups.is_empty() {
            self.groups.entry(event).or_default().extend(groups);
        }
    }

    /// `other`'s hooks after this one's (the user's file, then the project's).
    pub fn extend(&mut self, other: Self) {
        for (event, groups) in other.groups {
            self.add(event, groups);
        }
    }

    /// These hooks as the ones of the trusted project whose root is `root`: they apply
    /// only to sessions of that project.
    #[must_use]
    pub fn of_project(mut self, root: &Path) -> Self {
        for group in self.groups.values_mut().flatten() {
            group.origin = Some(root.to_owned());
        }
        self
    }

    /// The groups of `event` selecting `subject` that apply to a session whose project
    /// root is `project` (the user's everywhere, a project's in that project), in order.
    pub fn matching<'a>(
        &'a self,
        event: HookEvent,
        subject: Option<&'a str>,
        project: Option<&'a Path>,
    ) -> impl Iterator<Item = &'a MatcherGroup> {
        self.groups
            .get(&event)
            .into_iter()
            .flatten()
            .filter(move |g| g.matches(subject) && g.applies_in(project))
    }

    /// Whether any group of `event` selects `subject`, in any project.
    #[must_use]
    pub fn any(&self, event: HookEvent, subject: Option<&str>) -> bool {
        self.groups
            .get(&event)
            .is_some_and(|groups| groups.iter().any(|g| g.matches(subject)))
    }

    /// Every command of every point that applies in `project` (their scripts are
    /// protected paths).
    #[must_use]
    pub fn commands(&self, project: Option<&Path>) -> Vec<String> {
        self.groups
            .values()
            .flatten()
            .filter(|g| g.applies_in(project))
            .flat_map(|g| g.hooks.iter().map(|h| h.command.clone()))
            .collect()
    }

    /// Whether no hook is configured.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }
}

fn legacy_stop(value: &toml::Value) -> Result<Vec<MatcherGroup>, String> {
    let commands = value
        .as_array()
        .and_then(|items| {
            items
                .iter()
                .map(|i| i.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
        })
        .ok_or("[hooks] stop must be an array of strings")?;
    Ok(HookCommands::stop_commands(&commands, DEFAULT_TIMEOUT)
        .groups
        .remove(&HookEvent::Stop)
        .unwrap_or_default())
}

fn command_hook(key: &str, hook: HookToml) -> Result<CommandHook, String> {
    if hook.kind != "command" {
        return Err(format!(
            "[hooks] {key}: hook type {:?} is not supported (only \"command\")",
            hook.kind
        ));
    }
    if hook.command.trim().is_empty() {
        return Err(format!("[hooks] {key}: a hook's command is empty"));
    }
    let timeout = match hook.timeout {
        None => DEFAULT_TIMEOUT,
        Some(s @ 1..=MAX_TIMEOUT_S) => Duration::from_secs(s),
        Some(s) => {
            return Err(format!(
                "[hooks] {key}: timeout = {s}: seconds, from 1 to {MAX_TIMEOUT_S}"
            ));
        }
    };
    Ok(CommandHook {
        command: hook.command,
        timeout,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn parse(text: &str) -> Result<HookCommands, String> {
        let value: toml::Table = toml::from_str(text).unwrap();
        HookCommands::parse(&value["hooks"]).map_err(|e| e.to_string())
    }

    #[test]
    fn reads_claude_codes_shape_and_the_older_stop_list() {
        let hooks = parse(
            r#"
[hooks]
stop = ["make lint"]
[[hooks.PreToolUse]]
matcher = "Bash"
hooks = [{ type = "command", command = "./v.sh", timeout = 5 }]
[[hooks.PostToolUse]]
matcher = "Edit|Write"
hooks = [{ type = "command", command = "fmt" }]
"#,
        )
        .unwrap();
        let commands = |event, subject| {
            hooks
                .matching(event, subject, None)
                .flat_map(|g| {
                    g.hooks
                        .iter()
                        .map(|h| (h.command.as_str(), h.timeout.as_secs()))
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            commands(HookEvent::PreToolUse, Some("shell")),
            [("./v.sh", 5)]
        );
        assert_eq!(
            commands(HookEvent::PreToolUse, Some("Bash")),
            [("./v.sh", 5)]
        );
        assert_eq!(commands(HookEvent::PreToolUse, Some("read_file")), []);
        assert_eq!(
            commands(HookEvent::PostToolUse, Some("write_file")),
            [("fmt", 60)]
        );
        assert_eq!(
            commands(HookEvent::PostToolUse, Some("edit_file")),
            [("fmt", 60)]
        );
        assert_eq!(commands(HookEvent::PostToolUse, Some("shell")), []);
        assert_eq!(commands(HookEvent::Stop, None), [("make lint", 60)]);
        assert_eq!(hooks.commands(None), ["./v.sh", "fmt", "make lint"]);
        let project = hooks.clone().of_project(Path::new("/p"));
        assert_eq!(project.commands(None), Vec::<String>::new());
        assert_eq!(
            project.commands(Some(Path::new("/q"))),
            Vec::<String>::new()
        );
        assert_eq!(project.commands(Some(Path::new("/p"))).len(), 3);
        assert!(project.any(HookEvent::Stop, None));
    }

    #[test]
    fn file_tools_give_claudes_file_path_too() {
        let cwd = std::path::Path::new("/w");
        let args = serde_json::json!({"path": "src/a.rs", "content": "x"});
        assert_eq!(
            hook_tool_input("write_file", &args, cwd),
            serde_json::json!({"path": "src/a.rs", "file_path": "/w/src/a.rs", "content": "x"})
        );
        let abs = serde_json::json!({"path": "/etc/x"});
        assert_eq!(
            hook_tool_input("read_file", &abs, cwd)["file_path"],
            "/etc/x"
        );
        assert_eq!(
            hook_tool_input("shell", &serde_json::json!({"command": "ls"}), cwd),
            serde_json::json!({"command": "ls"})
        );
    }

    #[test]
    fn a_matcher_matches_the_whole_name() {
        let group = |m: &str| MatcherGroup::new(Some(m.into()), Vec::new()).unwrap();
        assert!(group("shell").matches(Some("shell")));
        assert!(!group("shell").matches(Some("shell2")));
        assert!(group("mcp__fs__.*").matches(Some("mcp__fs__read")));
        assert!(group("*").matches(Some("anything")));
        assert!(group("").matches(Some("anything")));
        assert!(group("Bash").matches(None));
    }

    #[test]
    fn bad_config_is_refused_with_the_key() {
        let cases = [
            (
                "[hooks]\nPreTool = []\n",
                "[hooks] PreTool: unknown hook point",
            ),
            (
                "[[hooks.Stop]]\nhooks = [{ type = \"prompt\", command = \"x\" }]\n",
                "[hooks] Stop: hook type \"prompt\" is not supported",
            ),
            (
                "[[hooks.Stop]]\nhooks = [{ type = \"command\", command = \"x\", timeout = 0 }]\n",
                "[hooks] Stop: timeout = 0: seconds, from 1 to 3600",
            ),
            (
                "[[hooks.PreToolUse]]\nmatcher = \"(\"\nhooks = []\n",
                "[hooks] PreToolUse: matcher \"(\" is not a valid regex",
            ),
            (
                "[hooks]\nstop = \"x\"\n",
                "[hooks] stop must be an array of strings",
            ),
            (
                "[[hooks.Stop]]\nhooks = [{ type = \"command\", command = \"x\", when = 1 }]\n",
                "[hooks] Stop: unknown field `when`",
            ),
        ];
        for (text, expected) in cases {
            let err = parse(text).unwrap_err();
            assert!(err.starts_with(expected), "{text}: {err}");
        }
    }
}
