//! [`Hooks`]: every hook of the runtime, run point by point — in-process hooks first,
//! then the command hooks whose matcher selects the subject — each run timed and turned
//! into a `hook_ran` event; and the session transcript a hook can read.

use super::decision::merge;
use super::{Hook, HookCommands, HookEvent, HookInput, HookResponse, HookRun, command};
use crate::tools::sandbox::SandboxRunner;
use foya_protocol::{Event, EventKind, HookDecision, SessionId};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::time::Instant;

/// Every hook of a runtime.
#[derive(Debug, Clone, Default)]
pub(crate) struct Hooks {
    /// In-process hooks, run first, in order.
    in_process: Vec<Arc<dyn Hook>>,
    /// Command hooks by point.
    commands: HookCommands,
    /// Where session transcripts are exported for hooks (`None`: not exported, and
    /// `transcript_path` is empty).
    transcript_dir: Option<PathBuf>,
    /// The sandbox helper command hooks run under (`command::run`); `None`: plain bash.
    supervisor: Option<SandboxRunner>,
}

impl Hooks {
    /// The hooks of a runtime.
    #[must_use]
    pub(crate) fn new(
        in_process: Vec<Arc<dyn Hook>>,
        commands: HookCommands,
        transcript_dir: Option<PathBuf>,
    ) -> Self {
        Self {
            in_process,
            commands,
            transcript_dir,
            supervisor: None,
        }
    }

    /// These hooks, with command hooks run under `supervisor` (see `command::run`).
    #[must_use]
    pub(crate) fn supervised_by(mut self, supervisor: Option<SandboxRunner>) -> Self {
        self.supervisor = supervisor;
        self
    }

    /// Whether any hook runs at `event` for `subject`.
    #[must_use]
    pub(crate) fn any(&self, event: HookEvent, subject: Option<&str>) -> bool {
        self.in_process.iter().any(|h| h.applies(event, subject))
            || self.commands.any(event, subject)
    }

    /// Every command that applies to a session in `cwd` (their scripts are protected
    /// paths).
    #[must_use]
    pub(crate) fn commands(&self, cwd: &Path) -> Vec<String> {
        self.commands.commands(project_of(cwd).as_deref())
    }

    /// Writes `events` (the session's log) as JSONL for the hooks to read and returns
    /// the file's path; an empty path when there is no transcript directory or the
    /// write failed (logged). The file is the owner's only (0600 in a 0700 directory).
    #[must_use]
    pub(crate) fn export_transcript(&self, session_id: SessionId, events: &[Event]) -> PathBuf {
        let Some(dir) = &self.transcript_dir else {
            return PathBuf::new();
        };
        let path = dir.join(format!("{session_id}.jsonl"));
        match write_jsonl(dir, &path, events) {
            Ok(()) => path,
            Err(e) => {
                tracing::warn!(session.id = %session_id, error = %e, "cannot export the transcript for hooks");
                PathBuf::new()
            }
        }
    }

    /// Removes the transcript [`Self::export_transcript`] wrote for `session_id` (a
    /// deleted session's log leaves no copy behind); a missing file is not an error.
    pub(crate) fn forget_transcript(&self, session_id: SessionId) {
        let Some(dir) = &self.transcript_dir else {
            return;
        };
        match std::fs::remove_file(dir.join(format!("{session_id}.jsonl"))) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(session.id = %session_id, error = %e, "cannot remove the transcript exported for hooks");
            }
        }
    }

    /// Runs the hooks of `input`'s point that select its subject.
    ///
    /// # Cancel safety
    /// Dropping the future drops the running hook (a command hook's process group is
    /// killed); the runs before it are lost with their events.
    pub(crate) async fn run(&self, input: &HookInput) -> HookRun {
        let Some(event) = input.event() else {
            return HookRun::default();
        };
        let subject = input.subject();
        let mut responses = Vec::new();
        let mut events = Vec::new();
        for hook in self.in_process.iter().filter(|h| h.applies(event, subject)) {
            let started = Instant::now();
            let response = hook.run(input).await;
            let name = format!("in-process:{}", hook.name());
            events.push(ran(input, None, name, started, &response));
            responses.push(response);
        }
        let project = project_of(&input.cwd);
        for group in self.commands.matching(event, subject, project.as_deref()) {
            for hook in &group.hooks {
                let started = Instant::now();
                let response = command::run(hook, input, self.supervisor.as_ref()).await;
                let matcher = group.matcher.clone();
                events.push(ran(
                    input,
                    matcher,
                    hook.command.clone(),
                    started,
                    &response,
                ));
                responses.push(response);
            }
        }
        HookRun {
            merged: merge(&responses),
            events,
        }
    }
}

/// The project a session in `cwd` belongs to, as trust names it (its canonical root):
/// a trusted project's hooks apply only to sessions whose root it is.
fn project_of(cwd: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(cwd)
        .ok()
        .map(|canonical| crate::context::project_root(&canonical))
}

/// The `hook_ran` event of one run (a failure is logged too, without the hook's output).
fn ran(
    input: &HookInput,
    matcher: Option<String>,
    hook: String,
    started: Instant,
    response: &HookResponse,
) -> EventKind {
    let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    if response.decision == HookDecision::Failed {
        tracing::warn!(
            session.id = %input.session_id,
            hook.event = input.hook_event_name,
            hook.command = %hook,
            error = response.reason.as_deref().unwrap_or_default(),
            "hook failed; counted as no decision"
        );
    }
    EventKind::HookRan {
        hook_event: input.hook_event_name.into(),
        matcher,
        hook,
        tool_call_id: input.tool_use_id.clone(),
        duration_ms,
        decision: response.decision,
        reason: response.reason.clone(),
        additional_context: response.additional_context.clone(),
    }
}

fn write_jsonl(dir: &Path, path: &Path, events: &[Event]) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let tmp = path.with_extension("jsonl.tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    let mut out = std::io::BufWriter::new(&mut file);
    for event in events {
        serde_json::to_writer(&mut out, event)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    drop(out);
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::hooks::{CommandHook, MatcherGroup};
    use async_trait::async_trait;
    use foya_protocol::ApprovalMode;
    use std::time::Duration;

    #[derive(Debug)]
    struct Deny;

    #[async_trait]
    impl Hook for Deny {
        fn name(&self) -> &'static str {
            "deny"
        }
        fn applies(&self, event: HookEvent, subject: Option<&str>) -> bool {
            event == HookEvent::PreToolUse && subject == Some("shell")
        }
        async fn run(&self, _input: &HookInput) -> HookResponse {
            HookResponse::decided(HookDecision::Deny, Some("in-process says no".into()))
        }
    }

    fn input(dir: &Path, tool: &str) -> HookInput {
        let mut input = HookInput::new(
            HookEvent::PreToolUse,
            SessionId::new(),
            dir.to_owned(),
            ApprovalMode::Auto,
        );
        input.tool_name = Some(tool.into());
        input
    }

    #[tokio::test]
    async fn in_process_hooks_run_first_and_every_run_is_an_event() {
        let dir = tempfile::tempdir().unwrap();
        let slow = CommandHook {
            command: "sleep 5".into(),
            timeout: Duration::from_millis(200),
        };
        let ask = CommandHook {
            command: r#"echo '{"hookSpecificOutput":{"permissionDecision":"ask"}}'"#.into(),
            timeout: Duration::from_secs(10),
        };
        let mut all = HookCommands::default();
        all.push(
            HookEvent::PreToolUse,
            MatcherGroup::new(Some("Bash".into()), vec![slow, ask]).unwrap(),
        );
        let hooks = Hooks::new(vec![Arc::new(Deny)], all, None);
        let run = hooks.run(&input(dir.path(), "shell")).await;
        let decisions: Vec<_> = run
            .events
            .iter()
            .map(|e| match e {
                EventKind::HookRan { hook, decision, .. } => (hook.clone(), *decision),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(
            decisions,
            [
                ("in-process:deny".to_owned(), HookDecision::Deny),
                ("sleep 5".to_owned(), HookDecision::Failed),
                (
                    r#"echo '{"hookSpecificOutput":{"permissionDecision":"ask"}}'"#.to_owned(),
                    HookDecision::Ask
                ),
            ]
        );
        assert_eq!(run.merged.decision(), HookDecision::Deny);
        assert_eq!(run.merged.reason.as_deref(), Some("in-process says no"));
        // Not selected: nothing runs.
        assert!(
            hooks
                .run(&input(dir.path(), "read_file"))
                .await
                .events
                .is_empty()
        );
        assert!(!hooks.any(HookEvent::PreToolUse, Some("read_file")));
    }

    #[test]
    fn the_transcript_is_the_log_as_jsonl() {
        let dir = tempfile::tempdir().unwrap();
        let hooks = Hooks::new(
            Vec::new(),
            HookCommands::default(),
            Some(dir.path().join("t")),
        );
        let id = SessionId::new();
        let event = Event {
            session_id: id,
            seq: foya_protocol::Seq::FIRST,
            run_id: None,
            at_ms: 1,
            kind: EventKind::SessionDeleted {},
        };
        let path = hooks.export_transcript(id, &[event.clone(), event]);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2);
        let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(first["type"], "session_deleted");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(Hooks::default().export_transcript(id, &[]), PathBuf::new());
    }
}
