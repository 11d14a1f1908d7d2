//! What telemetry does, from the standard `OTEL_*` environment variables and the
//! `[telemetry]` table of the user's `~/.config/foya/config.toml` (a project's file cannot
//! set it: it would choose where a user's traces go).
//!
//! The environment wins over the file. Traces are exported when
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT` is set (or the
//! table's `endpoint`), unless `OTEL_SDK_DISABLED=true` or `enabled = false`; only
//! `http/protobuf` is spoken (`OTEL_EXPORTER_OTLP_PROTOCOL`, `protocol`).

use anyhow::Context as _;
use std::path::Path;

/// The default `service.name` of exported traces.
pub const DEFAULT_SERVICE_NAME: &str = "foya";

/// Where and how traces are exported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceExport {
    /// The traces URL (`…/v1/traces`); `None`: the SDK reads it from
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub endpoint: Option<String>,
    /// `service.name` of the resource.
    pub service_name: String,
}

/// What telemetry is on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TelemetryConfig {
    /// Traces exported over OTLP (`None`: no trace is built).
    pub traces: Option<TraceExport>,
    /// Prometheus metrics kept (for `GET /metrics` and [`crate::Telemetry::figures`]).
    pub metrics: bool,
    /// Prompt, completion, tool argument and result text in span attributes (off by
    /// default: an explicit opt-in).
    pub capture_content: bool,
}

/// The `[telemetry]` table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct FileTable {
    enabled: Option<bool>,
    endpoint: Option<String>,
    protocol: Option<String>,
    service_name: Option<String>,
    capture_content: Option<bool>,
    metrics: Option<bool>,
}

impl TelemetryConfig {
    /// Nothing on.
    #[must_use]
    pub fn off() -> Self {
        Self::default()
    }

    /// Whether nothing is on (then nothing is built and nothing costs).
    #[must_use]
    pub fn is_off(&self) -> bool {
        self.traces.is_none() && !self.metrics
    }

    /// From the process's environment and the `[telemetry]` table of `file` (the user's
    /// config file; absent: none), with metrics on when `metrics_by_default` (a server
    /// that serves `/metrics`) unless the table says `metrics = false`.
    ///
    /// # Errors
    /// The file cannot be read or parsed, a key of the table has the wrong type, or the
    /// protocol is not `http/protobuf`.
    pub fn load(file: Option<&Path>, metrics_by_default: bool) -> anyhow::Result<Self> {
        let table = match file {
            Some(path) => read_table(path)?,
            None => FileTable::default(),
        };
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        Self::resolve(&table, &env, metrics_by_default)
    }

    fn resolve(
        table: &FileTable,
        env: &dyn Fn(&str) -> Option<String>,
        metrics_by_default: bool,
    ) -> anyhow::Result<Self> {
        let disabled = env("OTEL_SDK_DISABLED")
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
            || table.enabled == Some(false);
        let from_env = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some()
            || env("OTEL_EXPORTER_OTLP_ENDPOINT").is_some();
        let traces = if disabled {
            None
        } else if from_env {
            Some(None)
        } else {
            table
                .endpoint
                .as_ref()
                .map(|base| Some(format!("{}/v1/traces", base.trim_end_matches('/'))))
        };
        let traces = match traces {
            None => None,
            Some(endpoint) => {
                let protocol = env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                    .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))
                    .or_else(|| table.protocol.clone())
                    .unwrap_or_else(|| "http/protobuf".to_owned());
                if protocol.trim() != "http/protobuf" {
                    anyhow::bail!(
                        "OTLP protocol {protocol:?} is not supported: Foya exports traces over \
                         http/protobuf (set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf)"
                    );
                }
                let service_name = env("OTEL_SERVICE_NAME")
                    .or_else(|| table.service_name.clone())
                    .unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_owned());
                Some(TraceExport {
                    endpoint,
                    service_name,
                })
            }
        };
        Ok(Self {
            traces,
            metrics: !disabled_metrics(table, metrics_by_default),
            capture_content: table.capture_content.unwrap_or(false),
        })
    }
}

fn disabled_metrics(table: &FileTable, metrics_by_default: bool) -> bool {
    !table.metrics.unwrap_or(metrics_by_default) || table.enabled == Some(false)
}

/// The `[telemetry]` table of `path` (none when the file or the table is absent).
fn read_table(path: &Path) -> anyhow::Result<FileTable> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(FileTable::default()),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    parse_table(&text).with_context(|| format!("in {}", path.display()))
}

fn parse_table(text: &str) -> anyhow::Result<FileTable> {
    let document: toml::Table = toml::from_str(text).context("cannot parse the file")?;
    let Some(value) = document.get("telemetry") else {
        return Ok(FileTable::default());
    };
    let table = value.as_table().context("[telemetry] must be a table")?;
    let mut out = FileTable::default();
    for (key, value) in table {
        let boolean = || {
            value
                .as_bool()
                .with_context(|| format!("[telemetry] {key} must be true or false"))
        };
        let string = || {
            value
                .as_str()
                .map(str::to_owned)
                .with_context(|| format!("[telemetry] {key} must be a string"))
        };
        match key.as_str() {
            "enabled" => out.enabled = Some(boolean()?),
            "metrics" => out.metrics = Some(boolean()?),
            "capture_content" => out.capture_content = Some(boolean()?),
            "endpoint" => out.endpoint = Some(string()?),
            "protocol" => out.protocol = Some(string()?),
            "service_name" => out.service_name = Some(string()?),
            other => anyhow::bail!(
                "[telemetry] has no key {other:?} (known: enabled, endpoint, protocol, \
                 service_name, capture_content, metrics)"
            ),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::collections::HashMap;

    fn resolve(
        table: &str,
        vars: &[(&str, &str)],
        server: bool,
    ) -> anyhow::Result<TelemetryConfig> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let table = parse_table(table)?;
        TelemetryConfig::resolve(&table, &|name| vars.get(name).cloned(), server)
    }

    #[test]
    fn nothing_set_is_off_and_servers_keep_metrics() {
        assert!(resolve("", &[], false).unwrap().is_off());
        let server = resolve("", &[], true).unwrap();
        assert!(server.metrics && server.traces.is_none());
        assert!(
            resolve("[telemetry]\nmetrics = false", &[], true)
                .unwrap()
                .is_off()
        );
    }

    #[test]
    fn the_environment_turns_traces_on_and_wins_over_the_file() {
        let on = resolve(
            "[telemetry]\nendpoint = \"http://127.0.0.1:1\"\nservice_name = \"file\"",
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:2"),
                ("OTEL_SERVICE_NAME", "env"),
            ],
            false,
        )
        .unwrap();
        assert_eq!(
            on.traces,
            Some(TraceExport {
                endpoint: None,
                service_name: "env".into()
            })
        );
        let file = resolve(
            "[telemetry]\nendpoint = \"http://127.0.0.1:1/\"",
            &[],
            false,
        )
        .unwrap();
        assert_eq!(
            file.traces.unwrap().endpoint.as_deref(),
            Some("http://127.0.0.1:1/v1/traces")
        );
        let off = resolve(
            "",
            &[
                (
                    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                    "http://127.0.0.1:2/v1/traces",
                ),
                ("OTEL_SDK_DISABLED", "true"),
            ],
            false,
        )
        .unwrap();
        assert!(off.is_off());
    }

    #[test]
    fn bad_values_are_clear_errors() {
        let grpc = resolve(
            "",
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://x"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ],
            false,
        );
        assert!(grpc.unwrap_err().to_string().contains("http/protobuf"));
        let typo = resolve("[telemetry]\ncapture = true", &[], false);
        assert!(format!("{:#}", typo.unwrap_err()).contains("no key \"capture\""));
        let wrong = resolve("[telemetry]\nmetrics = \"yes\"", &[], false);
        assert!(format!("{:#}", wrong.unwrap_err()).contains("metrics must be true or false"));
    }
}
