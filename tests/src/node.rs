//! A real `foya node` on a PostgreSQL store serving its HTTP API (`--http`), as the
//! multi-node tests start it: its own folder (cookie, data, whatever the test gives it),
//! a free cluster port, the HTTP API on a port of its choosing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::missing_panics_doc)]

use crate::foya_bin::{foya_bin, test_home};
use std::path::{Path, PathBuf};
use tokio::io::AsyncBufReadExt as _;

/// The cluster cookie every node of a test shares.
const COOKIE: &str = "test-cookie\n";

/// A running `foya node` (killed when dropped).
#[derive(Debug)]
pub struct Node {
    /// Its process (a test may signal or kill it).
    pub child: tokio::process::Child,
    /// Its HTTP API's base URL (`http://127.0.0.1:PORT`).
    pub base: String,
}

/// The folder of node `name` in `dir` (created): its cookie and data, and the files a
/// test hands it (a token, a script).
pub fn node_dir(dir: &Path, name: &str) -> PathBuf {
    let own = dir.join(name);
    std::fs::create_dir_all(&own).unwrap();
    own
}

/// `foya node --name NAME --listen 127.0.0.1:PORT --http HTTP --store STORE` in `dir`, a
/// free `PORT`, its cookie and data in [`node_dir`], `HOME` the tests' own and none of the
/// test's `FOYA_DATA_DIR`, `FOYA_STORE_URL` and `OTEL_EXPORTER_OTLP_ENDPOINT`; the caller
/// adds the rest and runs it ([`Node::spawn`], or `output()` for a node that must refuse).
pub fn command(name: &str, store: &str, dir: &Path, http: &str) -> tokio::process::Command {
    let own = node_dir(dir, name);
    std::fs::write(own.join("cookie"), COOKIE).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut command = tokio::process::Command::new(foya_bin());
    command
        .args(["node", "--name", name, "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .args(["--http", http, "--store", store])
        .arg("--cookie-file")
        .arg(own.join("cookie"))
        .arg("--data-dir")
        .arg(own.join("data"))
        .current_dir(dir)
        .env("HOME", test_home())
        .env_remove("FOYA_DATA_DIR")
        .env_remove("FOYA_STORE_URL")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT");
    command
}

impl Node {
    /// Starts [`command`] with `--http 127.0.0.1:0`; `configure` adds the rest (the
    /// provider, a token file…). See [`Node::spawn`].
    pub async fn start(
        name: &str,
        store: &str,
        dir: &Path,
        configure: impl FnOnce(&mut tokio::process::Command),
    ) -> Self {
        let mut command = command(name, store, dir, "127.0.0.1:0");
        configure(&mut command);
        Self::spawn(command).await
    }

    /// Runs a node's `command`; returns once the node printed its HTTP address and then
    /// its listening line, which it does once it holds the shards placement gives it. Its
    /// output is read on (a full pipe would stall it).
    pub async fn spawn(mut command: tokio::process::Command) -> Self {
        let mut child = command
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut stderr = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let base = loop {
            let line = stderr.next_line().await.unwrap().expect("the node exited");
            if let Some(url) = line.strip_prefix("foya node: HTTP API at ") {
                break url.to_owned();
            }
        };
        tokio::spawn(async move { while let Ok(Some(_)) = stderr.next_line().await {} });
        let mut stdout = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let listening = stdout.next_line().await.unwrap().expect("the node exited");
        assert!(listening.contains("listening on"), "{listening}");
        tokio::spawn(async move { while let Ok(Some(_)) = stdout.next_line().await {} });
        Self { child, base }
    }
}
