//! A long-lived service: one session, a subscriber printing what it commits and
//! streams, and a cancel of a turn that takes too long. The model is scripted.
//!
//! ```text
//! cargo run -p foya-actors --example service
//! ```

use foya_actors::protocol::{EventKind, Input, Seq, SessionUpdate, TurnStatus};
use foya_actors::provider::scripted::ScriptedClient;
use foya_actors::{Agent, SubscribeOptions};
use std::sync::Arc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let model = Arc::new(ScriptedClient::from_script(serde_json::from_value(
        serde_json::json!({
            "responses": [
                {"text": "Quick answer."},
                {"text": "A slow answer that never arrives in time", "delay_ms": 60000}
            ]
        }),
    )?));
    let agent = Agent::builder(model)
        .instructions("You are a helpful service.")
        .start(foya_actors::storage::Store::open_in_memory(
            Default::default(),
        )?)
        .await?;
    let session = agent.session(std::env::temp_dir()).await?;

    // The subscriber: every committed event from the start, plus live deltas.
    let mut updates = session
        .subscribe(Seq::FIRST, SubscribeOptions::default())
        .await?;
    let printer = tokio::spawn(async move {
        let mut ends = Vec::new();
        while let Some(update) = updates.recv().await {
            if let SessionUpdate::Event(event) = update {
                println!("{:>3} {}", event.seq.0, event.kind.type_name());
                if let EventKind::TurnComplete { status, .. } = event.kind {
                    ends.push(status);
                    if ends.len() == 2 {
                        break;
                    }
                }
            }
        }
        ends
    });

    let first = session.run(Input::text("Something quick")).await?;
    println!("answer: {}", first.text);
    let mut slow = session.run_streamed(Input::text("Something slow")).await?;
    session.cancel().await?;
    let second = slow.outcome().await?;
    let ends = printer.await?;
    anyhow::ensure!(
        ends == [TurnStatus::Completed, TurnStatus::Cancelled],
        "{ends:?}"
    );
    anyhow::ensure!(second.status == TurnStatus::Cancelled, "{second:?}");
    agent.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn subscribes_and_cancels() -> anyhow::Result<()> {
        super::main()
    }
}
