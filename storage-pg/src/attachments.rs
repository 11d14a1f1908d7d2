//! Attachments in PostgreSQL (`foya_attachments`): [`PgAttachments`], the
//! [`SharedAttachments`] of a [`crate::PgLog`], so an image uploaded through one node is
//! read by every other.
//!
//! The attachment store above is synchronous (a local directory's files), so these calls
//! block their caller: they are answered by a thread of their own, with its own
//! single-threaded tokio runtime and connection (opened on first use, again after it
//! was lost), never by the caller's runtime — a caller blocking one of its runtime's
//! threads cannot stall them. A call waits at most [`ANSWER_WITHIN`].

use crate::{PgError, connect, render};
use foya_storage::{SharedAttachmentError, SharedAttachments};
use std::fmt;
use std::sync::mpsc as std_mpsc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_postgres::{Client, Config};
use uuid::Uuid;

/// The longest a put or get waits for the database.
pub const ANSWER_WITHIN: Duration = Duration::from_secs(30);

type Reply<T> = std_mpsc::SyncSender<Result<T, String>>;

enum Job {
    Put {
        id: Uuid,
        media_type: String,
        bytes: Vec<u8>,
        reply: Reply<()>,
    },
    Get {
        id: Uuid,
        reply: Reply<Option<(String, Vec<u8>)>>,
    },
}

/// `foya_attachments` through a thread of its own (see the module docs). Dropping it
/// ends the thread after the job in hand.
pub struct PgAttachments {
    jobs: Result<mpsc::UnboundedSender<Job>, String>,
    location: String,
}

impl fmt::Debug for PgAttachments {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgAttachments")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl PgAttachments {
    /// Starts the thread; the connection is opened by the first call.
    pub(crate) fn start(config: Config, location: String) -> Self {
        let (jobs, receiver) = mpsc::unbounded_channel();
        let spawned = std::thread::Builder::new()
            .name("foya-pg-attachments".into())
            .spawn(move || serve(&config, receiver));
        let jobs = match spawned {
            Ok(_) => Ok(jobs),
            Err(e) => Err(format!("cannot start the attachment thread: {e}")),
        };
        Self { jobs, location }
    }

    fn ask<T>(&self, job: impl FnOnce(Reply<T>) -> Job) -> Result<T, String> {
        let jobs = self.jobs.as_ref().map_err(Clone::clone)?;
        let (reply, answer) = std_mpsc::sync_channel(1);
        jobs.send(job(reply))
            .map_err(|_| "the attachment thread stopped".to_owned())?;
        match answer.recv_timeout(ANSWER_WITHIN) {
            Ok(result) => result,
            Err(std_mpsc::RecvTimeoutError::Timeout) => Err(format!(
                "PostgreSQL at {} did not answer within {} s",
                self.location,
                ANSWER_WITHIN.as_secs()
            )),
            Err(std_mpsc::RecvTimeoutError::Disconnected) => {
                Err("the attachment thread stopped before answering".to_owned())
            }
        }
    }
}

impl SharedAttachments for PgAttachments {
    fn put(
        &self,
        id: [u8; 16],
        media_type: &str,
        bytes: &[u8],
    ) -> Result<(), SharedAttachmentError> {
        self.ask(|reply| Job::Put {
            id: Uuid::from_bytes(id),
            media_type: media_type.to_owned(),
            bytes: bytes.to_vec(),
            reply,
        })
        .map_err(SharedAttachmentError)
    }

    fn get(&self, id: [u8; 16]) -> Result<Option<(String, Vec<u8>)>, SharedAttachmentError> {
        self.ask(|reply| Job::Get {
            id: Uuid::from_bytes(id),
            reply,
        })
        .map_err(SharedAttachmentError)
    }
}

/// The thread: one job at a time on one connection.
fn serve(config: &Config, mut jobs: mpsc::UnboundedReceiver<Job>) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            // Every job is answered with why.
            let why = format!("cannot start the attachment thread's runtime: {e}");
            while let Some(job) = jobs.blocking_recv() {
                match job {
                    Job::Put { reply, .. } => drop(reply.send(Err(why.clone()))),
                    Job::Get { reply, .. } => drop(reply.send(Err(why.clone()))),
                }
            }
            return;
        }
    };
    runtime.block_on(async move {
        let mut client: Option<Client> = None;
        while let Some(job) = jobs.recv().await {
            if client.as_ref().is_none_or(Client::is_closed) {
                client = match connect(config).await {
                    Ok(c) => Some(c),
                    Err(e) => {
                        answer_error(job, &e);
                        continue;
                    }
                };
            }
            let Some(c) = client.as_ref() else { continue };
            match job {
                Job::Put {
                    id,
                    media_type,
                    bytes,
                    reply,
                } => {
                    let done = c
                        .execute(
                            "INSERT INTO foya_attachments (id, media_type, bytes) \
                             VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING",
                            &[&id, &media_type, &bytes],
                        )
                        .await
                        .map(drop)
                        .map_err(|e| render(&e));
                    drop(reply.send(done));
                }
                Job::Get { id, reply } => {
                    let found = c
                        .query_opt(
                            "SELECT media_type, bytes FROM foya_attachments WHERE id = $1",
                            &[&id],
                        )
                        .await
                        .and_then(|row| {
                            row.map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
                                .transpose()
                        })
                        .map_err(|e| render(&e));
                    drop(reply.send(found));
                }
            }
        }
    });
}

fn answer_error(job: Job, e: &PgError) {
    let why = e.to_string();
    match job {
        Job::Put { reply, .. } => drop(reply.send(Err(why))),
        Job::Get { reply, .. } => drop(reply.send(Err(why))),
    }
}
