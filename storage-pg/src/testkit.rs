//! A PostgreSQL for tests (feature `testkit`).
//!
//! [`server_url`] is the server tests use: `FOYA_TEST_PG` when it is set (CI's
//! `.ci/setup-postgres` sets it); under `CI=true` without it, a failure (never a skip);
//! otherwise a private cluster this process starts once from the installed PostgreSQL
//! binaries (`postgres` and `initdb` in `/usr/lib/postgresql/*/bin` or on `PATH`; as
//! root, run as the `postgres` user): a temporary directory, loopback, a free port,
//! fsync on. The cluster stops and its directory is removed when the test process exits,
//! however it exits (a shell beside the server waits for the end of a pipe this process
//! holds).
//!
//! [`fresh_url`] gives each test its own schema on that server (the URL sets
//! `search_path`), so tests run in parallel on one server.
#![allow(clippy::panic, clippy::expect_used)]

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::OnceCell;

/// A private cluster, alive while this process holds `_keepalive`.
struct Private {
    url: String,
    _keepalive: Mutex<ChildStdin>,
    _child: Mutex<Child>,
}

static PRIVATE: OnceCell<Result<Private, String>> = OnceCell::const_new();

/// The URL of the PostgreSQL server tests use (see the module docs).
///
/// # Panics
/// Under `CI=true` without `FOYA_TEST_PG`, or when no private cluster can be started
/// (the message says what to install).
pub async fn server_url() -> String {
    if let Ok(url) = std::env::var("FOYA_TEST_PG")
        && !url.is_empty()
    {
        return url;
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!(
            "FOYA_TEST_PG is not set: under CI=true the PostgreSQL tests need the server \
             .ci/setup-postgres starts (`.ci/run` sources it)"
        );
    }
    let private = PRIVATE
        .get_or_init(|| async {
            tokio::task::spawn_blocking(start_private)
                .await
                .map_err(|e| e.to_string())?
        })
        .await;
    match private {
        Ok(private) => private.url.clone(),
        Err(e) => panic!(
            "these tests need PostgreSQL: set FOYA_TEST_PG=postgresql://… or install Debian's \
             `postgresql` package (`bash .ci/setup-postgres --install`) so that the tests can \
             start a private cluster; starting one failed: {e}"
        ),
    }
}

/// A URL of [`server_url`]'s server whose connections use a schema of their own, created
/// empty for the caller.
///
/// # Panics
/// As [`server_url`], and when the schema cannot be created.
pub async fn fresh_url() -> String {
    let base = server_url().await;
    let schema = format!("foya_t_{}", uuid::Uuid::now_v7().simple());
    let (client, connection) = tokio_postgres::connect(&base, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {base}: {}", crate::render(&e)));
    let driver = tokio::spawn(connection);
    client
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .await
        .unwrap_or_else(|e| panic!("cannot create schema {schema}: {}", crate::render(&e)));
    drop(client);
    let _ = driver.await;
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}options=-c%20search_path%3D{schema}")
}

/// The directory holding `initdb` and `postgres`.
fn bin_dir() -> Result<PathBuf, String> {
    let mut candidates: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|dir| dir.flatten().map(|e| e.path().join("bin")).collect())
        .unwrap_or_default();
    // Newest version first.
    candidates.sort_by_key(|p| {
        std::cmp::Reverse(
            p.parent()
                .and_then(Path::file_name)
                .and_then(|n| n.to_str())
                .and_then(|n| n.parse::<u32>().ok())
                .unwrap_or(0),
        )
    });
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path));
    }
    candidates
        .into_iter()
        .find(|dir| dir.join("postgres").is_file() && dir.join("initdb").is_file())
        .ok_or_else(|| "no `postgres` and `initdb` found".to_owned())
}

/// `program`, run as the `postgres` user when this process is root (PostgreSQL refuses
/// to run as root).
fn command(program: &Path, as_postgres: bool) -> Command {
    if as_postgres {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

fn free_port() -> Result<u16, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(listener.local_addr().map_err(|e| e.to_string())?.port())
}

fn start_private() -> Result<Private, String> {
    let bin = bin_dir()?;
    let as_postgres = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    let mut last_error = String::new();
    // A port found free may be taken before the server binds it: a few tries.
    for _ in 0..3 {
        match try_start(&bin, as_postgres) {
            Ok(private) => return Ok(private),
            Err(e) => last_error = e,
        }
    }
    Err(last_error)
}

/// initdb into a fresh temporary directory and start the server on a free port.
fn try_start(bin: &Path, as_postgres: bool) -> Result<Private, String> {
    let dir = tempfile::Builder::new()
        .prefix("foya-test-pg-")
        .tempdir()
        .map_err(|e| e.to_string())?
        .keep();
    if as_postgres {
        let status = Command::new("chown")
            .arg("postgres:postgres")
            .arg(&dir)
            .status()
            .map_err(|e| format!("chown: {e}"))?;
        if !status.success() {
            return Err("cannot give the cluster's directory to the postgres user".into());
        }
    }
    let data = dir.join("data");
    let initdb = command(&bin.join("initdb"), as_postgres)
        .args([
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--no-sync",
            "-D",
        ])
        .arg(&data)
        .output()
        .map_err(|e| format!("initdb: {e}"))?;
    if !initdb.status.success() {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(format!(
            "initdb failed: {}",
            String::from_utf8_lossy(&initdb.stderr)
        ));
    }
    let port = free_port()?;
    let postgres = bin.join("postgres");
    let port_arg = port.to_string();
    // The shell (the `postgres` user's, when this process is root: then the server is its
    // own child and gets its signal) runs the server and stops it, then removes the
    // directory, when its stdin — a pipe this process holds until it exits — ends.
    let script = r#"dir=$1; shift; "$@" >"$dir/server.log" 2>&1 & pid=$!; read _ignored; kill -INT $pid; wait $pid; rm -rf "$dir""#;
    let mut shell = command(Path::new("sh"), as_postgres);
    shell
        .arg("-c")
        .arg(script)
        .arg("sh")
        .arg(&dir)
        .arg(&postgres)
        .arg("-D")
        .arg(&data)
        .args([
            "-p",
            &port_arg,
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "unix_socket_directories=",
            "-c",
            "fsync=on",
            "-c",
            "max_connections=300",
        ]);
    let mut child = shell
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start postgres: {e}"))?;
    let mut stdin = child.stdin.take().ok_or("no stdin pipe")?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ready = Command::new(bin.join("pg_isready"))
            .args(["-q", "-h", "127.0.0.1", "-p", &port_arg])
            .status()
            .is_ok_and(|s| s.success());
        if ready {
            return Ok(Private {
                url: format!("postgresql://postgres@127.0.0.1:{port}/postgres"),
                _keepalive: Mutex::new(stdin),
                _child: Mutex::new(child),
            });
        }
        if matches!(child.try_wait(), Ok(Some(_))) || Instant::now() > deadline {
            break;
        }
        // Polling the server until it accepts connections: it gives no other signal.
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
    // Ends the shell (and the server, if it runs); the shell removes the directory.
    let _ = stdin.write_all(b"\n");
    drop(stdin);
    let _ = child.wait();
    Err(format!("postgres did not start: {log}"))
}

/// A PostgreSQL server of one test's own (initdb into a temporary directory, `pg_ctl`,
/// loopback, a free port), which the test may stop, start and restart without
/// disturbing the others' server. Stopped and removed when dropped.
#[derive(Debug)]
pub struct OwnServer {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    as_postgres: bool,
}

impl OwnServer {
    /// Creates and starts the server.
    ///
    /// # Panics
    /// When PostgreSQL's binaries (with `pg_ctl`) are missing or the server does not
    /// start (the message says why).
    pub async fn start() -> OwnServer {
        let bin = bin_dir()
            .ok()
            .filter(|b| b.join("pg_ctl").is_file())
            .unwrap_or_else(|| {
                panic!(
                    "this test needs PostgreSQL's binaries (initdb, pg_ctl, postgres): install \
                     Debian's `postgresql` package (`bash .ci/setup-postgres --install`)"
                )
            });
        let as_postgres = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
        let dir = tempfile::Builder::new()
            .prefix("foya-test-own-pg-")
            .tempdir()
            .expect("a temporary directory")
            .keep();
        if as_postgres {
            let chown = Command::new("chown")
                .arg("postgres:postgres")
                .arg(&dir)
                .status()
                .expect("chown");
            assert!(chown.success(), "cannot give {} to postgres", dir.display());
        }
        let initdb = command(&bin.join("initdb"), as_postgres)
            .args([
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-sync",
                "-D",
            ])
            .arg(dir.join("data"))
            .output()
            .expect("initdb");
        assert!(
            initdb.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&initdb.stderr)
        );
        let server = OwnServer {
            bin,
            dir,
            port: free_port().expect("a free port"),
            as_postgres,
        };
        server.start_again().await;
        server
    }

    /// Its URL.
    #[must_use]
    pub fn url(&self) -> String {
        format!("postgresql://postgres@127.0.0.1:{}/postgres", self.port)
    }

    async fn pg_ctl(&self, args: &[&str]) {
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -c unix_socket_directories= -c fsync=off \
             -c max_connections=100",
            self.port
        );
        let mut command = if self.as_postgres {
            let mut c = tokio::process::Command::new("runuser");
            c.args(["-u", "postgres", "--"])
                .arg(self.bin.join("pg_ctl"));
            c
        } else {
            tokio::process::Command::new(self.bin.join("pg_ctl"))
        };
        let output = command
            .arg("-D")
            .arg(self.dir.join("data"))
            .arg("-l")
            .arg(self.dir.join("server.log"))
            .args(["-w", "-t", "60", "-o", &options])
            .args(args)
            .output()
            .await
            .expect("pg_ctl");
        assert!(
            output.status.success(),
            "pg_ctl {args:?} failed: {}{}",
            String::from_utf8_lossy(&output.stderr),
            std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
        );
    }

    /// Starts the (stopped) server again, on the same port and data.
    pub async fn start_again(&self) {
        self.pg_ctl(&["start"]).await;
    }

    /// Stops the server (fast: clients are disconnected).
    pub async fn stop(&self) {
        self.pg_ctl(&["-m", "fast", "stop"]).await;
    }

    /// Restarts the server (fast: clients are disconnected).
    pub async fn restart(&self) {
        self.pg_ctl(&["-m", "fast", "restart"]).await;
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        let _ = command(&self.bin.join("pg_ctl"), self.as_postgres)
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-m", "immediate", "-w", "stop"])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
