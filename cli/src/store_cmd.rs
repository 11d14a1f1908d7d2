//! `foya store …`: `check` (verify the event store without changing it), `salvage` (copy
//! every readable session into a fresh store), `repair` (put what salvage reads in place
//! of a damaged file, keeping it beside) and `backup` (a consistent copy). The work is
//! `foya-storage`'s ([`foya_storage::check`], [`foya_storage::salvage`],
//! [`foya_storage::repair`], [`foya_storage::ReadOnlyStore::backup`]); this renders it.

use crate::args::DataDirArg;
use crate::exit::{CommandError, Ended};
use anyhow::Context as _;
use clap::Subcommand;
use std::io::Write as _;
use std::path::{Path, PathBuf};

#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Verify the store without changing it: redb's integrity check and the logs (seqs
    /// dense from 1, every event decodes, summaries match, nothing acknowledged is
    /// missing). Exit 0 when sound, 4 with a list of problems.
    Check {
        #[command(flatten)]
        data: DataDirArg,
    },
    /// Copy every readable session, event by event, into a fresh store in the data
    /// directory --to, never writing to the old one. Exit 0 when every session was
    /// copied whole, 4 when some stop early or could not be copied (each is named).
    Salvage {
        #[command(flatten)]
        data: DataDirArg,
        /// The new data directory (created if missing; must not hold a store).
        #[arg(long)]
        to: PathBuf,
    },
    /// Replace a damaged store with every session salvage can read of it, keeping the
    /// damaged file beside it (`foya.redb.damaged-<unix ms>`). Acknowledged events it
    /// could not read are named and recorded (`store check` lists them). Exit 0 when the
    /// store was replaced.
    Repair {
        #[command(flatten)]
        data: DataDirArg,
    },
    /// Write a consistent copy of the store (one read transaction) to --to, a new file
    /// that opens as a store. While a `foya serve` holds the data dir, the server takes
    /// the copy (`POST /store/backup`) as it goes on serving.
    Backup {
        #[command(flatten)]
        data: DataDirArg,
        /// The backup file (must not exist).
        #[arg(long)]
        to: PathBuf,
        /// File holding the bearer token of the `foya serve` holding the data dir (when
        /// it was started with --token-file).
        #[arg(long)]
        token_file: Option<PathBuf>,
    },
    /// Copy every session's log between the data directory's redb store and a shared
    /// store, in either direction (a session already there continues from its last seq).
    Copy {
        #[command(flatten)]
        data: DataDirArg,
        /// Copy the data directory's sessions into this shared store (postgresql://…).
        #[arg(long, value_name = "URL", conflicts_with = "from_store")]
        to_store: Option<String>,
        /// Copy this shared store's sessions into the data directory's redb store.
        #[arg(long, value_name = "URL")]
        from_store: Option<String>,
    },
    /// Benchmarks only: add N idle sessions (each with T completed turns) to the store.
    #[command(hide = true)]
    Populate(crate::store_populate::PopulateArgs),
}

/// The redb-only `foya store` tool `command` asks for while `FOYA_STORE_URL` names a
/// shared store (`None`: none, or the variable is unset or empty).
#[must_use]
pub fn redb_only_tool(command: &StoreCommand) -> Option<&'static str> {
    std::env::var("FOYA_STORE_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())?;
    match command {
        StoreCommand::Check { .. } => Some("store check"),
        StoreCommand::Salvage { .. } => Some("store salvage"),
        StoreCommand::Backup { .. } => Some("store backup"),
        StoreCommand::Repair { .. } => Some("store repair"),
        StoreCommand::Copy { .. } | StoreCommand::Populate(_) => None,
    }
}

/// `foya store …`.
///
/// # Errors
/// A redb-only tool given `--store` (usage); a store that is missing, cannot be read or
/// written; a damaged store (`check` finding a problem, `salvage` unable to copy every
/// session whole).
pub async fn store(command: StoreCommand) -> Result<(), CommandError> {
    if let Some(tool) = redb_only_tool(&command) {
        return Err(CommandError::usage(crate::shared_store::redb_only(tool)));
    }
    let result = match command {
        StoreCommand::Check { data } => check(data.data_dir.as_deref()).await,
        StoreCommand::Salvage { data, to } => salvage(data.data_dir.as_deref(), &to).await,
        StoreCommand::Repair { data } => repair(data.data_dir.as_deref()).await,
        StoreCommand::Backup {
            data,
            to,
            token_file,
        } => backup(data.data_dir.as_deref(), &to, token_file.as_deref()).await,
        StoreCommand::Copy {
            data,
            to_store,
            from_store,
        } => {
            crate::shared_store::copy(
                data.data_dir.as_deref(),
                to_store.as_deref(),
                from_store.as_deref(),
            )
            .await
        }
        StoreCommand::Populate(args) => crate::store_populate::populate(args).await,
    };
    Ok(result?)
}

/// The store file of the data dir, or `None` after saying there is none.
fn existing_store(dir: Option<&Path>) -> anyhow::Result<Option<(PathBuf, PathBuf)>> {
    let dir = crate::data::data_dir(dir)?;
    let path = crate::data::store_path(&dir);
    if !path.is_file() {
        eprintln!("foya: {}", crate::data::missing_store(&dir));
        return Ok(None);
    }
    Ok(Some((dir, path)))
}

/// Turns a store refusal into the CLI's error (naming the process holding the dir).
fn refused(dir: &Path, path: &Path, e: foya_storage::Error) -> anyhow::Error {
    match e {
        foya_storage::Error::Open(foya_storage::OpenError::AlreadyOpen { .. }) => {
            crate::data::in_use(dir)
        }
        other => anyhow::Error::new(other).context(format!("cannot read {}", path.display())),
    }
}

async fn check(dir: Option<&Path>) -> anyhow::Result<()> {
    let Some((dir, path)) = existing_store(dir)? else {
        return Err(Ended::Failed.into());
    };
    let target = path.clone();
    let report = tokio::task::spawn_blocking(move || foya_storage::check(&target))
        .await
        .context("the check stopped")?
        .map_err(|e| refused(&dir, &path, e.into()))?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "store {}", path.display())?;
    writeln!(
        out,
        "{} sessions, {} events read",
        report.sessions, report.events
    )?;
    for note in &report.notes {
        writeln!(out, "note: {note}")?;
    }
    for problem in &report.problems {
        writeln!(out, "problem: {problem}")?;
    }
    for loss in &report.earlier_losses {
        writeln!(out, "reported earlier: {loss}")?;
    }
    out.flush()?;
    if report.is_clean() && !report.earlier_losses.is_empty() {
        eprintln!(
            "foya: the store {} is sound as it is now, but it lost acknowledged events \
             earlier ({} reported earlier, listed above)",
            path.display(),
            report.earlier_losses.len()
        );
        Ok(())
    } else if report.is_clean() {
        eprintln!("foya: the store {} is sound", path.display());
        Ok(())
    } else {
        eprintln!(
            "foya: the store {} has {} problem(s) (listed above); `foya store repair \
             --data-dir {}` puts every readable session back in its place (the damaged file \
             kept beside it), or `foya store salvage --data-dir {} --to NEW_DIR` copies them \
             into a fresh store",
            path.display(),
            report.problems.len(),
            dir.display(),
            dir.display()
        );
        Err(Ended::Damaged.into())
    }
}

async fn salvage(dir: Option<&Path>, to: &Path) -> anyhow::Result<()> {
    let Some((dir, path)) = existing_store(dir)? else {
        return Err(Ended::Failed.into());
    };
    let target = crate::data::store_path(to);
    if target.exists() {
        anyhow::bail!(
            "{} already holds a store: salvage into a new data directory",
            to.display()
        );
    }
    // Private, as every data dir the CLI creates: it holds every session's conversation.
    crate::data::create_private_dir(to)?;
    let report = foya_storage::salvage(&path, &target)
        .await
        .map_err(|e| refused(&dir, &path, e))?;
    let whole = print_salvaged(&report)?;
    let total = report.sessions.len();
    if whole == total {
        eprintln!(
            "foya: salvaged all {total} sessions into {}",
            target.display()
        );
        Ok(())
    } else {
        eprintln!(
            "foya: salvaged {whole} of {total} sessions whole into {}; {} stop early or could \
             not be copied (listed above)",
            target.display(),
            total - whole
        );
        Err(Ended::Damaged.into())
    }
}

/// Prints a salvage's notes and one line per session; returns how many were copied
/// whole.
fn print_salvaged(report: &foya_storage::SalvageReport) -> anyhow::Result<usize> {
    let mut out = std::io::stdout().lock();
    for note in &report.notes {
        writeln!(out, "note: {note}")?;
    }
    let mut whole = 0;
    for s in &report.sessions {
        let acknowledged = s
            .acknowledged
            .map(|a| format!(" (acknowledged up to seq {a})"))
            .unwrap_or_default();
        match &s.stopped {
            None => {
                whole += 1;
                writeln!(out, "{}  copied {} events", s.id, s.copied)?;
            }
            Some(why) if s.copied == 0 => {
                writeln!(out, "{}  not copied: {why}{acknowledged}", s.id)?;
            }
            Some(why) => writeln!(
                out,
                "{}  copied {} events, stops there: {why}{acknowledged}",
                s.id, s.copied
            )?,
        }
    }
    out.flush()?;
    Ok(whole)
}

/// Replaces the data dir's store with what salvage reads of it, keeping the damaged
/// file beside it ([`foya_storage::repair`]).
async fn repair(dir: Option<&Path>) -> anyhow::Result<()> {
    let Some((dir, path)) = existing_store(dir)? else {
        return Err(Ended::Failed.into());
    };
    let report = foya_storage::repair(&path)
        .await
        .map_err(|e| refused(&dir, &path, e))?;
    let whole = print_salvaged(&report.salvage)?;
    crate::damage::report_losses(&path, &report.losses);
    eprintln!(
        "foya: repaired {}: {whole} of {} sessions whole; the damaged file is kept as {}",
        path.display(),
        report.salvage.sessions.len(),
        report.kept.display()
    );
    Ok(())
}

async fn backup(dir: Option<&Path>, to: &Path, token_file: Option<&Path>) -> anyhow::Result<()> {
    let dir = crate::data::data_dir(dir)?;
    if std::fs::metadata(to).is_ok_and(|m| m.len() > 0) {
        anyhow::bail!("{} already exists; give a new file", to.display());
    }
    if let Some(url) = crate::data::serving_url(&dir) {
        return backup_through(&url, &dir, to, token_file).await;
    }
    let Some(view) = crate::data::open_existing_read_only(&dir).await? else {
        eprintln!("foya: {}", crate::data::missing_store(&dir));
        return Err(Ended::Failed.into());
    };
    let store = view.store;
    if view.damaged {
        eprintln!(
            "foya: the store {} is damaged: a backup copies only a sound store; use `foya \
             store salvage --data-dir {} --to NEW_DIR`",
            store.path().display(),
            dir.display()
        );
        return Err(Ended::Damaged.into());
    }
    let report = store
        .backup(to)
        .with_context(|| format!("cannot back up to {}", to.display()))?;
    eprintln!(
        "foya: backed up {} sessions ({} events) to {}",
        report.sessions,
        report.events,
        to.display()
    );
    Ok(())
}

/// Asks the `foya serve` at `url` (holding data dir `dir`) for a backup (`POST
/// /store/backup`) and moves the file it wrote to `to`: only a file under `dir/backups/`,
/// whatever path the answer names.
async fn backup_through(
    url: &str,
    dir: &Path,
    to: &Path,
    token_file: Option<&Path>,
) -> anyhow::Result<()> {
    // An empty JSON body: a server without a token refuses an empty POST of another
    // content type (a web page could send that one).
    let mut request = reqwest::Client::new()
        .post(format!("{url}/store/backup"))
        .header(reqwest::header::CONTENT_TYPE, "application/json");
    if let Some(file) = token_file {
        let token = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read token file {}", file.display()))?;
        request = request.bearer_auth(token.trim());
    }
    let response = request
        .send()
        .await
        .with_context(|| format!("cannot reach the server holding the data dir at {url}"))?;
    let status = response.status();
    let body: serde_json::Value = response
        .json()
        .await
        .with_context(|| format!("the server at {url} answered {status} without JSON"))?;
    if !status.is_success() {
        let message = body["error"]["message"].as_str().unwrap_or("no message");
        let hint = if status == reqwest::StatusCode::UNAUTHORIZED {
            " (give its token with --token-file)"
        } else {
            ""
        };
        anyhow::bail!("the server at {url} refused the backup: {status}: {message}{hint}");
    }
    let written = PathBuf::from(body["path"].as_str().unwrap_or_default());
    let backups = std::fs::canonicalize(dir.join("backups")).with_context(|| {
        format!(
            "the server at {url} wrote no backups folder in {}",
            dir.display()
        )
    })?;
    let inside = std::fs::canonicalize(&written)
        .ok()
        .and_then(|w| w.parent().map(|p| p == backups))
        .unwrap_or(false);
    anyhow::ensure!(
        inside,
        "the server at {url} named a backup outside {}: {}",
        backups.display(),
        written.display()
    );
    if std::fs::rename(&written, to).is_err() {
        std::fs::copy(&written, to).with_context(|| {
            format!(
                "cannot copy the backup {} to {}",
                written.display(),
                to.display()
            )
        })?;
        let _ = std::fs::remove_file(&written);
    }
    eprintln!(
        "foya: backed up {} sessions ({} events) to {}, taken by the server at {url}",
        body["sessions"],
        body["events"],
        to.display()
    );
    Ok(())
}
