//! `foya store populate` (hidden, for benchmarks): fills a data directory's store with
//! N idle sessions, each a `session_created` and T completed one-step turns (a user
//! message and a text answer), appended through the store's group-commit writer by many
//! tasks at once. What a million stored sessions cost at start-up is measured on such a
//! store ([benchmarks.md](../../docs/benchmarks.md)). Nothing here runs a turn: the
//! events are written as a finished turn would have left them.

use anyhow::Context as _;
use clap::Args;
use foya_protocol::{
    AssistantMessage, Event, EventKind, FinishReason, Input, InputId, RunId, Seq, SessionConfig,
    SessionId, TurnStatus,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Appending tasks: enough for the writer to fill its batches.
const WRITERS: usize = 256;

#[derive(Debug, Args)]
pub struct PopulateArgs {
    /// Sessions to add.
    #[arg(long, value_parser = crate::values::positive_count)]
    pub(crate) sessions: usize,
    /// Completed turns in each session (0: only `session_created`).
    #[arg(long, default_value_t = 1)]
    pub(crate) turns: u32,
    #[command(flatten)]
    pub(crate) data: crate::args::DataDirArg,
}

/// Adds the sessions; prints how many and how long it took.
pub(crate) async fn populate(args: PopulateArgs) -> anyhow::Result<()> {
    let dir = crate::data::data_dir(args.data.data_dir.as_deref())?;
    let store = crate::data::open_store(&dir)?;
    let started = std::time::Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..WRITERS.min(args.sessions) {
        let (store, next) = (store.clone(), Arc::clone(&next));
        let (sessions, turns) = (args.sessions, args.turns);
        tasks.spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < sessions {
                store.append(session_log(turns)).await?;
            }
            Ok::<(), foya_storage::AppendError>(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.context("an appending task failed")?
            .context("cannot append")?;
    }
    store.close().await;
    println!(
        "added {} to {} in {:.1} s",
        crate::words::count(args.sessions as u64, "session"),
        crate::data::store_path(&dir).display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// One idle session's log: `session_created`, then `turns` completed one-step turns.
fn session_log(turns: u32) -> Vec<Event> {
    let id = SessionId::new();
    let at_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let mut kinds = vec![(
        None,
        EventKind::SessionCreated {
            config: SessionConfig::new("/tmp"),
        },
    )];
    for turn in 0..turns {
        let (run, input_id) = (Some(RunId::new()), InputId::new());
        let answer = AssistantMessage {
            text: format!("answer {turn}"),
            finish_reason: Some(FinishReason::Stop),
            ..AssistantMessage::default()
        };
        kinds.extend([
            (
                run,
                EventKind::UserMessage {
                    input_id,
                    input: Input::text(format!("question {turn}")),
                },
            ),
            (run, EventKind::TurnStarted { input_id }),
            (run, EventKind::StepStarted { step: 1 }),
            (run, EventKind::AssistantMessage(answer)),
            (
                run,
                EventKind::TurnComplete {
                    status: TurnStatus::Completed,
                    reason: None,
                    error: None,
                },
            ),
        ]);
    }
    kinds
        .into_iter()
        .zip(1..)
        .map(|((run_id, kind), seq)| Event {
            session_id: id,
            seq: Seq(seq),
            run_id,
            at_ms,
            kind,
        })
        .collect()
}
