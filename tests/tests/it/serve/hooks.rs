//! `foya serve` and a trusted project's hooks: they apply to the sessions of the project
//! the server was started in, and not to a session created in another (untrusted)
//! project, where their relative script would name that project's file.

use super::shutdown::{create_session, start_scripted, submit};
use super::{Stream, of_type, within};
use serde_json::{Value, json};
use std::path::Path;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projects_hooks_run_only_in_sessions_of_that_project() {
    within(hooks_by_origin()).await;
}

/// A project in `dir` whose `hooks/mark.sh` appends `name` to `../marks`.
fn project(dir: &Path, name: &str) {
    std::fs::create_dir_all(dir.join("hooks")).unwrap();
    std::fs::create_dir_all(dir.join(".git")).unwrap();
    std::fs::write(
        dir.join("hooks/mark.sh"),
        format!("echo {name} >> ../marks\n"),
    )
    .unwrap();
}

async fn hooks_by_origin() {
    let tmp = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(tmp.path()).unwrap();
    let (trusted, other) = (root.join("trusted"), root.join("other"));
    project(&trusted, "trusted");
    project(&other, "other");
    std::fs::create_dir_all(trusted.join(".foya")).unwrap();
    std::fs::write(
        trusted.join(".foya/config.toml"),
        "[[hooks.PreToolUse]]\nhooks = [{ type = \"command\", command = \"bash hooks/mark.sh\" }]\n",
    )
    .unwrap();
    foya_tests::foya_bin::trust_project(&trusted);
    let script = root.join("script.json");
    let responses = json!({"responses": [
        {"tool_calls": [{"id": "c", "name": "shell", "arguments": {"command": "echo hi"}}]},
        {"text": "done"}
    ]});
    std::fs::write(&script, responses.to_string()).unwrap();
    let (mut server, _stderr) = start_scripted(&script, &trusted).await;
    let s = &server;
    let mut hook_runs = Vec::new();
    for cwd in [&other, &trusted] {
        let id = create_session(s, cwd).await;
        let mut sse = Stream::open(s, &id, "?from_seq=1", None).await;
        submit(s, &id, "go").await;
        let events = sse.until(&s.doc, of_type("turn_complete")).await;
        assert_eq!(events.last().unwrap()["status"], "completed", "{events:#?}");
        let ran: Vec<Value> = events
            .iter()
            .filter(|e| e["type"] == "hook_ran")
            .map(|e| e["decision"].clone())
            .collect();
        hook_runs.push(ran);
    }
    assert_eq!(hook_runs, [vec![], vec![json!("none")]]);
    let marks = std::fs::read_to_string(root.join("marks")).unwrap_or_default();
    assert_eq!(marks, "trusted\n");
    server.child.start_kill().unwrap();
    server.child.wait().await.unwrap();
}
