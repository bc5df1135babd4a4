//! libvirt's errors in words for the user: what a START_FAILURE's `message` says when libvirt
//! refused to define or boot a domain.
//!
//! libvirt passes QEMU's stderr through in its own wrapping: an error class (`internal error:`),
//! a note that the monitor closed (with the domain's name in newer versions), then QEMU's lines,
//! each with a timestamp and the binary's name, often after the whole command-line option that
//! failed (a `-blockdev` JSON object of a few hundred bytes). [`humanize`] keeps QEMU's own
//! sentence and drops the wrapping:
//!
//! ```text
//! internal error: qemu unexpectedly closed the monitor: 2026-12-01T15:23:31.908610Z
//! qemu-system-x86_64: -blockdev {"driver":"file","filename":"/x/seed.iso",...}: Could not open
//! '/x/seed.iso': Permission denied
//! ```
//! becomes `QEMU could not open /x/seed.iso: Permission denied`. A message of another shape is
//! kept, on one line, without libvirt's meaningless `internal error:` prefix. The whole text
//! stays in the agent's log.

use super::conn::ConnError;
use crate::backend::BackendError;

/// What libvirt writes before QEMU's stderr when QEMU exits while it starts a domain (older
/// and newer spellings; the newer one may be followed by `(vm='name')`).
const MONITOR_CLOSED: [&str; 3] = [
    "qemu unexpectedly closed the monitor",
    "QEMU unexpectedly closed the monitor",
    "process exited while connecting to monitor",
];

/// libvirt's error-class prefix that tells the user nothing.
const INTERNAL: &str = "internal error: ";

/// A launch that libvirt refused, as the backend reports it: the message made readable (the
/// original is logged).
pub(super) fn launch(e: ConnError) -> BackendError {
    let raw = e.to_string();
    let message = match &e {
        ConnError::Failed(m) => humanize(m),
        ConnError::Unreachable { .. } | ConnError::NoDomain => raw.clone(),
    };
    if message != raw {
        tracing::warn!(error = %raw, "libvirt refused the launch");
    }
    BackendError::Launch(message)
}

/// libvirt's error message `m` as the user should read it (see the module docs).
pub fn humanize(m: &str) -> String {
    let m = m.trim();
    match MONITOR_CLOSED
        .iter()
        .find_map(|marker| m.find(marker).map(|at| (at, marker.len())))
    {
        Some((at, len)) => qemu_said(after_vm_name(&m[at + len..])).unwrap_or_else(|| plain(m)),
        None => plain(m),
    }
}

/// A message of no known shape: on one line, without `internal error: `.
fn plain(m: &str) -> String {
    one_line(m.strip_prefix(INTERNAL).unwrap_or(m))
}

/// Collapses every run of whitespace (newlines included) into one space.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// What follows the monitor note: an optional ` (vm='name')`, then `: `.
fn after_vm_name(rest: &str) -> &str {
    let rest = rest.trim_start();
    let rest = match rest.strip_prefix("(vm=") {
        Some(named) => named.find(')').map_or(named, |end| &named[end + 1..]),
        None => rest,
    };
    rest.trim_start_matches(':').trim_start()
}

/// QEMU's error from its stderr as libvirt relays it: the last line that is not a warning,
/// with the lines that continue it; `None` when there is nothing to read.
fn qemu_said(stderr: &str) -> Option<String> {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    // A line of QEMU's own starts with a timestamp or with the binary's name; the others
    // continue the line before.
    let starts = |l: &str| timestamped(l).is_some() || binary_prefixed(l).is_some();
    let firsts: Vec<usize> = (0..lines.len()).filter(|&i| starts(lines[i])).collect();
    let is_warning = |i: usize| strip_line(lines[i]).starts_with("warning:");
    let first = firsts
        .iter()
        .rev()
        .copied()
        .find(|&i| !is_warning(i))
        .or(firsts.last().copied())
        .unwrap_or(0);
    let end = firsts
        .iter()
        .copied()
        .find(|&i| i > first)
        .unwrap_or(lines.len());
    let mut text = strip_option(strip_line(lines.get(first)?)).to_string();
    for more in lines.get(first + 1..end).unwrap_or_default() {
        if !text.ends_with(['.', '!', '?', ':']) {
            text.push('.');
        }
        text.push(' ');
        text.push_str(more);
    }
    let text = one_line(&text);
    if text.is_empty() {
        return None;
    }
    Some(match could_not_open(&text) {
        Some(said) => said,
        None => format!("QEMU: {text}"),
    })
}

/// `2026-12-01T15:23:31.908610Z rest` → `rest` (QEMU stamps its log lines in RFC 3339 UTC).
fn timestamped(line: &str) -> Option<&str> {
    let (stamp, rest) = line.split_once(' ')?;
    time::OffsetDateTime::parse(stamp, &time::format_description::well_known::Rfc3339)
        .is_ok()
        .then_some(rest)
}

/// `qemu-system-x86_64: rest` (or `qemu-kvm: `) → `rest`.
fn binary_prefixed(line: &str) -> Option<&str> {
    let (binary, rest) = line.split_once(": ")?;
    (binary.starts_with("qemu") && !binary.contains(' ')).then_some(rest)
}

/// One line of QEMU's without its timestamp and binary name.
fn strip_line(line: &str) -> &str {
    let line = timestamped(line).unwrap_or(line);
    binary_prefixed(line).unwrap_or(line)
}

/// `-blockdev {...}: message` or `-drive file=...,if=none: message` → `message`: the option
/// that failed says nothing the message does not.
fn strip_option(text: &str) -> &str {
    if !text.starts_with('-') {
        return text;
    }
    let Some((_, arg)) = text.split_once(' ') else {
        return text;
    };
    let after = if arg.starts_with('{') {
        json_end(arg).map(|end| &arg[end..])
    } else {
        arg.find(": ").map(|at| &arg[at..])
    };
    after
        .and_then(|rest| rest.strip_prefix(": "))
        .unwrap_or(text)
}

/// The byte just past the JSON object that opens `text` (strings may hold braces).
fn json_end(text: &str) -> Option<usize> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_string => escaped = true,
            '"' => in_string = !in_string,
            '{' if !in_string => depth += 1,
            '}' if !in_string => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// `... Could not open '/x': Permission denied` → `QEMU could not open /x: Permission denied`
/// (the last such clause: a backing file's comes after its overlay's).
fn could_not_open(text: &str) -> Option<String> {
    const CLAUSE: &str = "Could not open '";
    let at = text.rfind(CLAUSE)?;
    let rest = &text[at + CLAUSE.len()..];
    let (path, why) = rest.split_once("': ")?;
    Some(format!("QEMU could not open {path}: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Real shapes, from libvirt 6 to 10 (paths and times changed).
    #[test]
    fn qemu_could_not_open_a_file() {
        let seed = r#"internal error: qemu unexpectedly closed the monitor: 2026-12-01T15:23:31.908610Z qemu-system-x86_64: -blockdev {"driver":"file","filename":"/x/seed.iso","node-name":"libvirt-2-storage","auto-read-only":true,"discard":"unmap"}: Could not open '/x/seed.iso': Permission denied"#;
        assert_eq!(
            humanize(seed),
            "QEMU could not open /x/seed.iso: Permission denied"
        );
        // Newer libvirt names the domain; the JSON of the option may hold ": " in a string.
        let named = r#"internal error: QEMU unexpectedly closed the monitor (vm='cumulo-1a2b'): 2026-12-01T15:23:31.908610Z qemu-system-x86_64: -blockdev {"driver":"file","filename":"/a: b/disk.qcow2","node-name":"x"}: Could not open '/a: b/disk.qcow2': No such file or directory"#;
        assert_eq!(
            humanize(named),
            "QEMU could not open /a: b/disk.qcow2: No such file or directory"
        );
        // Older libvirt, -drive syntax.
        let drive = "internal error: process exited while connecting to monitor: 2019-05-02T10:01:02.123456Z qemu-system-x86_64: -drive file=/var/lib/cumulo/instances/u/disk.qcow2,format=qcow2,if=none,id=drive-virtio-disk0: Could not open '/var/lib/cumulo/instances/u/disk.qcow2': Permission denied";
        assert_eq!(
            humanize(drive),
            "QEMU could not open /var/lib/cumulo/instances/u/disk.qcow2: Permission denied"
        );
        // A missing backing file: the inner clause names the file that is missing.
        let backing = r#"internal error: qemu unexpectedly closed the monitor: 2026-12-01T15:23:31.908610Z qemu-system-x86_64: -blockdev {"node-name":"libvirt-1-format","driver":"qcow2","file":"libvirt-1-storage"}: Could not open backing file: Could not open '/images/base.qcow2': No such file or directory"#;
        assert_eq!(
            humanize(backing),
            "QEMU could not open /images/base.qcow2: No such file or directory"
        );
    }

    #[test]
    fn other_qemu_errors_keep_qemus_sentence() {
        let memory = "internal error: qemu unexpectedly closed the monitor: 2026-12-01T15:23:31.908610Z qemu-system-x86_64: cannot set up guest memory 'pc.ram': Cannot allocate memory";
        assert_eq!(
            humanize(memory),
            "QEMU: cannot set up guest memory 'pc.ram': Cannot allocate memory"
        );
        let tun = "internal error: qemu unexpectedly closed the monitor: 2026-12-01T15:23:31.908610Z qemu-system-x86_64: -netdev tap,ifname=ct1a2b3c4d,script=no,downscript=no,id=hostnet0: could not open /dev/net/tun: Operation not permitted";
        assert_eq!(
            humanize(tun),
            "QEMU: could not open /dev/net/tun: Operation not permitted"
        );
    }

    #[test]
    fn warnings_are_skipped_and_continuation_lines_kept() {
        let lock = "internal error: qemu unexpectedly closed the monitor: 2026-12-01T15:23:31.900000Z qemu-system-x86_64: warning: host doesn't support requested feature: CPUID.80000001H:ECX.svm [bit 2]\n2026-12-01T15:23:31.908610Z qemu-system-x86_64: -blockdev {\"driver\":\"qcow2\",\"file\":\"s\"}: Failed to get \"write\" lock\nIs another process using the image [/x/disk.qcow2]?";
        assert_eq!(
            humanize(lock),
            "QEMU: Failed to get \"write\" lock. Is another process using the image [/x/disk.qcow2]?"
        );
        // Only warnings: the last one is all there is.
        let only = "internal error: qemu unexpectedly closed the monitor: 2026-12-01T15:23:31.900000Z qemu-system-x86_64: warning: something odd";
        assert_eq!(humanize(only), "QEMU: warning: something odd");
    }

    #[test]
    fn messages_of_other_shapes_are_kept_on_one_line() {
        let kvm = "unsupported configuration: Domain requires KVM, but it is not available. Check that virtualization is enabled in the host BIOS, and host configuration is setup to load the kvm modules.";
        assert_eq!(humanize(kvm), kvm);
        assert_eq!(
            humanize(
                "internal error: Child process (/usr/sbin/dmidecode -q -t 0,1) unexpected exit status 1:\n  more"
            ),
            "Child process (/usr/sbin/dmidecode -q -t 0,1) unexpected exit status 1: more"
        );
        let storage =
            "Cannot access storage file '/x/seed.iso' (as uid:64055, gid:64055): Permission denied";
        assert_eq!(humanize(storage), storage);
        // A monitor note with nothing after it.
        assert_eq!(
            humanize("internal error: qemu unexpectedly closed the monitor: "),
            "qemu unexpectedly closed the monitor:"
        );
    }

    #[test]
    fn launch_maps_every_conn_error_to_a_launch_failure() {
        let failed = launch(ConnError::Failed(
            "internal error: qemu unexpectedly closed the monitor: 2026-12-01T15:23:31.908610Z qemu-system-x86_64: -blockdev {\"filename\":\"/x\"}: Could not open '/x': Permission denied".into(),
        ));
        assert_eq!(
            failed,
            BackendError::Launch("QEMU could not open /x: Permission denied".into())
        );
        assert_eq!(
            failed.message(),
            "QEMU could not open /x: Permission denied"
        );
        let unreachable = launch(ConnError::Unreachable {
            uri: "qemu:///system".into(),
            message: "Failed to connect socket to '/run/libvirt/virtqemud-sock': No such file or directory".into(),
        });
        assert_eq!(
            unreachable.message(),
            "libvirt at qemu:///system is unreachable: Failed to connect socket to '/run/libvirt/virtqemud-sock': No such file or directory"
        );
    }
}
