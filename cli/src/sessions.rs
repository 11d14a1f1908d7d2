//! `foya sessions …`: list and show stored sessions (read straight from the store,
//! opened read-only: they leave its file as it was), and
//! delete one (through a runtime, so an unfinished turn is closed first). `list
//! --cluster` asks a running node instead (`cluster_list.rs`).

use crate::args::SessionsCommand;
use crate::exit::{CommandError, Ended};
use crate::render::summary_line;
use foya_protocol::{EventKind, Seq, SessionId};
use foya_storage::{Cursor, Durability, Page, Survey, Unreadable};
use std::io::Write as _;

/// `foya sessions …`.
///
/// # Errors
/// A malformed session id (usage), a store that cannot be read, no such session, a
/// damaged store (after what was readable), unreachable nodes (`list --cluster`).
pub async fn sessions(command: SessionsCommand) -> Result<(), CommandError> {
    let result = match command {
        SessionsCommand::List {
            json,
            cluster:
                crate::node::ClusterArgs {
                    cluster: Some(addr),
                    cookie_file: Some(cookie_file),
                },
            ..
        } => return crate::cluster_list::list(&addr, &cookie_file, json).await,
        SessionsCommand::List {
            store: crate::args::StoreArg { store: Some(url) },
            json,
            limit,
            all,
            ..
        } if !url.trim().is_empty() => list_shared(&url, json, Listing::new(limit, all)).await,
        SessionsCommand::List {
            data,
            json,
            limit,
            all,
            ..
        } => list(data.data_dir.as_deref(), json, Listing::new(limit, all)).await,
        SessionsCommand::Show {
            id,
            data,
            json,
            store,
        } => {
            let id: SessionId = id
                .parse()
                .map_err(|e| CommandError::usage(anyhow::anyhow!("{e}")))?;
            match crate::shared_store::url(&store) {
                Some(url) => crate::shared_store::show(url, id, json).await,
                None => show(data.data_dir.as_deref(), id, json).await,
            }
        }
        SessionsCommand::Delete { id, data } => {
            let id: SessionId = id
                .parse()
                .map_err(|e| CommandError::usage(anyhow::anyhow!("{e}")))?;
            delete(data.data_dir.as_deref(), id).await
        }
        SessionsCommand::Title { id, title, data } => {
            let id: SessionId = id
                .parse()
                .map_err(|e| CommandError::usage(anyhow::anyhow!("{e}")))?;
            set_title(data.data_dir.as_deref(), id, title).await
        }
    };
    match result {
        Ok(()) => Ok(()),
        // The reader of stdout went away (`foya sessions show ID | head -1`): done.
        Err(e) if is_broken_pipe(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Whether `e` is a write to a stdout whose reader has gone away.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// How many sessions `foya sessions list` shows.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Listing {
    /// The `n` most recently updated.
    First(usize),
    /// Every one, read [`PAGE`] at a time.
    All,
}

/// A page of the listing: the sessions that read, and the ones named unreadable.
pub(crate) type PageRead = (Vec<foya_protocol::SessionSummary>, Vec<Unreadable>);

/// Sessions read at a time by `--all`.
pub(crate) const PAGE: usize = 1000;

impl Listing {
    pub(crate) fn new(limit: usize, all: bool) -> Self {
        if all { Self::All } else { Self::First(limit) }
    }

    /// What the read-only open of a data dir checks for damage before this listing:
    /// the first page it reads; `--all` reads every session, so all of them.
    fn check(self) -> crate::data::Check {
        match self {
            Self::First(n) => crate::data::Check::Page(Page {
                after: None,
                limit: n.min(PAGE).saturating_add(1),
            }),
            Self::All => crate::data::Check::Whole,
        }
    }

    /// Lists through `read_page` (a page of the listing, or `None`: none can be read
    /// that way, the caller falls back), printing each page as it comes; returns the
    /// unreadable sessions named on the way and the last session printed.
    pub(crate) async fn run<F>(
        self,
        out: &mut impl std::io::Write,
        json: bool,
        mut read_page: impl FnMut(Page) -> F,
    ) -> anyhow::Result<Vec<Unreadable>>
    where
        F: std::future::Future<Output = anyhow::Result<PageRead>>,
    {
        let (mut after, mut unreadable) = (None, Vec::new());
        let mut left = match self {
            Self::First(n) => n,
            Self::All => usize::MAX,
        };
        loop {
            let want = left.min(PAGE);
            // One more than wanted: whether there are more to tell of.
            let (mut sessions, mut named) = read_page(Page {
                after,
                limit: want.saturating_add(1),
            })
            .await?;
            unreadable.append(&mut named);
            let more = sessions.len() > want;
            sessions.truncate(want);
            print_sessions(out, json, &sessions)?;
            after = sessions.last().map(Cursor::after);
            left -= sessions.len();
            if !more {
                return Ok(unreadable);
            }
            if left == 0 {
                out.flush()?;
                eprintln!(
                    "foya: more sessions than these {}: --all lists every one, --limit N more",
                    crate::words::count(
                        match self {
                            Self::First(n) => n as u64,
                            Self::All => 0,
                        },
                        "session"
                    )
                );
                return Ok(unreadable);
            }
        }
    }
}

/// Prints summaries, one line (or JSON object) each.
pub(crate) fn print_sessions(
    out: &mut impl std::io::Write,
    json: bool,
    sessions: &[foya_protocol::SessionSummary],
) -> anyhow::Result<()> {
    for s in sessions {
        if json {
            writeln!(out, "{}", serde_json::to_string(s)?)?;
        } else {
            writeln!(out, "{}", summary_line(s))?;
        }
    }
    Ok(())
}

/// `foya sessions list --store URL`: the sessions of the shared store, most recently
/// updated first, a page at a time (as for a data directory).
///
/// # Errors
/// The store cannot be opened or listed.
async fn list_shared(url: &str, json: bool, listing: Listing) -> anyhow::Result<()> {
    use foya_storage::EventLog as _;
    use std::io::Write as _;
    let store = crate::shared_store::open(url).await?;
    let mut out = std::io::stdout().lock();
    // Each page a query of its own (the database's index on the listing's order).
    let listed = listing
        .run(&mut out, json, |page| {
            let store = store.clone();
            async move { Ok((store.list_sessions(page).await?, Vec::new())) }
        })
        .await;
    store.close().await;
    listed?;
    out.flush()?;
    Ok(())
}

/// Lists the sessions of a data dir, writing nothing to its store
/// ([`crate::data::open_existing_read_only`]); a dir without a store (or no dir at all)
/// lists nothing, says so on stderr and exits 0, creating nothing. Only a page of
/// sessions is held at a time (a damaged file, read as salvage reads it, is surveyed
/// whole).
async fn list(dir: Option<&std::path::Path>, json: bool, listing: Listing) -> anyhow::Result<()> {
    let dir = crate::data::data_dir(dir)?;
    let Some(view) = crate::data::open_existing_read_only_checking(&dir, listing.check()).await?
    else {
        eprintln!("foya: {}", crate::data::missing_store(&dir));
        return Ok(());
    };
    let mut out = std::io::stdout().lock();
    let store = &view.store;
    // A whole survey, read once when a page cannot be read through the listing index.
    let mut whole: Option<Survey> = None;
    // A file read as salvage reads it, or through a private repaired copy (its last
    // writer was killed), is surveyed whole: every part of it is looked at for damage.
    let survey_whole = view.damaged || store.is_copy();
    let unreadable = listing
        .run(&mut out, json, |page| {
            std::future::ready(read_page(store, survey_whole, &mut whole, page))
        })
        .await?;
    out.flush()?;
    for unreadable in &unreadable {
        match unreadable.session {
            Some(id) => eprintln!("foya: session {id} cannot be read: {}", unreadable.reason),
            None => eprintln!("foya: {}", unreadable.reason),
        }
    }
    // A file surveyed whole has its listing index read whole too: damage there is
    // damage of the file (the listing above did not need it).
    let index_damaged = survey_whole && !view.damaged && {
        let read = store.survey_page(Page::ALL);
        if let Err(e) = &read {
            eprintln!("foya: the listing index cannot be read: {e}");
        }
        read.is_err()
    };
    if !unreadable.is_empty() || index_damaged {
        if !view.damaged {
            eprintln!("foya: {}", crate::damage::DAMAGE_HINT);
        }
        return Err(Ended::Damaged.into());
    }
    view_ended(view.damaged)
}

/// A page of the listing of a data dir's store, read through the listing index; with
/// `survey_whole`, or when the index cannot be read, the file is surveyed whole once
/// (`whole`) and paged from that.
fn read_page(
    store: &foya_storage::ReadOnlyStore,
    survey_whole: bool,
    whole: &mut Option<Survey>,
    page: Page,
) -> anyhow::Result<PageRead> {
    if whole.is_none() && !survey_whole {
        match store.survey_page(page) {
            Ok(survey) => return Ok((survey.sessions, survey.unreadable)),
            Err(e) => {
                eprintln!("foya: the listing index cannot be read ({e}); reading every session");
            }
        }
    }
    let survey = match whole.take() {
        Some(survey) => survey,
        None => store.survey()?,
    };
    let sessions = survey
        .sessions
        .iter()
        .filter(|s| page.after.is_none_or(|c| c.precedes(s)))
        .take(page.limit)
        .cloned()
        .collect();
    // Named once, with the first page.
    let unreadable = if page.after.is_none() {
        survey.unreadable.clone()
    } else {
        Vec::new()
    };
    *whole = Some(survey);
    Ok((sessions, unreadable))
}

/// How a read of a store ends: [`Ended::Damaged`] when it was read as salvage reads it.
fn view_ended(damaged: bool) -> anyhow::Result<()> {
    if damaged {
        return Err(Ended::Damaged.into());
    }
    Ok(())
}

/// Prints the events of one stored session, writing nothing to the store
/// ([`crate::data::open_existing_read_only`]); exit 1 when there is no such session.
async fn show(dir: Option<&std::path::Path>, id: SessionId, json: bool) -> anyhow::Result<()> {
    let dir = crate::data::data_dir(dir)?;
    let Some(view) = crate::data::open_existing_read_only(&dir).await? else {
        anyhow::bail!("no session {id}: {}", crate::data::missing_store(&dir));
    };
    let store = &view.store;
    if store.session(id)?.is_none() {
        eprintln!("foya: no session {id}");
        view_ended(view.damaged)?;
        return Err(Ended::Failed.into());
    }
    let mut out = std::io::stdout().lock();
    for event in store.read_from(id, Seq::FIRST)? {
        if json {
            writeln!(out, "{}", serde_json::to_string(&event)?)?;
            continue;
        }
        let detail = match &event.kind {
            EventKind::UserMessage { input, .. } => input.text.clone(),
            EventKind::AssistantMessage(m) => {
                let calls: Vec<_> = m.tool_calls.iter().map(|c| c.name.as_str()).collect();
                if calls.is_empty() {
                    m.text.clone()
                } else {
                    format!("{} [calls: {}]", m.text, calls.join(", "))
                }
            }
            EventKind::ToolMessage(t) => {
                format!("{}{}", if t.is_error { "error: " } else { "" }, t.content)
            }
            EventKind::TurnComplete { status, reason, .. } => {
                format!(
                    "{status:?}{}",
                    reason
                        .as_deref()
                        .map(|r| format!(" ({r})"))
                        .unwrap_or_default()
                )
            }
            EventKind::TitleSet { title, source } => match source {
                foya_protocol::TitleSource::User => format!("{title} (by hand)"),
                foya_protocol::TitleSource::Generated => format!("{title} (generated)"),
            },
            _ => String::new(),
        };
        // Model, tool and user text: its terminal controls are shown, not obeyed.
        let detail: String = detail
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(100)
            .collect();
        let detail = crate::render::terminal_safe(&detail);
        writeln!(
            out,
            "{:>5}  {:<20} {detail}",
            event.seq.0,
            event.kind.type_name()
        )?;
    }
    out.flush()?;
    view_ended(view.damaged)
}

/// Deletes a session through a runtime on the data dir: loading the session closes an
/// unfinished turn (recovery), then the delete cancels whatever runs, drops queued inputs
/// and writes `session_deleted`. No model is needed: the runtime gets an empty script.
async fn delete(dir: Option<&std::path::Path>, id: SessionId) -> anyhow::Result<()> {
    use foya_actors::provider::scripted::ScriptedClient;
    use foya_actors::{Runtime, RuntimeError};
    let dir = crate::data::data_dir(dir)?;
    let Some(store) = crate::data::open_for_session(&dir, id, Durability::Immediate)? else {
        return Err(Ended::Failed.into());
    };
    match store.session(id)? {
        None => anyhow::bail!("no session {id}"),
        Some(summary) if summary.deleted => {
            let _ = writeln!(std::io::stdout(), "session {id} was already deleted");
            return Ok(());
        }
        Some(_) => {}
    }
    let model = std::sync::Arc::new(ScriptedClient::from_script(Default::default()));
    let mut config = crate::setup::runtime_config(store, model)?;
    // The transcript the session's hooks read goes with it.
    config.transcript_dir = Some(crate::hooks::transcript_dir(&dir));
    let runtime = Runtime::start(config).await?;
    let result = match runtime.session(id).await {
        Ok(session) => session.delete().await,
        Err(e) => Err(e),
    };
    runtime.shutdown().await;
    match result {
        Ok(()) | Err(RuntimeError::SessionDeleted(_)) => {
            let _ = writeln!(std::io::stdout(), "deleted session {id}");
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// Appends `title_set{source: user}` to a session of a data dir no process is using (the
/// store's file lock guarantees that), after its last event; the session's fold picks it
/// up on its next load, and a generated title never overwrites it.
async fn set_title(
    dir: Option<&std::path::Path>,
    id: SessionId,
    title: String,
) -> anyhow::Result<()> {
    use foya_protocol::{Event, TitleSource};
    let Some(title) = foya_actors::context::normalize_title(&title) else {
        eprintln!("foya: the title is empty");
        return Err(Ended::Usage.into());
    };
    let dir = crate::data::data_dir(dir)?;
    let Some(store) = crate::data::open_for_session(&dir, id, Durability::Immediate)? else {
        return Err(Ended::Failed.into());
    };
    let Some(last) = store.last_seq(id)? else {
        anyhow::bail!("no session {id}");
    };
    let at_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let event = Event {
        session_id: id,
        seq: last.next(),
        run_id: None,
        at_ms,
        kind: EventKind::TitleSet {
            title: title.clone(),
            source: TitleSource::User,
        },
    };
    store.append(vec![event]).await?;
    store.close().await;
    let _ = writeln!(
        std::io::stdout(),
        "title of session {id}: {}",
        crate::render::terminal_safe(&title)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::render::summary_line;
    use foya_protocol::{Seq, SessionId, SessionSummary};

    fn summary(last_seq: u64) -> SessionSummary {
        SessionSummary {
            id: SessionId::new(),
            title: Some("demo".into()),
            cwd: "/w".into(),
            model: "sim-1".into(),
            created_at_ms: Default::default(),
            updated_at_ms: Default::default(),
            last_seq: Seq(last_seq),
            deleted: false,
            node: None,
        }
    }

    #[test]
    fn one_event_is_singular_and_the_columns_line_up() {
        let one = summary(1);
        let many = summary(12);
        assert_eq!(
            summary_line(&one),
            format!("{}      1 event   /w  demo", one.id)
        );
        assert_eq!(
            summary_line(&many),
            format!("{}     12 events  /w  demo", many.id)
        );
    }
}
