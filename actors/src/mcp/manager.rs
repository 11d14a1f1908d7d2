//! The runtime's MCP servers: one `Server` per configured server, shared by every
//! session; the tools a session sees; the report of `foya mcp list`; shutdown.
//!
//! Owns: which servers a session uses (its `SessionConfig::mcp_servers`, else every
//! server not configured `enabled = false`), the names of their tools (each server's
//! prefix from the configured names alone, `names.rs`; a name once given keeps its tool
//! for the runtime's life), and what a step offers of a server that cannot be listed now
//! (the tools it listed last, if any; else nothing, and a call of a name under its prefix
//! fails naming the server and why; its error is returned for the log). Must not: hold a server's lock across another server's work.

use super::config::McpConfig;
use super::names;
use super::server::{Server, ServerState};
use super::tool::McpTool;
use crate::tools::Tool;
use crate::tools::sandbox::SandboxRunner;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The MCP servers of a runtime.
#[derive(Debug, Default)]
pub struct McpManager {
    servers: BTreeMap<String, Arc<Server>>,
}

/// The tools of the servers a session uses, for one step.
#[derive(Debug, Clone, Default)]
pub(crate) struct McpTools {
    /// The tools, server by server in name order, each server's in its listing order.
    pub(crate) tools: Vec<Arc<dyn Tool>>,
    /// Why a server's tools are missing (it could not be started or listed).
    pub(crate) errors: Vec<String>,
    /// The servers that have no tools to offer now (never listed, and failing): the
    /// start of their tools' names and, for the model, why a call of one fails.
    pub(crate) unavailable: Vec<(String, String)>,
    /// Identifies the listings these tools come from: equal keys, equal tools.
    pub(crate) key: ListingKey,
}

/// Which listing of each server a set of tools was built from. It holds the listings
/// it names, so while a key is kept no newer listing can take a compared listing's
/// address (comparing bare addresses of dropped listings could mistake a new list for
/// the old one and keep offering stale tools).
#[derive(Debug, Clone, Default)]
pub(crate) struct ListingKey(Vec<Option<Arc<Vec<rmcp::model::Tool>>>>);

impl PartialEq for ListingKey {
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len()
            && self.0.iter().zip(&other.0).all(|pair| match pair {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            })
    }
}

/// One server in `foya mcp list`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerReport {
    /// Its name.
    pub name: String,
    /// `stdio: <command> <args>` or `http: <url>`.
    pub transport: String,
    /// Its state after the listing.
    pub state: ServerState,
    /// Its tools as the model sees them (`mcp__…` name, the server's name).
    pub tools: Vec<(String, String)>,
}

impl McpManager {
    /// The servers of `config`; stdio servers start through `runner`'s helper (their
    /// own process group, killed when Foya dies). Nothing starts yet.
    #[must_use]
    pub fn new(config: McpConfig, runner: &SandboxRunner) -> Self {
        let prefixes = names::prefixes(config.servers.keys().map(String::as_str));
        let servers = config
            .servers
            .into_iter()
            .map(|(name, server)| {
                let prefix = prefixes
                    .get(&name)
                    .cloned()
                    .unwrap_or_else(|| format!("mcp__{name}__"));
                let value = Arc::new(Server::new(name.clone(), prefix, server, runner.clone()));
                (name, value)
            })
            .collect();
        Self { servers }
    }

    /// The configured server names.
    #[must_use]
    pub fn names(&self) -> Vec<String> {
        self.servers.keys().cloned().collect()
    }

    /// Each configured server's state now, in name order, as the runtime keeps it:
    /// reading it starts nothing (a stdio server not used yet is
    /// [`ServerState::NotStarted`]).
    #[must_use]
    pub fn states(&self) -> Vec<(String, ServerState)> {
        self.servers
            .iter()
            .map(|(name, server)| (name.clone(), server.state()))
            .collect()
    }

    /// Whether no server is configured.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// The servers a session uses: `selected` when given (unknown names are skipped),
    /// else every server whose `enabled` is not false.
    fn selected<'a>(&'a self, selected: Option<&'a [String]>) -> Vec<&'a Arc<Server>> {
        match selected {
            Some(names) => names.iter().filter_map(|n| self.servers.get(n)).collect(),
            None => self
                .servers
                .values()
                .filter(|s| s.config.enabled != Some(false))
                .collect(),
        }
    }

    /// The tools of the servers a session uses (`selected`, see above), starting them
    /// as needed and listing again those that sent `tools/list_changed`.
    pub(crate) async fn tools(&self, selected: Option<&[String]>, reserved: &[String]) -> McpTools {
        let servers = self.selected(selected);
        let listings =
            futures::future::join_all(servers.iter().map(|s| async move { s.tools().await })).await;
        let mut out = McpTools::default();
        let mut taken: BTreeSet<String> = BTreeSet::new();
        for (server, listing) in servers.into_iter().zip(listings) {
            // A server that fails now keeps the tools it listed last: their calls fail
            // with why (or find it restarted).
            let listed = match listing {
                Ok(listed) => listed,
                Err(error) => {
                    let last = server.last_listed();
                    if last.is_none() {
                        out.unavailable.push((
                            server.prefix.clone(),
                            format!(
                                "is a tool of MCP server `{}`, which is not available now \
                                 (it is started again on a later step): {error}",
                                server.name
                            ),
                        ));
                    }
                    out.errors.push(error);
                    match last {
                        Some(listed) => listed,
                        None => {
                            out.key.0.push(None);
                            continue;
                        }
                    }
                }
            };
            out.key.0.push(Some(Arc::clone(&listed)));
            for tool in listed.iter().filter(|t| server.config.offers(&t.name)) {
                // Names never move between tools; two tools under one name (only by a
                // hash collision across servers) leave the second out.
                let name = server.tool_name(&tool.name, reserved);
                if !taken.insert(name.clone()) {
                    out.errors.push(format!(
                        "MCP server `{}`: its tool `{}` is left out: its name `{name}` is \
                         another tool's",
                        server.name, tool.name
                    ));
                    continue;
                }
                out.tools
                    .push(Arc::new(McpTool::new(Arc::clone(server), tool, name)));
            }
        }
        out
    }

    /// Starts every configured server (all of them, enabled or not) and reports its
    /// state and tools.
    pub async fn report(&self) -> Vec<ServerReport> {
        let mut reports = Vec::new();
        for server in self.servers.values() {
            let listed = self
                .tools(Some(std::slice::from_ref(&server.name)), &[])
                .await;
            let tools = listed
                .tools
                .iter()
                .map(|t| {
                    let own = t.spec().description.clone();
                    (t.spec().name.clone(), own)
                })
                .collect();
            let config = &server.config;
            let transport = match (&config.command, &config.url) {
                (Some(command), _) => {
                    let mut line = format!("stdio: {command}");
                    for arg in &config.args {
                        line.push(' ');
                        line.push_str(arg);
                    }
                    line
                }
                (None, Some(url)) => format!("http: {}", crate::provider::redact::display_url(url)),
                (None, None) => String::new(),
            };
            reports.push(ServerReport {
                name: server.name.clone(),
                transport,
                state: server.state(),
                tools,
            });
        }
        reports
    }

    /// Stops every server (stdio servers: stdin closed, 2 s to exit, then their process
    /// group is killed).
    pub async fn shutdown(&self) {
        futures::future::join_all(self.servers.values().map(|s| s.shutdown())).await;
    }
}

#[cfg(test)]
mod tests {
    use super::ListingKey;
    use std::sync::Arc;

    #[test]
    fn a_listing_key_names_listings_not_their_contents() {
        let first = Arc::new(Vec::new());
        let kept = ListingKey(vec![Some(Arc::clone(&first)), None]);
        assert_eq!(kept, ListingKey(vec![Some(Arc::clone(&first)), None]));
        // A new listing with the same tools is another listing: the step rebuilds.
        let second = Arc::new(Vec::new());
        assert_ne!(kept, ListingKey(vec![Some(second), None]));
        // A server that could not be listed differs from one that was.
        assert_ne!(
            kept,
            ListingKey(vec![Some(first), Some(Arc::new(Vec::new()))])
        );
        assert_ne!(kept, ListingKey(vec![None, None]));
    }

    #[test]
    fn a_kept_key_keeps_its_listing_alive() {
        let listing = Arc::new(Vec::new());
        let kept = ListingKey(vec![Some(Arc::clone(&listing))]);
        drop(listing);
        // The server dropped its copy; the key still holds it, so no newer listing can
        // be allocated at its address and compare equal.
        let Some(Some(held)) = kept.0.first() else {
            panic!("the key holds its listing");
        };
        assert_eq!(Arc::strong_count(held), 1);
    }
}
