//! Two cluster nodes in one process, on loopback: a session is created on node `a`, then
//! driven and observed from node `b` through the same API as a local session
//! ([`SessionApi`]). The model is the simulator (no key, no network): each turn reads
//! the session's `README.md` with a tool, then answers.
//!
//! ```text
//! cargo run -p foya-actors --example cluster
//! ```

use foya_actors::cluster::{ClusterNode, NodeConfig};
use foya_actors::provider::sim::{SimClient, SimConfig};
use foya_actors::{Runtime, RuntimeConfig, RuntimeError, SessionApi, SubscribeOptions};
use foya_protocol::{Input, Seq, SessionConfig, SessionUpdate};
use foya_storage::{Store, StoreOptions};
use futures::StreamExt;
use std::sync::Arc;
use std::time::Duration;

/// One node on a free loopback port, with an in-memory store and the simulated model.
async fn start_node(name: &str, peers: Vec<String>) -> anyhow::Result<ClusterNode> {
    let store = Store::open_in_memory(StoreOptions::default())?;
    let model = Arc::new(SimClient::new(SimConfig::default()));
    let runtime = Runtime::start(RuntimeConfig::new(store, model)).await?;
    // Port 0 is resolved before the node starts: `listen_addr` is dialable.
    let config = NodeConfig::new("127.0.0.1:0".parse()?, "demo-cookie", peers, name);
    Ok(ClusterNode::start(runtime, config).await?)
}

/// Works the same on a `SessionHandle` (local) and a `RemoteSession` (another node).
async fn ask<S: SessionApi>(session: &S, question: &str) -> Result<String, RuntimeError> {
    let mut updates = session
        .subscribe(Seq::FIRST, SubscribeOptions::default())
        .await?;
    let outcome = session.run(Input::text(question)).await?;
    // The subscriber saw every event of the turn, up to its `turn_complete`.
    while let Some(update) = updates.next().await {
        if let SessionUpdate::Event(event) = update {
            println!("{:>3} {}", event.seq.0, event.kind.type_name());
            if event.seq == *outcome.seqs.end() {
                break;
            }
        }
    }
    println!(
        "{:?} after {} tool call(s)",
        outcome.status,
        outcome.tool_calls.len()
    );
    Ok(outcome.text)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let workspace = tempfile::tempdir()?;
    std::fs::write(workspace.path().join("README.md"), "# Demo\nTwo nodes.\n")?;

    let a = start_node("a", Vec::new()).await?;
    let b = start_node("b", vec![a.listen_addr().to_string()]).await?;
    let from_b = b.client();
    from_b.wait_for_node("a", Duration::from_secs(10)).await?;

    // The session lives on `a`…
    let local = a
        .runtime()
        .create_session(SessionConfig::new(workspace.path()))
        .await?;
    // …and `b` drives it with the same calls.
    let remote = from_b.session(local.id());
    let answer = ask(&remote, "What is in this project?").await?;
    anyhow::ensure!(!answer.is_empty(), "no answer");
    println!("answer from node a, read on node b: {answer}");

    remote.delete().await?;
    match remote.submit(Input::text("again")).await {
        Err(RuntimeError::SessionDeleted(id)) => println!("session {id} was deleted"),
        other => anyhow::bail!("expected SessionDeleted, got {other:?}"),
    }
    b.shutdown().await;
    a.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn drives_a_session_on_another_node() -> anyhow::Result<()> {
        super::main()
    }
}
