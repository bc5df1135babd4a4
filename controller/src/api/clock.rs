//! Times as the APIs write them: RFC 3339 in UTC (`2026-11-30T08:37:56Z`) and Unix seconds.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch (0 for times before it).
pub fn unix_secs(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs()
}

/// The time `secs` seconds after the epoch.
pub fn from_unix_secs(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

/// `time` as RFC 3339 UTC with whole seconds.
pub fn rfc3339(time: SystemTime) -> String {
    let secs = unix_secs(time);
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// `time` as Keystone writes `expires_at`: RFC 3339 UTC with microseconds.
pub fn rfc3339_micro(time: SystemTime) -> String {
    let base = rfc3339(time);
    format!("{}.000000Z", base.trim_end_matches('Z'))
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_times() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(from_unix_secs(951_782_400)), "2000-02-29T00:00:00Z");
        assert_eq!(
            rfc3339(from_unix_secs(1_796_027_876)),
            "2026-11-30T08:37:56Z"
        );
        assert_eq!(
            rfc3339_micro(from_unix_secs(0)),
            "1970-01-01T00:00:00.000000Z"
        );
    }
}
