//! The peer comparison turn on rig: N sessions at once in one tokio process, each one
//! rig agent (rig-agent's runtime over rig-core's OpenAI chat-completions wire, streamed)
//! with a `shell` tool that really runs its command with `bash -c` through
//! `tokio::process`. Prints one JSON line in the shape `sdk_turn.py` prints: turns, wall,
//! CPU (own and children) and peak RSS.
//!
//!     rig-turn --base-url http://127.0.0.1:PORT/v1 --sessions 1000

use std::process::ExitCode;
use std::time::Instant;

use futures::StreamExt;
use rig_agent::AgentBuilder;
use rig_agent::agent::MultiTurnStreamItem;
use rig_core::providers::openai::OpenAIConfig;
use rig_core::tool::PortableTool;
use serde::Deserialize;
use serde_json::json;

const MODEL: &str = "sim-1";
const PREAMBLE: &str = "You are a coding agent. Use the shell tool to read files.";

/// Runs a command with `bash -c` in the working directory; the output is its stdout,
/// then its stderr.
struct Shell;

#[derive(Deserialize)]
struct ShellArgs {
    command: String,
}

impl PortableTool for Shell {
    const NAME: &'static str = "shell";
    type Args = ShellArgs;
    type Output = String;
    type Error = std::io::Error;

    fn description(&self) -> String {
        "Run a shell command in the working directory and return its output.".to_string()
    }

    fn parameters(&self) -> serde_json::Value {
        json!({
            "type": "object",
            "properties": { "command": { "type": "string" } },
            "required": ["command"],
        })
    }

    async fn call(&self, args: ShellArgs) -> Result<String, std::io::Error> {
        let out = tokio::process::Command::new("bash")
            .arg("-c")
            .arg(&args.command)
            .stdin(std::process::Stdio::null())
            .output()
            .await?;
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        Ok(text)
    }
}

/// One session: a new agent, one streamed run of one user input. Returns whether the
/// run ended with a non-empty answer and how many tool results it streamed.
async fn one_turn(base_url: String, index: usize) -> Result<(bool, u64), String> {
    let model = OpenAIConfig::new("sk-sim-not-a-key")
        .with_base_url(base_url)
        .client()
        .chat(MODEL);
    let agent = AgentBuilder::new(model)
        .name("peer")
        .preamble(PREAMBLE)
        .tool(Shell)
        .build();
    let mut stream = agent
        .prompt(format!("session {index}: read the README"))
        .max_turns(10)
        .stream();
    let mut tool_calls = 0;
    let mut answered = false;
    while let Some(item) = stream.next().await {
        match item.map_err(|e| e.to_string())? {
            MultiTurnStreamItem::ToolResult { .. } => tool_calls += 1,
            MultiTurnStreamItem::FinalResponse(response) => {
                answered = !response.output().is_empty();
            }
            _ => {}
        }
    }
    Ok((answered, tool_calls))
}

/// User plus system CPU seconds and the peak RSS in bytes of `who`.
fn usage(who: libc::c_int) -> (f64, u64) {
    // SAFETY: `getrusage` only writes the `rusage` it is given, which is zeroed and ours.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF and RUSAGE_CHILDREN are valid `who` values.
    if unsafe { libc::getrusage(who, &mut ru) } != 0 {
        return (0.0, 0);
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (
        secs(ru.ru_utime) + secs(ru.ru_stime),
        u64::try_from(ru.ru_maxrss).unwrap_or(0) * 1024,
    )
}

fn parse_args() -> Result<(String, usize), String> {
    let mut base_url = None;
    let mut sessions = 100;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--base-url" => base_url = Some(value()?),
            "--sessions" => {
                let v = value()?;
                sessions = v.parse().map_err(|e| format!("--sessions {v}: {e}"))?;
            }
            _ => return Err(format!("unknown argument {arg}")),
        }
    }
    Ok((base_url.ok_or("--base-url is required")?, sessions))
}

#[tokio::main]
async fn main() -> ExitCode {
    let (base_url, sessions) = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("rig-turn: {e}\nusage: rig-turn --base-url URL [--sessions N]");
            return ExitCode::from(2);
        }
    };
    let (start_self, _) = usage(libc::RUSAGE_SELF);
    let (start_children, _) = usage(libc::RUSAGE_CHILDREN);
    let started = Instant::now();
    let tasks: Vec<_> = (0..sessions)
        .map(|i| tokio::spawn(one_turn(base_url.clone(), i)))
        .collect();
    let mut results = Vec::with_capacity(sessions);
    for task in tasks {
        results.push(task.await.map_err(|e| e.to_string()).and_then(|r| r));
    }
    let wall = started.elapsed().as_secs_f64();
    let (end_self, peak_rss) = usage(libc::RUSAGE_SELF);
    let (end_children, _) = usage(libc::RUSAGE_CHILDREN);
    let ok: Vec<u64> = results
        .iter()
        .filter_map(|r| match r {
            Ok((true, tools)) => Some(*tools),
            _ => None,
        })
        .collect();
    let errors: Vec<&String> = results
        .iter()
        .filter_map(|r| r.as_ref().err())
        .take(3)
        .collect();
    let report = json!({
        "driver": "rig",
        "sessions": sessions,
        "turns_ok": ok.len(),
        "turns_failed": sessions - ok.len(),
        "tool_calls_run": ok.iter().sum::<u64>(),
        "wall_s": wall,
        "cpu_s": end_self - start_self,
        "children_cpu_s": end_children - start_children,
        "peak_rss_bytes": peak_rss,
        "errors": errors,
    });
    println!("{report}");
    ExitCode::SUCCESS
}
