//! `foya loadtest --compare-bare`: the floor the runtime is measured against over HTTP.
//!
//! After the runtime's pass, the same sessions × turns run again with a bare client and no
//! runtime: for each turn it sends the requests the runtime sent for session 0's first
//! turn (captured by the probe; same bodies, encoded by the same wire encoder, same
//! headers, no auth) to the same server and reads each SSE response body as raw bytes to
//! its end — no decoding, no events, no storage. Its process CPU per turn is the cost of
//! just moving the bytes; the report gives the runtime's CPU per turn as a multiple of it.

use foya_actors::provider::ModelRequest;
use foya_actors::provider::config::ProviderProfile;
use futures::StreamExt as _;
use serde::Serialize;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Semaphore;

/// What the bare pass measured.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct BareReport {
    /// Turns replayed (each: every captured request once, in order).
    pub(crate) turns: u64,
    /// Requests whose response body was read to the end with a 2xx status.
    pub(crate) requests_ok: u64,
    /// Requests that failed (connection error or non-2xx status).
    pub(crate) requests_failed: u64,
    /// Response body bytes read.
    pub(crate) bytes: u64,
    /// Wall time of the pass, in seconds.
    pub(crate) wall_s: f64,
    /// Process CPU time of the pass (user + system), in seconds.
    pub(crate) cpu_s: f64,
    /// `cpu_s` per turn, in microseconds.
    pub(crate) cpu_us_per_turn: f64,
}

/// One encoded request, ready to send.
struct Prepared {
    url: String,
    headers: Vec<(&'static str, String)>,
    /// The JSON body, serialised once.
    body: Vec<u8>,
}

fn prepare(profile: &ProviderProfile, requests: &[ModelRequest]) -> anyhow::Result<Vec<Prepared>> {
    requests
        .iter()
        .map(|request| {
            let mut request = request.clone();
            if request.max_output_tokens.is_none() {
                request.max_output_tokens = profile.max_output_tokens;
            }
            let encoded = profile.kind.encode(&request);
            Ok(Prepared {
                url: format!("{}{}", profile.base_url, encoded.path),
                headers: encoded.headers,
                body: serde_json::to_vec(&encoded.body)?,
            })
        })
        .collect()
}

/// Sends one request and reads its body to the end; the bytes read, or `None` on failure.
async fn send(client: &reqwest::Client, request: &Prepared) -> Option<u64> {
    let mut builder = client
        .post(&request.url)
        .header("accept", "text/event-stream")
        .header("content-type", "application/json")
        .body(request.body.clone());
    for (name, value) in &request.headers {
        builder = builder.header(*name, value);
    }
    let response = builder.send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    let mut body = response.bytes_stream();
    let mut n = 0u64;
    while let Some(chunk) = body.next().await {
        n += chunk.ok()?.len() as u64;
    }
    Some(n)
}

/// Replays `requests` `turns` times for each of `sessions` sessions, at most
/// `concurrency` turns at once.
///
/// # Errors
/// When nothing was captured or a request cannot be encoded.
pub(crate) async fn run(
    profile: &ProviderProfile,
    requests: &[ModelRequest],
    sessions: usize,
    turns: u32,
    concurrency: usize,
) -> anyhow::Result<BareReport> {
    anyhow::ensure!(
        !requests.is_empty(),
        "--compare-bare: the runtime pass sent no request to replay"
    );
    let prepared = Arc::new(prepare(profile, requests)?);
    let client = reqwest::Client::new();
    let permits = Arc::new(Semaphore::new(concurrency.max(1)));
    let cpu_before = super::report::cpu_time();
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..sessions {
        let (client, prepared, permits) =
            (client.clone(), Arc::clone(&prepared), Arc::clone(&permits));
        tasks.spawn(async move {
            let (mut ok, mut failed, mut bytes) = (0u64, 0u64, 0u64);
            for _ in 0..turns {
                let Ok(_permit) = permits.acquire().await else {
                    break;
                };
                for request in prepared.iter() {
                    match send(&client, request).await {
                        Some(n) => {
                            ok += 1;
                            bytes += n;
                        }
                        None => failed += 1,
                    }
                }
            }
            (ok, failed, bytes)
        });
    }
    let mut report = BareReport::default();
    while let Some(joined) = tasks.join_next().await {
        let (ok, failed, bytes) = joined.unwrap_or((0, 1, 0));
        report.requests_ok += ok;
        report.requests_failed += failed;
        report.bytes += bytes;
    }
    report.wall_s = started.elapsed().as_secs_f64();
    report.cpu_s = super::report::cpu_time()
        .saturating_sub(cpu_before)
        .as_secs_f64();
    report.turns = sessions as u64 * u64::from(turns);
    if report.turns > 0 {
        report.cpu_us_per_turn = report.cpu_s * 1e6 / report.turns as f64;
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use foya_actors::provider::sim::{SimConfig, serve_sim};
    use foya_actors::provider::wire::ProviderKind;
    use foya_protocol::{Input, Message};

    #[tokio::test]
    async fn the_bare_pass_reads_every_response_of_the_sim_server() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve_sim(listener, SimConfig::default()));
        let mut profile = ProviderProfile::for_kind(ProviderKind::OpenaiChat, "sim-1");
        profile.base_url = format!("http://{addr}/v1");
        let request = ModelRequest {
            model: "sim-1".into(),
            messages: vec![Message::User(Input::text("[ls:0] turn 0: hello"))].into(),
            ..ModelRequest::default()
        };
        let report = run(&profile, &[request], 3, 2, 2).await.unwrap();
        assert_eq!(report.turns, 6);
        assert_eq!((report.requests_ok, report.requests_failed), (6, 0));
        assert!(report.bytes > 0);
        assert!(report.cpu_us_per_turn > 0.0);
    }

    #[tokio::test]
    async fn nothing_captured_is_an_error() {
        let profile = ProviderProfile::for_kind(ProviderKind::OpenaiChat, "sim-1");
        let error = run(&profile, &[], 1, 1, 1).await.unwrap_err();
        assert!(error.to_string().contains("no request to replay"));
    }
}
