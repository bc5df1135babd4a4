//! Durations and sizes as people write them on command lines and in configuration files
//! (`30s`, `500ms`, `1MiB`): one parser for every cumulo daemon.

use std::time::Duration;

/// A duration: `30s`, `500ms`, `2m`, `1h`, or bare seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let n: f64 = number
        .parse()
        .map_err(|_| format!("{s:?}: not a duration (e.g. 30s, 500ms)"))?;
    let secs = match unit {
        "" | "s" => n,
        "ms" => n / 1e3,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (use ms, s, m or h)")),
    };
    if !(0.0..=1e9).contains(&secs) {
        return Err(format!("{s:?}: out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A duration that must not be zero (intervals and timeouts).
pub fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        d if d.is_zero() => Err(format!("{s:?}: must be more than zero")),
        d => Ok(d),
    }
}

/// A frame size in bytes: `1MiB`, `512KiB`, `16MiB`, or bare bytes; 1 byte to 16 MiB.
pub fn parse_size(s: &str) -> Result<u32, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?}: not a size (e.g. 1MiB)"))?;
    let mult = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" | "k" => 1 << 10,
        "mib" | "m" => 1 << 20,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (use KiB or MiB)")),
    };
    let bytes = n
        .checked_mul(mult)
        .ok_or_else(|| format!("{s:?}: too large"))?;
    if bytes == 0 || bytes > u64::from(ssntp::frame::MAX_FRAME_CEILING) {
        return Err(format!("{s:?}: must be between 1 byte and 16MiB"));
    }
    Ok(bytes as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_sizes() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_positive_duration("0s").is_err());
        assert!(parse_positive_duration("0").is_err());
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("512KiB"), Ok(512 << 10));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("17MiB").is_err());
        assert!(parse_size("0").is_err());
        assert!(parse_size("1GiB").is_err());
    }
}
