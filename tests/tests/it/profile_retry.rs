//! A provider profile's `[profiles.NAME.retry]` governs the retries of its requests, end
//! to end (`foya run` with a project profile against the mock provider): a profile
//! allowing 2 attempts sends exactly 2 requests to a server that never answers usably,
//! and the recorded retry names that limit.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use foya_tests::foya_bin::{foya, only_session_log, output_in, trust_project};
use foya_tests::mock_provider::{MockProvider, MockResponse};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread")]
async fn a_profiles_retry_policy_limits_the_attempts_of_its_requests() {
    let mock = MockProvider::start().await;
    for _ in 0..4 {
        mock.push(MockResponse::sse("data: [DONE]\n\n".to_owned()));
    }
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project");
    std::fs::create_dir_all(project.join(".foya")).unwrap();
    std::fs::write(
        project.join(".foya/config.toml"),
        format!(
            "[profiles.local]\nkind = \"openai-chat\"\nbase_url = \"{}/v1\"\nmodel = \"m\"\n\
             api_key_env = \"FOYA_TEST_KEY_UNSET\"\napi_key_optional = true\n\
             [profiles.local.retry]\nmax_attempts = 2\nbase_delay_ms = 1\n",
            mock.base_url()
        ),
    )
    .unwrap();
    trust_project(&project);
    let data = dir.path().join("data");
    let out = tokio::task::spawn_blocking({
        let (project, data) = (project.clone(), data.clone());
        move || {
            let cwd = project.to_str().unwrap();
            let args = ["run", "--provider", "local", "--cwd", cwd, "say hello"];
            // The trust list `trust_project` wrote is in the test home's config dir.
            output_in(foya(), &args, &data)
        }
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert_eq!(mock.requests().len(), 2);

    let events = only_session_log(&data);
    let retries: Vec<Value> = events
        .iter()
        .filter(|e| e["type"] == "provider_retry")
        .map(|e| json!({"attempt": e["attempt"], "max_attempts": e["max_attempts"]}))
        .collect();
    assert_eq!(retries, vec![json!({"attempt": 2, "max_attempts": 2})]);
    let end = events.last().unwrap();
    assert_eq!(
        (&end["type"], &end["status"], &end["error"]["class"]),
        (
            &json!("turn_complete"),
            &json!("failed"),
            &json!("invalid_response")
        )
    );
}
