//! clap value parsers that refuse bad arguments at parse time (clap then prints the
//! message and exits 2), before anything is created or run.

use std::path::PathBuf;
use std::time::Duration;

/// Why a value was refused: clap prints it after the argument (`invalid value 'x' for
/// '--flag': <this>`) and exits 2.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ValueError(pub String);

/// A count of at least 1 (`--sessions`, `--concurrency`).
///
/// # Errors
/// Not an unsigned integer, or 0.
pub fn positive_count(s: &str) -> Result<usize, ValueError> {
    match s.trim().parse::<usize>() {
        Ok(n) => at_least_one(n as u64).map(|()| n),
        Err(e) => Err(ValueError(format!("{s:?} is not a whole number ({e})"))),
    }
}

/// Why `n` is not a count of at least 1 ([`positive_count`]'s message), for values that
/// do not come from a flag (`--sim-config` fields).
///
/// # Errors
/// `n` is 0.
pub fn at_least_one(n: u64) -> Result<(), ValueError> {
    if n == 0 {
        return Err(ValueError("must be at least 1".to_owned()));
    }
    Ok(())
}

/// [`positive_count`] as a `u32` (`--max-attempts`, `--steps-per-turn`).
///
/// # Errors
/// Not an unsigned integer, 0, or over `u32::MAX`.
pub fn positive_u32(s: &str) -> Result<u32, ValueError> {
    let n = positive_count(s)?;
    u32::try_from(n).map_err(|_| ValueError(format!("{s:?} is too large (at most {})", u32::MAX)))
}

/// A subscriber channel capacity of at least
/// [`MIN_SUBSCRIBER_BUFFER`](foya_actors::MIN_SUBSCRIBER_BUFFER) (`loadtest
/// --subscriber-buffer`): below it, every turn's subscriber is cut off (`lagged`).
///
/// # Errors
/// Not an unsigned integer, or below the minimum.
pub fn subscriber_buffer(s: &str) -> Result<usize, ValueError> {
    let min = foya_actors::MIN_SUBSCRIBER_BUFFER;
    let n = s
        .trim()
        .parse::<usize>()
        .map_err(|e| ValueError(format!("{s:?} is not a whole number ({e})")))?;
    if n < min {
        return Err(ValueError(format!(
            "must be at least {min}: the runtime sends a model stream's live updates in \
             batches of up to {min} at once, and a smaller buffer cuts the subscriber off \
             (every turn fails with `lagged`)"
        )));
    }
    Ok(n)
}

/// A duration in seconds (fractions allowed), finite and greater than 0 (`--duration`).
///
/// # Errors
/// Not a number, NaN, infinite, zero, negative, or too large for a `Duration`.
pub fn positive_seconds(s: &str) -> Result<Duration, ValueError> {
    duration(s, false)
}

/// A duration in seconds (fractions allowed), finite and at least 0
/// (`foya node --handoff-drain`: 0 cancels at once).
///
/// # Errors
/// Not a number, NaN, infinite, negative, or too large for a `Duration`.
pub fn seconds(s: &str) -> Result<Duration, ValueError> {
    duration(s, true)
}

/// A finite, non-negative number of seconds as a `Duration`; 0 only when `zero_allowed`.
fn duration(s: &str, zero_allowed: bool) -> Result<Duration, ValueError> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| ValueError(format!("{s:?} is not a number of seconds")))?;
    let (in_range, wanted) = if zero_allowed {
        (secs >= 0.0, "0 or more")
    } else {
        (secs > 0.0, "greater than 0")
    };
    if !secs.is_finite() || !in_range {
        return Err(ValueError(format!(
            "{s:?} is not a duration: give a finite number of seconds {wanted}"
        )));
    }
    Duration::try_from_secs_f64(secs).map_err(|e| ValueError(format!("{s:?}: {e}")))
}

/// The HTTP address other nodes reach a node at (`foya node --advertise-http`): an
/// `http://` or `https://` URL with a host that is not unspecified (`0.0.0.0`, `[::]`)
/// and no path, query or credentials; returned without a trailing `/`.
///
/// # Errors
/// Not such a URL (the message says what is wrong).
pub fn advertised_url(s: &str) -> Result<String, ValueError> {
    let example = "expected e.g. http://10.0.0.5:8080";
    let url = reqwest::Url::parse(s.trim())
        .map_err(|e| ValueError(format!("{s:?} is not a URL ({e}); {example}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ValueError(format!(
            "{s:?} is not an http(s) URL; {example}"
        )));
    }
    let Some(host) = url.host_str().filter(|h| !h.is_empty()) else {
        return Err(ValueError(format!("{s:?} has no host; {example}")));
    };
    let unspecified = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_unspecified());
    if unspecified {
        return Err(ValueError(format!(
            "{s:?} is an unspecified address, which other nodes cannot dial; give the \
             address they reach this node at, {example}"
        )));
    }
    if url.port() == Some(0) {
        return Err(ValueError(format!(
            "{s:?} has port 0, which no node can dial; give the port this node's HTTP \
             API listens on, {example}"
        )));
    }
    if !url.username().is_empty()
        || url.password().is_some()
        || url.query().is_some()
        || url.fragment().is_some()
        || url.path() != "/"
    {
        return Err(ValueError(format!(
            "{s:?} must be a scheme, host and port only (no path, query or credentials); \
             {example}"
        )));
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

/// A file to write at the end of a run (`--json PATH`): its directory must exist, be a
/// directory and be writable now, so a long run never fails at the very end. Checked by
/// creating (and removing) a temporary file beside it.
///
/// # Errors
/// The parent is missing, not a directory, or not writable; the path is a directory.
pub fn output_file(s: &str) -> Result<PathBuf, ValueError> {
    let path = PathBuf::from(s);
    if s.is_empty() || path.is_dir() {
        return Err(ValueError(format!("{s:?} is not a file path")));
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !parent.is_dir() {
        return Err(ValueError(format!(
            "directory {} does not exist",
            parent.display()
        )));
    }
    tempfile::Builder::new()
        .prefix(".foya-write-check")
        .tempfile_in(&parent)
        .map(drop)
        .map_err(|e| ValueError(format!("cannot write in {}: {e}", parent.display())))?;
    Ok(path)
}

/// An `http://` or `https://` URL with a host (`--base-url`).
///
/// # Errors
/// Not a URL, another scheme, or no host.
pub fn http_url(s: &str) -> Result<String, ValueError> {
    // Shown without userinfo, query or fragment (they may carry credentials).
    let shown = foya_actors::provider::redact::display_url(s);
    let url = reqwest::Url::parse(s).map_err(|e| {
        ValueError(format!(
            "{shown:?} is not a URL ({e}); expected e.g. http://127.0.0.1:8000/v1"
        ))
    })?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(ValueError(format!(
            "{shown:?} is not an http(s) URL; expected e.g. http://127.0.0.1:8000/v1"
        )));
    }
    Ok(s.to_owned())
}

/// A socket address with an explicit port (`foya node --listen`): peers dial it, and the
/// cluster server cannot report a port the OS picked for port 0.
///
/// # Errors
/// Not `HOST:PORT`, or port 0.
pub fn fixed_port_addr(s: &str) -> Result<std::net::SocketAddr, ValueError> {
    let addr: std::net::SocketAddr = s.parse().map_err(|e| {
        ValueError(format!(
            "{s:?} is not an address ({e}); expected e.g. 127.0.0.1:4370"
        ))
    })?;
    if addr.port() == 0 {
        return Err(ValueError(format!(
            "{s:?} has port 0: a node needs a fixed port that its peers can dial, e.g. 127.0.0.1:4370"
        )));
    }
    Ok(addr)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn counts_durations_paths_and_urls_are_checked() {
        assert_eq!(positive_count("3"), Ok(3));
        assert_eq!(
            positive_count("0"),
            Err(ValueError("must be at least 1".to_owned()))
        );
        assert!(positive_count("-1").is_err());
        assert_eq!(positive_u32("4"), Ok(4));
        assert_eq!(
            positive_u32("0"),
            Err(ValueError("must be at least 1".to_owned()))
        );
        assert!(positive_u32("4294967296").is_err());
        assert_eq!(subscriber_buffer("128"), Ok(128));
        assert!(subscriber_buffer("0").is_err_and(|e| e.0.starts_with("must be at least 128:")));
        assert!(subscriber_buffer("x").is_err_and(|e| e.0.contains("not a whole number")));
        assert_eq!(
            subscriber_buffer("127"),
            Err(ValueError(
                "must be at least 128: the runtime sends a model stream's live updates in \
                 batches of up to 128 at once, and a smaller buffer cuts the subscriber off \
                 (every turn fails with `lagged`)"
                    .to_owned()
            ))
        );
        assert_eq!(positive_seconds("1.5"), Ok(Duration::from_millis(1500)));
        for bad in ["inf", "-inf", "NaN", "-1", "0", "1e300", "x"] {
            assert!(positive_seconds(bad).is_err(), "{bad}");
        }
        assert_eq!(seconds("0"), Ok(Duration::ZERO));
        assert_eq!(seconds("2.5"), Ok(Duration::from_millis(2500)));
        for bad in ["inf", "NaN", "-1", "1e300", "x"] {
            assert!(seconds(bad).is_err(), "{bad}");
        }
        assert_eq!(
            advertised_url("http://10.0.0.5:8080/").as_deref(),
            Ok("http://10.0.0.5:8080")
        );
        assert_eq!(
            advertised_url("https://node-a.internal").as_deref(),
            Ok("https://node-a.internal")
        );
        for bad in [
            "http://0.0.0.0:8080",
            "http://[::]:8080",
            "10.0.0.5:8080",
            "ftp://h:1",
            "http://h:1/api",
            "http://u:p@h:1",
            "http://h:1/?x=1",
            "http://127.0.0.1:0",
        ] {
            assert!(advertised_url(bad).is_err(), "{bad}");
        }
        let dir = tempfile::tempdir().unwrap();
        let ok = dir.path().join("report.json");
        assert_eq!(output_file(ok.to_str().unwrap()), Ok(ok.clone()));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let missing = dir.path().join("nope/report.json");
        assert_eq!(
            output_file(missing.to_str().unwrap()),
            Err(ValueError(format!(
                "directory {} does not exist",
                dir.path().join("nope").display()
            )))
        );
        assert!(output_file(dir.path().to_str().unwrap()).is_err());
        assert_eq!(
            http_url("http://127.0.0.1:8000/v1"),
            Ok("http://127.0.0.1:8000/v1".to_owned())
        );
        for bad in ["notaurl", "ftp://x/y", "file:///tmp", "http//x"] {
            assert!(http_url(bad).is_err(), "{bad}");
        }
        assert_eq!(
            fixed_port_addr("127.0.0.1:4370"),
            Ok("127.0.0.1:4370".parse().unwrap())
        );
        assert_eq!(
            fixed_port_addr("127.0.0.1:0"),
            Err(ValueError("\"127.0.0.1:0\" has port 0: a node needs a fixed port that its peers can dial, e.g. 127.0.0.1:4370".to_owned()))
        );
        assert!(fixed_port_addr("localhost").is_err());
    }
}
