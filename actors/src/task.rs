//! Task ownership for actors.
//!
//! ractor does not run `post_stop` when an actor panics or is killed, so a task an actor
//! owns is held in an [`AbortOnDropHandle`] in the actor's state: dropping the state
//! aborts the task.

use tokio::task::JoinHandle;
pub(crate) use tokio_util::task::AbortOnDropHandle;

/// An owned task with no result, as the actors hold it.
pub(crate) type AbortOnDrop = AbortOnDropHandle<()>;

/// `task` owned: aborted when the returned handle is dropped.
///
/// Transitional spelling of [`AbortOnDropHandle::new`] for the ProviderActor
/// (`provider/actor.rs`, which moves under the turn in the same change): remove it once
/// that file says `AbortOnDropHandle::new`.
#[expect(non_snake_case, reason = "the old tuple-struct constructor's spelling")]
pub(crate) fn AbortOnDrop(task: JoinHandle<()>) -> AbortOnDrop {
    AbortOnDropHandle::new(task)
}
