//! The lower-level embedding: a `Runtime` in your own program, with the simulated
//! model (no key, no server) and an in-memory store. Run it from the repository root
//! (the simulated model reads `README.md` in the session's working directory):
//!
//! ```text
//! cargo run -p foya-actors --example embed
//! ```
//!
//! Keep `main`'s body in step with the README's "Embed it" section.

use foya_actors::protocol::{Delta, EventKind, Input, Seq, SessionConfig, SessionUpdate};
use foya_actors::provider::sim::{SimClient, SimConfig};
use foya_actors::storage::{Store, StoreOptions};
use foya_actors::{Runtime, RuntimeConfig, SubscribeOptions};
use std::sync::Arc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let store = Store::open_in_memory(StoreOptions::default())?;
    let model = Arc::new(SimClient::new(SimConfig::default()));
    let runtime = Runtime::start(RuntimeConfig::new(store, model)).await?;
    let session = runtime
        .create_session(SessionConfig::new(std::env::current_dir()?))
        .await?;
    let mut updates = session
        .subscribe(Seq::FIRST, SubscribeOptions::default())
        .await?;
    session
        .submit(Input::text("What is in this project?"))
        .await?;
    while let Some(update) = updates.recv().await {
        match update {
            SessionUpdate::Delta(d) => {
                if let Delta::TextDelta { text } = d.delta {
                    print!("{text}")
                }
            }
            SessionUpdate::Event(e) if matches!(e.kind, EventKind::TurnComplete { .. }) => break,
            _ => {}
        }
    }
    runtime.shutdown().await;
    Ok(())
}
