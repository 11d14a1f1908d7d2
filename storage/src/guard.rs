//! The panic boundary around redb. redb trusts the bytes of its file: a damaged page can
//! make it panic (`unreachable!`, an index out of bounds, a failed assertion) instead of
//! returning an error. Every redb call of this crate that reads stored pages runs inside
//! [`contain`], which turns such a panic into a message the caller reports as
//! [`crate::ReadError::Corrupt`] or [`crate::OpenError::Corrupt`]; a panic never leaves
//! the crate. The caller then stops using the database handle that panicked (its
//! internal state may be half-updated) and opens the file again.
//!
//! A contained panic is not printed: the process's panic hook is wrapped once (the
//! previous hook still runs for every other panic), and while [`contain`] runs on a
//! thread, a panic of that thread is recorded at `debug` level instead of printed.

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Once;

thread_local! {
    /// How many [`contain`] calls are running on this thread (they may nest).
    static CONTAINING: Cell<u32> = const { Cell::new(0) };
}

static INSTALL_HOOK: Once = Once::new();

/// Wraps the process's panic hook so that a panic contained by [`contain`] is not
/// printed (every other panic goes to the previous hook, unchanged).
fn install_quiet_hook() {
    INSTALL_HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if CONTAINING.with(Cell::get) > 0 {
                tracing::debug!(panic = %info, "contained a panic inside the database library");
            } else {
                previous(info);
            }
        }));
    });
}

/// Restores the thread's nesting count when a [`contain`] ends, even by unwinding.
struct Depth;

impl Depth {
    fn enter() -> Self {
        CONTAINING.with(|c| c.set(c.get().saturating_add(1)));
        Depth
    }
}

impl Drop for Depth {
    fn drop(&mut self) {
        CONTAINING.with(|c| c.set(c.get().saturating_sub(1)));
    }
}

/// Runs `f`, turning a panic inside it into `Err(message)`: `"<what>: the database
/// library panicked on damaged data (<panic message>)"`.
///
/// # Errors
/// The panic's message, when `f` panicked.
pub(crate) fn contain<T>(what: &str, f: impl FnOnce() -> T) -> Result<T, String> {
    install_quiet_hook();
    let depth = Depth::enter();
    let outcome = catch_unwind(AssertUnwindSafe(f));
    drop(depth);
    outcome.map_err(|payload| {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".to_owned());
        format!("{what}: the database library panicked on damaged data ({message})")
    })
}

/// Drops `value` (a database handle that panicked), containing a panic of its drop.
pub(crate) fn drop_contained<T>(value: T) {
    if let Err(message) = contain("closing a damaged database", move || drop(value)) {
        tracing::debug!(%message, "dropping a damaged database panicked");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::panic, clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_panic_becomes_a_message_and_the_depth_is_restored() {
        let err = contain("reading x", || -> u8 { panic!("boom {}", 1) }).unwrap_err();
        assert_eq!(
            err,
            "reading x: the database library panicked on damaged data (boom 1)"
        );
        assert_eq!(CONTAINING.with(Cell::get), 0);
        assert_eq!(contain("reading y", || 7).unwrap(), 7);
        let err = contain("z", || -> u8 { unreachable!() }).unwrap_err();
        assert!(err.contains("entered unreachable code"), "{err}");
    }
}
