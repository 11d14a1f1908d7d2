//! Task ownership for actors.
//!
//! ractor does not run `post_stop` when an actor panics or is killed, so a task an actor
//! owns is held in an [`AbortOnDropHandle`] in the actor's state: dropping the state
//! aborts the task.

pub(crate) use tokio_util::task::AbortOnDropHandle;
