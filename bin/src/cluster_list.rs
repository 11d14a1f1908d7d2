//! `foya sessions list --cluster HOST:PORT --cookie-file FILE`: joins the cluster as a
//! client-only member (no runtime, no gateway), asks that node's gateway for the
//! sessions of every node it sees, and prints them with the node each lives on.

use crate::cli::{EXIT_FAILED, EXIT_OK, EXIT_USAGE};
use foya_actors::cluster::{ClientNode, NodeConfig};
use foya_protocol::SessionSummary;
use std::path::Path;
use std::time::Duration;

/// How long to wait for the node to answer its first heartbeat.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Lists the cluster's sessions through the node at `addr`; returns the exit status.
pub(crate) async fn list(addr: &str, cookie_file: &Path, json: bool) -> u8 {
    let Some(cookie) = crate::node::read_cookie(cookie_file) else {
        return EXIT_USAGE;
    };
    let Ok(listen) = "127.0.0.1:0".parse() else {
        return EXIT_FAILED;
    };
    let name = format!("foya-cli-{}", std::process::id());
    let mut config = NodeConfig::new(listen, cookie, vec![addr.to_owned()], name);
    config.heartbeat = Duration::from_millis(50);
    let member = match ClientNode::connect(config).await {
        Ok(member) => member,
        Err(e) => {
            eprintln!("foya: {e}");
            return EXIT_FAILED;
        }
    };
    let result = match member.wait_connected(CONNECT_TIMEOUT).await {
        Ok(nodes) => {
            // Isolated connection mode: the only node seen is the one dialled.
            let node = nodes.first().cloned().unwrap_or_default();
            member.client().list_sessions_through(&node).await
        }
        Err(e) => Err(e),
    };
    member.shutdown().await;
    match result {
        Ok(sessions) => match print(&sessions, json) {
            Ok(()) => EXIT_OK,
            Err(e) => {
                eprintln!("foya: {e}");
                EXIT_FAILED
            }
        },
        Err(e) => {
            eprintln!("foya: {e}");
            EXIT_FAILED
        }
    }
}

/// One JSON object per line (`SessionSummary` with `node`), or a table.
fn print(sessions: &[SessionSummary], json: bool) -> anyhow::Result<()> {
    if json {
        for s in sessions {
            println!("{}", serde_json::to_string(s)?);
        }
        return Ok(());
    }
    let width = sessions
        .iter()
        .filter_map(|s| s.node.as_deref())
        .map(str::len)
        .max()
        .unwrap_or(0)
        .max("NODE".len());
    println!(
        "{:<width$}  {:<36}  {:>6}  CWD  TITLE",
        "NODE", "SESSION", "EVENTS"
    );
    for s in sessions {
        let title = s.title.as_deref().unwrap_or("(untitled)");
        let deleted = if s.deleted { " [deleted]" } else { "" };
        println!(
            "{:<width$}  {:<36}  {:>6}  {}  {title}{deleted}",
            s.node.as_deref().unwrap_or("?"),
            s.id.to_string(),
            s.last_seq.0,
            s.cwd.display(),
        );
    }
    Ok(())
}
