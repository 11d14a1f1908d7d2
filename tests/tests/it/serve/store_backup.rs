//! `foya store backup` while `foya serve` holds the data dir: the server takes the copy
//! (`POST /store/backup`, one read transaction) and goes on serving; the file opens as a
//! store holding the sessions committed before it; without the server's token the
//! command fails (exit 1) naming the 401 and `--token-file`.

use super::{start, within};
use foya_tests::child::outcome;
use foya_tests::foya_bin::foya_bin;
use foya_tests::mock_provider::MockProvider;
use reqwest::{Method, StatusCode};
use std::collections::BTreeSet;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_is_taken_while_the_server_serves() {
    within(backup()).await;
}

async fn backup() {
    let dir = tempfile::tempdir().unwrap();
    let provider = MockProvider::start().await;
    let server = start(&provider, dir.path()).await;
    let s = &server;
    let mut ids = BTreeSet::new();
    for _ in 0..3 {
        let created = s
            .call(
                s.req(Method::POST, "/sessions"),
                StatusCode::CREATED,
                Some("SessionCreated"),
            )
            .await;
        ids.insert(created["id"].as_str().unwrap().to_owned());
    }
    let direct = s
        .call(
            s.req(Method::POST, "/store/backup"),
            StatusCode::CREATED,
            Some("StoreBackup"),
        )
        .await;
    assert_eq!(
        (direct["sessions"].as_u64(), direct["events"].as_u64()),
        (Some(3), Some(3))
    );

    let backup_dir = dir.path().join("backup");
    std::fs::create_dir_all(&backup_dir).unwrap();
    let to = backup_dir.join("foya.redb");
    let cli = |token: bool| {
        let mut command = tokio::process::Command::new(foya_bin());
        command
            .args(["store", "backup", "--data-dir"])
            .arg(dir.path().join("data"))
            .arg("--to")
            .arg(&to)
            .env_remove("FOYA_DATA_DIR");
        if token {
            command.arg("--token-file").arg(dir.path().join("token"));
        }
        command
    };
    let (code, _, stderr) = outcome(&cli(false).output().await.unwrap());
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("401") && stderr.contains("--token-file"),
        "{stderr}"
    );
    assert!(!to.exists());
    let (code, _, stderr) = outcome(&cli(true).output().await.unwrap());
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("backed up 3 sessions (3 events)")
            && stderr.contains("taken by the server"),
        "{stderr}"
    );
    // The server goes on serving.
    s.call(
        s.req(Method::POST, "/sessions"),
        StatusCode::CREATED,
        Some("SessionCreated"),
    )
    .await;
    // The backup opens as a store, with the sessions committed before it.
    let listed = tokio::process::Command::new(foya_bin())
        .args(["sessions", "list", "--json", "--data-dir"])
        .arg(&backup_dir)
        .env_remove("FOYA_DATA_DIR")
        .output()
        .await
        .unwrap();
    let (code, stdout, stderr) = outcome(&listed);
    assert_eq!(code, Some(0), "{stderr}");
    let listed: BTreeSet<String> = stdout
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(listed, ids);
}
