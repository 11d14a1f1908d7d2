//! `foya sessions list --cluster HOST:PORT --cookie-file FILE`: joins the cluster as a
//! client-only member (no runtime, no gateway), asks that node's gateway for the
//! sessions of every node it sees, and prints them with the node each lives on.
//!
//! Failures are quick and named: a refused connection at once, a silent address after
//! a 3 s connect timeout, a wrong cookie as soon as the node closes the handshake, a
//! peer that accepts the connection but never completes the handshake 3 s after the
//! dial (the same connect timeout bounds the whole dial), a peer that accepts and closes
//! every connection before the handshake (an HTTP server, a proxy answering for an
//! address it cannot reach) 3 s after the first dial. When
//! some nodes of the cluster did not answer, the others' sessions are printed, the
//! missing nodes are named (a `foya: warning:` line on stderr; with `--json` a last
//! line `{"unreachable": [...]}`) and the command ends [`Ended::Partial`] (exit status 3).

use crate::exit::{CommandError, Ended, failed};
use foya_actors::cluster::{ClientNode, ClusterListing, NodeConfig};
use std::path::Path;
use std::time::Duration;

/// How long to wait for the node's gateway once its handshake is done (its first
/// heartbeat answer); the dial itself, handshake included, is bounded by
/// `NodeConfig::connect_timeout` (3 s) and fails with its own error.
const GATEWAY_GRACE: Duration = Duration::from_secs(2);

/// Lists the cluster's sessions through the node at `addr`.
pub(crate) async fn list(addr: &str, cookie_file: &Path, json: bool) -> Result<(), CommandError> {
    let Some(cookie) = crate::node::read_cookie(cookie_file) else {
        return Err(Ended::Usage.into());
    };
    let listen = "127.0.0.1:0"
        .parse()
        .map_err(|e| failed(format!("127.0.0.1:0: {e}")))?;
    let name = format!("foya-cli-{}", std::process::id());
    let mut config = NodeConfig::new(listen, cookie, vec![addr.to_owned()], name);
    config.heartbeat = Duration::from_millis(50);
    let patience = config.connect_timeout + GATEWAY_GRACE;
    let member = match ClientNode::connect(config).await {
        Ok(member) => member,
        Err(e) => return Err(failed(e)),
    };
    let result = match member.wait_connected(patience).await {
        Ok(nodes) => {
            // Isolated connection mode: the only node seen is the one dialled.
            let node = nodes.first().cloned().unwrap_or_default();
            member.client().list_sessions_through(&node).await
        }
        Err(e) => Err(e),
    };
    member.shutdown().await;
    match result {
        Ok(listing) => match print(&listing, json) {
            Ok(()) if listing.is_complete() => Ok(()),
            Ok(()) => {
                eprintln!(
                    "foya: warning: incomplete list, no answer from node(s): {}",
                    listing.unreachable.join(", ")
                );
                Err(Ended::Partial.into())
            }
            Err(e) => Err(failed(e)),
        },
        Err(e) => Err(failed(e)),
    }
}

/// One JSON object per line (`SessionSummary` with `node`, then `{"unreachable":
/// [...]}` when some nodes did not answer), or a table.
fn print(listing: &ClusterListing, json: bool) -> anyhow::Result<()> {
    let sessions = &listing.sessions;
    if json {
        for s in sessions {
            println!("{}", serde_json::to_string(s)?);
        }
        if !listing.is_complete() {
            let unreachable = serde_json::json!({ "unreachable": listing.unreachable });
            println!("{unreachable}");
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
