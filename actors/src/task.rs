//! Task ownership helpers for actors.
//!
//! ractor does not run `post_stop` when an actor panics or is killed, so a task an actor
//! owns is held in an [`AbortOnDrop`]: dropping the actor's state aborts the task.

use tokio::task::JoinHandle;

/// A tokio task aborted when this guard is dropped.
#[derive(Debug)]
pub(crate) struct AbortOnDrop(pub JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
