//! Times as the APIs write them: RFC 3339 in UTC (`2026-11-30T08:37:56Z`), Nova's instance
//! action times (`2026-11-30T08:37:56.123000`, UTC) and Unix seconds.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use time::OffsetDateTime;
use time::format_description::BorrowedFormatItem;
use time::format_description::well_known::Rfc3339;
use time::macros::{datetime, format_description};

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

/// `time` in UTC, whole seconds (`time` crate's value; the latest time RFC 3339 can write, the
/// last second of 9999, for anything later).
fn utc(time: SystemTime) -> OffsetDateTime {
    i64::try_from(unix_secs(time))
        .ok()
        .and_then(|secs| OffsetDateTime::from_unix_timestamp(secs).ok())
        .filter(|t| t.year() <= 9999)
        .unwrap_or(LATEST)
}

/// 9999-12-31T23:59:59Z.
const LATEST: OffsetDateTime = datetime!(9999-12-31 23:59:59 UTC);

/// `2026-11-30T08:37:56.000000Z`: RFC 3339 with six digits of fraction, as Keystone writes them.
const MICRO: &[BorrowedFormatItem<'static>] =
    format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]Z");

/// Nova's instance action times: UTC with microseconds and no zone (`2026-11-30T08:37:56.123000`).
const NOVA_MICRO: &[BorrowedFormatItem<'static>] =
    format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]");

/// `time` as Nova writes instance action times: UTC, microseconds, no zone
/// (`2026-11-30T08:37:56.123000`); the fraction is kept (the stores keep milliseconds).
pub fn nova_micro(time: SystemTime) -> String {
    let whole = utc(time);
    let micros = time
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_micros());
    whole
        .replace_microsecond(micros)
        .unwrap_or(whole)
        .format(NOVA_MICRO)
        .unwrap_or_default()
}

/// `time` as RFC 3339 UTC with whole seconds (`2026-11-30T08:37:56Z`).
pub fn rfc3339(time: SystemTime) -> String {
    // The `time` crate writes no fraction when it is zero, and `Z` for UTC.
    utc(time).format(&Rfc3339).unwrap_or_default()
}

/// `time` as Keystone writes `expires_at`: RFC 3339 UTC with microseconds (always `.000000`: our
/// times are whole seconds).
pub fn rfc3339_micro(time: SystemTime) -> String {
    utc(time).format(MICRO).unwrap_or_default()
}

/// An ISO 8601 time as Nova's `changes-since` and Keystone's `expires_at` take it (UTC when no
/// offset is given).
pub fn parse_time(text: &str) -> Option<SystemTime> {
    use time::format_description::well_known::{Iso8601, Rfc3339};
    use time::macros::format_description;
    use time::{OffsetDateTime, PrimitiveDateTime};
    let text = text.trim();
    let at = OffsetDateTime::parse(text, &Rfc3339)
        .or_else(|_| OffsetDateTime::parse(text, &Iso8601::DEFAULT))
        .ok()
        .or_else(|| {
            let local = format_description!(
                version = 2,
                "[year]-[month]-[day][optional [T[hour]:[minute][optional [:[second][optional [.[subsecond]]]]]]]"
            );
            PrimitiveDateTime::parse(text, local)
                .map(PrimitiveDateTime::assume_utc)
                .or_else(|_| {
                    time::Date::parse(text, format_description!("[year]-[month]-[day]"))
                        .map(|d| d.midnight().assume_utc())
                })
                .ok()
        })?;
    let secs = u64::try_from(at.unix_timestamp()).ok()?;
    let after = std::time::Duration::new(secs, at.nanosecond());
    SystemTime::UNIX_EPOCH.checked_add(after)
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

    #[test]
    fn whole_seconds_and_calendar_edges() {
        let at = |secs: u64, nanos: u32| UNIX_EPOCH + Duration::new(secs, nanos);
        // Fractions are dropped, not rounded.
        assert_eq!(
            rfc3339(at(946_684_799, 999_999_999)),
            "1999-12-31T23:59:59Z"
        );
        assert_eq!(
            rfc3339_micro(at(1_796_027_876, 500_000_000)),
            "2026-11-30T08:37:56.000000Z"
        );
        assert_eq!(
            rfc3339(from_unix_secs(1_709_210_096)),
            "2024-02-29T12:34:56Z"
        );
        // 2100 is not a leap year.
        assert_eq!(
            rfc3339(from_unix_secs(4_107_542_400)),
            "2100-03-01T00:00:00Z"
        );
        assert_eq!(
            rfc3339(from_unix_secs(253_402_300_799)),
            "9999-12-31T23:59:59Z"
        );
        // Before the epoch: the epoch (as `unix_secs`); past year 9999: its last second.
        assert_eq!(
            rfc3339(UNIX_EPOCH - Duration::from_secs(5)),
            "1970-01-01T00:00:00Z"
        );
        assert_eq!(
            rfc3339(from_unix_secs(u64::MAX / 4)),
            "9999-12-31T23:59:59Z"
        );
    }

    #[test]
    fn nova_action_times_keep_the_fraction() {
        let at = UNIX_EPOCH + Duration::new(1_796_027_876, 123_456_789);
        assert_eq!(nova_micro(at), "2026-11-30T08:37:56.123456");
        assert_eq!(nova_micro(UNIX_EPOCH), "1970-01-01T00:00:00.000000");
    }
}
