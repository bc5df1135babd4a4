//! `--dump`: what a certificate says, as text for people (ours or any other X.509 certificate).

use std::fmt::Write;

use ssntp::UuidBinding;
use ssntp::cert::{AltName, CertInfo};
use time::format_description::BorrowedFormatItem;
use time::macros::format_description;

/// `2026-11-30 06:09:04 UTC`.
const UTC: &[BorrowedFormatItem<'static>] =
    format_description!("[year]-[month]-[day] [hour]:[minute]:[second] UTC");

/// A time as `2026-11-30 06:09:04 UTC`.
pub fn utc(unix: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(unix)
        .ok()
        .and_then(|t| t.format(UTC).ok())
        .unwrap_or_else(|| format!("{unix} s after 1970"))
}

/// The text `--dump` prints for one certificate, given the current time (Unix seconds).
pub fn render(info: &CertInfo, now: i64) -> String {
    let mut out = String::new();
    let mut line = |label: &str, value: &str| {
        let _ = writeln!(out, "{label:<20}{value}");
    };
    line("subject:", &info.subject);
    line("issuer:", &info.issuer);
    line("serial:", &info.serial);
    let state = if now < info.not_before {
        " (not yet valid)"
    } else if now >= info.not_after {
        " (expired)"
    } else {
        ""
    };
    line(
        "validity:",
        &format!("{} to {}{state}", utc(info.not_before), utc(info.not_after)),
    );
    line("key type:", &info.key.to_string());
    line("signature:", &info.signature);
    let ca = match (info.is_ca, info.self_issued) {
        (true, true) => "yes (self-signed root)",
        (true, false) => "yes",
        (false, _) => "no",
    };
    line("is CA:", ca);
    let roles = if info.roles.is_empty() {
        "none".to_string()
    } else {
        format!("{} ({:#04x})", info.roles, info.roles.bits())
    };
    line("roles:", &roles);
    let uuid = match info.binding {
        UuidBinding::Unbound => "none (not bound)".to_string(),
        UuidBinding::Bound(uuid) => uuid.to_string(),
        UuidBinding::Ambiguous => {
            "ambiguous (several or malformed urn:uuid: names: no endpoint accepts it)".to_string()
        }
    };
    line("bound UUID:", &uuid);
    let list = |kind: fn(&AltName) -> Option<String>| {
        let items: Vec<String> = info.alt_names.iter().filter_map(kind).collect();
        if items.is_empty() {
            "none".to_string()
        } else {
            items.join(", ")
        }
    };
    line(
        "DNS names:",
        &list(|n| match n {
            AltName::Dns(d) => Some(d.clone()),
            _ => None,
        }),
    );
    line(
        "IP addresses:",
        &list(|n| match n {
            AltName::Ip(ip) => Some(ip.to_string()),
            _ => None,
        }),
    );
    let others = list(|n| match n {
        AltName::Dns(_) | AltName::Ip(_) => None,
        other => Some(other.to_string()),
    });
    line("other names:", &others);
    let usage = if info.key_usage.is_empty() {
        "none".to_string()
    } else {
        info.key_usage.join(", ")
    };
    line("key usage:", &usage);
    let purposes = match &info.purposes {
        None => "none (any)".to_string(),
        Some(p) => {
            let mut names: Vec<String> = Vec::new();
            if p.any {
                names.push("anyExtendedKeyUsage".into());
            }
            if p.server_auth {
                names.push("serverAuth".into());
            }
            if p.client_auth {
                names.push("clientAuth".into());
            }
            for oid in &p.other {
                match ssntp::Role::from_oid(oid) {
                    Some(role) => names.push(format!("{role} ({oid})")),
                    None => names.push(oid.clone()),
                }
            }
            names.join(", ")
        }
    };
    line("extended key usage:", &purposes);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_formats() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(1_796_000_000), "2026-11-30 00:53:20 UTC");
        assert_eq!(utc(-1), "1969-12-31 23:59:59 UTC");
        assert_eq!(utc(253_402_300_799), "9999-12-31 23:59:59 UTC");
        assert!(utc(i64::MAX).contains("after 1970"));
    }
}
