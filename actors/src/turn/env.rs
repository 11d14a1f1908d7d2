//! The environment a turn shows the model (cwd, OS, shell, date): read once per turn.

use crate::context::Environment;
use std::time::{SystemTime, UNIX_EPOCH};

/// The environment a turn shows the model: cwd, OS, `$SHELL` (file name; `sh` when
/// unset) and today's date (UTC, `YYYY-MM-DD`).
pub(super) fn environment(cwd: &std::path::Path) -> Environment {
    let shell = std::env::var("SHELL")
        .ok()
        .and_then(|s| {
            std::path::Path::new(&s)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "sh".into());
    Environment {
        cwd: cwd.to_path_buf(),
        os: std::env::consts::OS.into(),
        shell,
        date: today_utc(),
    }
}

/// Today's UTC date as `YYYY-MM-DD` (civil-from-days, proleptic Gregorian).
fn today_utc() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn today_is_a_date() {
        let d = super::today_utc();
        assert_eq!(d.len(), 10);
        assert!(d.starts_with("20"));
        assert_eq!((&d[4..5], &d[7..8]), ("-", "-"));
    }
}
