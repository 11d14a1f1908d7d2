//! Embeds the Foya runtime as a cluster node in another program.
//!
//! ```text
//! cargo run -p foya-actors --example embed_node -- [LISTEN] [COOKIE] [PEER HOST:PORT...]
//! ```
//!
//! Starts a node named `embedded` (default listen 127.0.0.1:0, a free port, cookie `demo`) with an
//! in-memory store and a scripted model, optionally dialling `foya node` peers, then
//! creates a session on the first peer (or on itself), submits one input and prints the
//! session's persisted events until the turn completes.

use foya_actors::cluster::{ClusterNode, NodeConfig};
use foya_actors::provider::scripted::{Script, ScriptedClient, ScriptedResponse};
use foya_actors::{Runtime, RuntimeConfig};
use foya_protocol::{EventKind, Input, InputId, Seq, SessionConfig, SessionUpdate};
use foya_storage::{Store, StoreOptions};
use std::sync::Arc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let listen = args
        .next()
        .unwrap_or_else(|| "127.0.0.1:0".into())
        .parse()?;
    let cookie = args.next().unwrap_or_else(|| "demo".into());
    let peers: Vec<String> = args.collect();

    let script = Script {
        responses: vec![ScriptedResponse {
            text: "Hello from an embedded Foya node.".into(),
            ..ScriptedResponse::default()
        }],
    };
    let store = Store::open_in_memory(StoreOptions::default())?;
    let mut config = RuntimeConfig::new(store, Arc::new(ScriptedClient::from_script(script)));
    // What a session created here without a provider or model records (`foya node`
    // records its --provider and model the same way).
    config.default_provider = "scripted".into();
    config.default_model = "scripted".into();
    let runtime = Runtime::start(config).await?;
    let node = ClusterNode::start(
        runtime,
        NodeConfig::new(listen, cookie, peers.clone(), "embedded"),
    )
    .await?;
    let client = node.client();
    client
        .wait_for_node("embedded", std::time::Duration::from_secs(10))
        .await?;

    // Place the session on the first peer that joined, else here.
    let target = if peers.is_empty() {
        None
    } else {
        let mut nodes = client.nodes();
        while nodes.len() < 2 {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            nodes = client.nodes();
        }
        nodes.into_iter().find(|n| n != "embedded")
    };
    let session = client
        .create_session(
            target.as_deref(),
            SessionConfig::new(std::env::current_dir()?),
        )
        .await?;
    let mut updates = client.subscribe(session, Seq::FIRST).await?;
    client
        .submit_with_id(session, InputId::new(), Input::text("hi"))
        .await?;
    while let Some(update) = updates.recv().await {
        if let SessionUpdate::Event(event) = update {
            println!("{} {}", event.seq.0, serde_json::to_string(&event.kind)?);
            if matches!(event.kind, EventKind::TurnComplete { .. }) {
                break;
            }
        }
    }
    for summary in client.list_sessions().await? {
        println!(
            "session {} on {}",
            summary.id,
            summary.node.unwrap_or_default()
        );
    }
    drop(updates);
    node.shutdown().await;
    Ok(())
}
