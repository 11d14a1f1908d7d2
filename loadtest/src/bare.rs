//! `foya loadtest --compare-bare`: the floor the runtime is measured against over HTTP.
//!
//! After the runtime's pass, the same sessions × turns run again with a bare client and no
//! runtime. What is replayed: the requests the runtime sent in session 0, turn by turn
//! (captured by the probe, [`super::probe::Captured`]). Every bare session's turn k sends,
//! one after another, the requests of session 0's turn k — each of its steps' requests
//! (retries included) in the order the runtime sent them, so later turns carry the longer
//! histories the runtime really sent. When session 0 has fewer captured turns than the
//! run (a turn of it failed or was stopped before the last turn sent anything), the
//! turns beyond them replay the last captured turn ([`BareReport::captured_turns`] says
//! how many there were). The requests go with the same bodies, encoded by the same wire
//! encoder (each serialised once, before the timed section), the same headers and no
//! auth, to the same server, at the same concurrency (`--concurrency` turns at once);
//! each SSE response body is read as raw bytes to its end — no decoding, no events, no
//! storage. Its process CPU per turn is the cost of just moving the bytes; the report
//! gives the runtime's CPU per turn as a multiple of it.

use axum::body::Bytes;
use foya_actors::provider::ModelRequest;
use foya_actors::provider::profile::ProviderProfile;
use futures::StreamExt as _;
use serde::Serialize;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Semaphore;

/// What the bare pass measured.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct BareReport {
    /// Turns replayed (each: the requests captured for its turn, once each, in order).
    pub(crate) turns: u64,
    /// Turns of session 0 captured (distinct request lists replayed); fewer than
    /// `turns_per_session` means the later turns replayed the last captured one.
    pub(crate) captured_turns: u64,
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
#[derive(Debug)]
struct Prepared {
    url: String,
    headers: Vec<(&'static str, String)>,
    /// The JSON body, serialised once (cloning it only counts a reference).
    body: Bytes,
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
                url: foya_actors::provider::http::endpoint(&profile.base_url, encoded.path),
                headers: encoded.headers,
                body: Bytes::from(serde_json::to_vec(&encoded.body)?),
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

/// Session 0's requests by turn, encoded once, and the client that sends them: the
/// floor's (`--compare-floor`) way to read the same SSE bytes.
#[derive(Debug)]
pub(crate) struct Replay {
    client: reqwest::Client,
    prepared: Vec<Vec<Prepared>>,
}

impl Replay {
    /// Encodes `captured` for `profile`'s endpoint.
    ///
    /// # Errors
    /// A request cannot be encoded.
    pub(crate) fn new(
        profile: &ProviderProfile,
        captured: &[Vec<ModelRequest>],
    ) -> anyhow::Result<Self> {
        let prepared = captured
            .iter()
            .map(|turn| prepare(profile, turn))
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Self {
            client: reqwest::Client::new(),
            prepared,
        })
    }

    /// Sends request `sent` of turn `turn` (the last one past the end of either) and
    /// reads its body to the end: the bytes read, `None` on failure or when nothing is
    /// there.
    pub(crate) async fn send_of(&self, turn: usize, sent: usize) -> Option<u64> {
        let requests = self.prepared.get(turn).or_else(|| self.prepared.last())?;
        let request = requests.get(sent).or_else(|| requests.last())?;
        send(&self.client, request).await
    }
}

/// Replays, for each of `sessions` sessions, `turns` turns: turn k sends the requests of
/// `captured[k]` (the last entry for every k past the end), at most `concurrency` turns
/// at once.
///
/// # Errors
/// When nothing was captured or a request cannot be encoded.
pub(crate) async fn run(
    profile: &ProviderProfile,
    captured: &[Vec<ModelRequest>],
    sessions: usize,
    turns: u32,
    concurrency: usize,
) -> anyhow::Result<BareReport> {
    anyhow::ensure!(
        captured.iter().any(|turn| !turn.is_empty()),
        "--compare-bare: the runtime pass sent no request to replay"
    );
    let prepared = captured
        .iter()
        .map(|turn| prepare(profile, turn))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let prepared = Arc::new(prepared);
    let client = reqwest::Client::new();
    let permits = Arc::new(Semaphore::new(concurrency.max(1)));
    let cpu_before = super::cpu::cpu_time();
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..sessions {
        let (client, prepared, permits) =
            (client.clone(), Arc::clone(&prepared), Arc::clone(&permits));
        tasks.spawn(async move {
            let (mut ok, mut failed, mut bytes) = (0u64, 0u64, 0u64);
            for turn in 0..turns {
                let Ok(_permit) = permits.acquire().await else {
                    break;
                };
                // Session 0's turn `turn`, or its last captured turn past the end.
                let requests = usize::try_from(turn)
                    .ok()
                    .and_then(|t| prepared.get(t))
                    .or_else(|| prepared.last())
                    .map_or(&[][..], Vec::as_slice);
                for request in requests {
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
    let mut report = BareReport {
        captured_turns: prepared.len() as u64,
        ..BareReport::default()
    };
    while let Some(joined) = tasks.join_next().await {
        let (ok, failed, bytes) = joined.unwrap_or((0, 1, 0));
        report.requests_ok += ok;
        report.requests_failed += failed;
        report.bytes += bytes;
    }
    report.wall_s = started.elapsed().as_secs_f64();
    report.cpu_s = super::cpu::cpu_time()
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
    use axum::extract::{Request, State};
    use axum::middleware::{Next, from_fn_with_state};
    use axum::response::Response;
    use foya_actors::provider::wire::ProviderKind;
    use foya_protocol::{AssistantMessage, Input, Message};
    use foya_sim::{SimConfig, serve_sim, sim_router};
    use std::sync::Mutex;

    /// An OpenAI Chat profile for the simulator at `addr`.
    fn profile(addr: std::net::SocketAddr) -> ProviderProfile {
        let mut profile = ProviderProfile::for_kind(ProviderKind::OpenaiChat, "sim-1");
        profile.base_url = format!("http://{addr}/v1");
        profile
    }

    /// Session 0's request of turn `turn`: its user messages `turn 0` … `turn {turn}`,
    /// each earlier one followed by its answer `answer of turn K`.
    fn turn_request(turn: u32) -> ModelRequest {
        let mut messages = Vec::new();
        for t in 0..=turn {
            messages.push(Message::User(Input::text(format!(
                "[ls:0] turn {t}: hello"
            ))));
            if t < turn {
                messages.push(Message::Assistant(AssistantMessage {
                    text: format!("answer of turn {t}"),
                    ..AssistantMessage::default()
                }));
            }
        }
        ModelRequest {
            model: "sim-1".into(),
            messages: messages.into(),
            ..ModelRequest::default()
        }
    }

    /// Request bodies the server received, in arrival order.
    type Seen = Arc<Mutex<Vec<serde_json::Value>>>;

    async fn record(State(seen): State<Seen>, request: Request, next: Next) -> Response {
        let (parts, body) = request.into_parts();
        let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        seen.lock()
            .unwrap()
            .push(serde_json::from_slice(&bytes).unwrap());
        next.run(Request::from_parts(parts, axum::body::Body::from(bytes)))
            .await
    }

    /// The real simulator (its axum routes over HTTP on 127.0.0.1:0), recording the
    /// bodies it receives.
    async fn recording_sim() -> (std::net::SocketAddr, Seen) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Seen::default();
        let app =
            sim_router(SimConfig::default()).layer(from_fn_with_state(Arc::clone(&seen), record));
        tokio::spawn(async move { axum::serve(listener, app).await });
        (addr, seen)
    }

    /// The texts of the messages of a Chat Completions body, in order.
    fn texts(body: &serde_json::Value) -> Vec<String> {
        body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] != "system")
            .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    #[tokio::test]
    async fn the_bare_pass_reads_every_response_of_the_sim_server() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve_sim(listener, SimConfig::default()));
        let report = run(&profile(addr), &[vec![turn_request(0)]], 3, 2, 2)
            .await
            .unwrap();
        assert_eq!(report.turns, 6);
        assert_eq!(report.captured_turns, 1);
        assert_eq!((report.requests_ok, report.requests_failed), (6, 0));
        assert!(report.bytes > 0);
        assert!(report.cpu_us_per_turn > 0.0);
    }

    #[tokio::test]
    async fn each_turn_replays_the_requests_captured_for_that_turn() {
        let first = vec!["[ls:0] turn 0: hello".to_owned()];
        let second = vec![
            "[ls:0] turn 0: hello".to_owned(),
            "answer of turn 0".to_owned(),
            "[ls:0] turn 1: hello".to_owned(),
        ];
        // Turn 0: two steps (the server answers each); turn 1: one request whose
        // history carries turn 0's answer.
        let captured = [
            vec![turn_request(0), turn_request(0)],
            vec![turn_request(1)],
        ];

        // One session: the server sees the replay in order.
        let (addr, seen) = recording_sim().await;
        let report = run(&profile(addr), &captured, 1, 2, 1).await.unwrap();
        let counts = |r: &BareReport| (r.turns, r.captured_turns, r.requests_ok, r.requests_failed);
        assert_eq!(counts(&report), (2, 2, 3, 0));
        let bodies = seen.lock().unwrap().clone();
        assert_eq!(
            bodies.iter().map(texts).collect::<Vec<_>>(),
            [first.clone(), first.clone(), second.clone()]
        );
        // Byte for byte what the wire encoder made of each captured request.
        let encoded: Vec<serde_json::Value> = captured
            .iter()
            .flat_map(|turn| prepare(&profile(addr), turn).unwrap())
            .map(|p| serde_json::from_slice(&p.body).unwrap())
            .collect();
        assert_eq!(bodies, encoded);

        // Three sessions at once: each replays both turns.
        let (addr, seen) = recording_sim().await;
        let report = run(&profile(addr), &captured, 3, 2, 3).await.unwrap();
        assert_eq!(counts(&report), (6, 2, 9, 0));
        let mut texts: Vec<Vec<String>> = seen.lock().unwrap().iter().map(texts).collect();
        texts.sort();
        let mut expected = vec![first; 6];
        expected.extend(vec![second; 3]);
        assert_eq!(texts, expected);
    }

    #[tokio::test]
    async fn turns_past_the_captured_ones_replay_the_last_captured_turn() {
        let (addr, seen) = recording_sim().await;
        let captured = [vec![turn_request(0)], vec![turn_request(1)]];
        let report = run(&profile(addr), &captured, 1, 4, 1).await.unwrap();
        assert_eq!(
            (
                report.turns,
                report.captured_turns,
                report.requests_ok,
                report.requests_failed
            ),
            (4, 2, 4, 0)
        );
        let turn_of = |body: &serde_json::Value| texts(body).last().cloned().unwrap();
        let turns: Vec<String> = seen.lock().unwrap().iter().map(turn_of).collect();
        assert_eq!(
            turns,
            [
                "[ls:0] turn 0: hello",
                "[ls:0] turn 1: hello",
                "[ls:0] turn 1: hello",
                "[ls:0] turn 1: hello"
            ]
        );
    }

    #[tokio::test]
    async fn nothing_captured_is_an_error() {
        let profile = ProviderProfile::for_kind(ProviderKind::OpenaiChat, "sim-1");
        for captured in [vec![], vec![vec![]]] {
            let error = run(&profile, &captured, 1, 1, 1).await.unwrap_err();
            assert!(error.to_string().contains("no request to replay"));
        }
    }
}
