//! Peers a node or the CLI cannot reach: the CLI gives up on a peer that accepts the
//! connection and never completes the handshake after the 3 s connect timeout, and names
//! a peer that closes every connection before the handshake's challenge; a `foya
//! node` warns once per `--connect` peer it cannot reach (a closed port, a silent peer),
//! keeps running and redialling, and its data dir's lock names its listen address.

use super::{COOKIE, cli_run, free_port, parts};
use foya_tests::child::{data_dir_in_use, sessions_list};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt as _, BufReader};
use tokio::process::Command;

/// Runs `foya sessions list --cluster` against a local port whose every accepted
/// connection goes to `peer`; returns the port and the CLI's (exit code, stdout,
/// stderr).
async fn list_against<F, Fut>(peer: F) -> (u16, (Option<i32>, String, String))
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let bin = tokio::task::spawn_blocking(foya_tests::foya_bin)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cookie"), format!("{COOKIE}\n")).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepting = tokio::spawn(async move {
        let mut peers = tokio::task::JoinSet::new();
        loop {
            let (socket, _) = listener.accept().await.unwrap();
            peers.spawn(peer(socket));
        }
    });
    let run = cli_run(&bin, dir.path(), port, "cookie", false);
    let out = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the CLI did not give up");
    accepting.abort();
    (port, parts(&out))
}

/// What the CLI gives when the peer at the local `port` is refused for `why`: exit 1,
/// nothing on stdout, the reason on stderr.
fn refused(port: u16, why: &str) -> (Option<i32>, String, String) {
    let message = format!("foya: the peer at 127.0.0.1:{port} {why}\n");
    (Some(1), String::new(), message)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_gives_up_on_a_peer_that_never_completes_the_handshake() {
    // Accepts every connection and holds it silent. Far below the ~10 s this took
    // before: the dial is bounded by the 3 s timeout.
    let (port, outcome) = list_against(|socket| async move {
        let _held = socket;
        std::future::pending::<()>().await;
    })
    .await;
    let why = "accepted the connection but did not complete the cluster handshake within 3s";
    assert_eq!(outcome, refused(port, why));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_names_a_peer_that_closes_every_connection_in_the_handshake() {
    use tokio::io::AsyncWriteExt as _;
    // Answers every connection as an HTTP server (or a transparent proxy standing in for
    // an unreachable address) would, and closes it: no cluster node. Before, each
    // redial stayed "pending" and the CLI said only "not reachable" after its 5 s wait.
    let (port, outcome) = list_against(|mut socket| async move {
        let answer = b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n";
        let _ = socket.write_all(answer).await;
    })
    .await;
    let why = "accepted the connection but closed it before completing the cluster \
               handshake, on every dial for 3s (is it a foya node?)";
    assert_eq!(outcome, refused(port, why));
}

/// Reads `node`'s stderr until a line ending with `wanted`; returns every line read.
async fn stderr_until(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStderr>>,
    wanted: &str,
) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        let line = lines.next_line().await.unwrap();
        let line = line.unwrap_or_else(|| panic!("stderr ended without {wanted:?}: {seen:#?}"));
        let found = line.ends_with(wanted);
        seen.push(line);
        if found {
            return seen;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_warns_once_per_peer_it_cannot_reach_and_its_lock_names_its_address() {
    let bin = tokio::task::spawn_blocking(foya_tests::foya_bin)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(90), unreachable_peers(bin))
        .await
        .expect("the scenario timed out");
}

/// Node `c` dials a closed port and a peer that accepts and stays silent.
async fn unreachable_peers(bin: PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cookie"), format!("{COOKIE}\n")).unwrap();
    std::fs::write(dir.path().join("script.json"), r#"{"responses": []}"#).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent = listener.local_addr().unwrap().port();
    let (accepted, mut accepts) = tokio::sync::mpsc::unbounded_channel();
    let holder = tokio::spawn(async move {
        loop {
            let _ = accepted.send(listener.accept().await.unwrap().0);
        }
    });
    let (port, down) = (free_port(), free_port());
    let data = dir.path().join("data-c");
    let mut c = Command::new(&bin)
        .args([
            "node",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--name",
            "c",
        ])
        .args(["--connect", &format!("127.0.0.1:{down}")])
        .args(["--connect", &format!("127.0.0.1:{silent}"), "--cookie-file"])
        .arg(dir.path().join("cookie"))
        .args(["--provider", "scripted", "--script"])
        .arg(dir.path().join("script.json"))
        .arg("--data-dir")
        .arg(&data)
        .current_dir(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(c.stdout.take().unwrap()).lines();
    let line = stdout.next_line().await.unwrap().expect("node c exited");
    assert_eq!(line, format!("foya node c listening on 127.0.0.1:{port}"));

    // A warning naming the closed port and why; the node keeps running.
    let mut stderr = BufReader::new(c.stderr.take().unwrap()).lines();
    let refused = format!(
        "peer 127.0.0.1:{down} is unreachable: Connection refused (os error 111); retrying \
         with backoff"
    );
    let mut logged = stderr_until(&mut stderr, &refused).await;
    assert!(
        c.try_wait().unwrap().is_none(),
        "node c exited: {logged:#?}"
    );

    // The data dir is locked by the node: `sessions list` names its address.
    let pid = c.id().unwrap();
    let in_use = data_dir_in_use(
        &data,
        &format!("foya node (pid {pid}, listening on 127.0.0.1:{port})"),
        "node",
        &format!("foya sessions list --cluster 127.0.0.1:{port} --cookie-file FILE"),
    );
    assert_eq!(sessions_list(&data).await, (Some(1), String::new(), in_use));

    // The silent peer: given up after the connect timeout (its socket closed), reported,
    // and dialled again.
    let mut first = accepts.recv().await.unwrap();
    let silent_warning = format!(
        "peer 127.0.0.1:{silent} is unreachable: it accepted the connection but did not \
         complete the cluster handshake within 3s; retrying with backoff"
    );
    logged.extend(stderr_until(&mut stderr, &silent_warning).await);
    let mut sent = Vec::new();
    let ended = first.read_to_end(&mut sent).await;
    assert!(ended.is_ok(), "{ended:?}");
    let _second = accepts.recv().await.unwrap();
    holder.abort();

    // Both peers were reported once, without the cookie; SIGTERM ends the node cleanly.
    let nix_pid = nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap());
    nix::sys::signal::kill(nix_pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    while let Some(line) = stderr.next_line().await.unwrap() {
        logged.push(line);
    }
    assert_eq!(c.wait().await.unwrap().code(), Some(0), "{logged:#?}");
    let warnings: Vec<&str> = logged
        .iter()
        .filter(|l| l.contains("unreachable"))
        .map(|l| l.split_once("peer ").map_or(l.as_str(), |(_, m)| m))
        .collect();
    assert_eq!(
        warnings,
        [
            refused.trim_start_matches("peer "),
            silent_warning.trim_start_matches("peer ")
        ],
        "{logged:#?}"
    );
    assert!(!logged.iter().any(|l| l.contains(COOKIE)), "{logged:#?}");
    // stderr is a pipe here: plain text, no terminal colour codes.
    assert!(!logged.iter().any(|l| l.contains('\u{1b}')), "{logged:#?}");
}
