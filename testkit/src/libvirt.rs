//! What the tests with real VMs share: whether they may run here (`CUMULO_LIBVIRT_URI`), one
//! VM-heavy test at a time, the tiny test guest, and a state directory that QEMU can reach.
//!
//! Without `CUMULO_LIBVIRT_URI` (e.g. `qemu:///system` with libvirtd running:
//! `scripts/libvirt.sh` starts one) the tests print why and pass, unless
//! `CUMULO_LIBVIRT_REQUIRED=1` (CI sets it): then they fail. `CUMULO_TINY_GUEST` may name a
//! directory with the guest's `kernel` and `initrd`; else `scripts/tiny-guest.sh` builds (or
//! finds) it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One VM-heavy test at a time in a test binary (two cores).
pub static VMS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The libvirt URI to test against, or `None` (after saying why) when the tests are skipped.
///
/// # Panics
/// When `CUMULO_LIBVIRT_REQUIRED=1` and there is none.
pub fn libvirt_uri() -> Option<String> {
    match std::env::var("CUMULO_LIBVIRT_URI") {
        Ok(uri) if !uri.is_empty() => Some(uri),
        _ => {
            let required = std::env::var("CUMULO_LIBVIRT_REQUIRED").is_ok_and(|v| v == "1");
            assert!(
                !required,
                "CUMULO_LIBVIRT_REQUIRED=1 but CUMULO_LIBVIRT_URI is not set: start libvirtd \
                 (scripts/libvirt.sh) and set it"
            );
            eprintln!(
                "SKIPPED: the libvirt tests need CUMULO_LIBVIRT_URI (e.g. qemu:///system with \
                 libvirtd running; see scripts/libvirt.sh)"
            );
            None
        }
    }
}

/// The tiny guest's directory (`kernel`, `initrd`): `CUMULO_TINY_GUEST`, else what
/// `scripts/tiny-guest.sh` builds.
///
/// # Panics
/// When the script that builds it fails.
pub fn tiny_guest() -> PathBuf {
    built("CUMULO_TINY_GUEST", "tiny-guest.sh")
}

/// The tiny guest as a bootable ISO image: `CUMULO_TINY_ISO`, else what `scripts/tiny-iso.sh`
/// builds.
///
/// # Panics
/// When the script that builds it fails.
pub fn tiny_iso() -> PathBuf {
    built("CUMULO_TINY_ISO", "tiny-iso.sh")
}

/// The path in `var`, else the one the script `scripts/<script>` prints.
fn built(var: &str, script: &str) -> PathBuf {
    if let Ok(path) = std::env::var(var) {
        return PathBuf::from(path);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scripts")
        .join(script);
    let out = Command::new("bash")
        .arg(&script)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{}: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// A state directory under `dir` that QEMU (another user under qemu:///system) can reach, with
/// the tiny guest as image `tiny`.
///
/// # Panics
/// On a file system error.
pub fn state_dir(dir: &Path) -> PathBuf {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let state = dir.join("state");
    let image = state.join("images").join("tiny");
    std::fs::create_dir_all(&image).unwrap_or_else(|e| panic!("{}: {e}", image.display()));
    let guest = tiny_guest();
    for f in ["kernel", "initrd"] {
        std::fs::copy(guest.join(f), image.join(f))
            .unwrap_or_else(|e| panic!("{}: {e}", guest.display()));
    }
    state
}

/// The agent's arguments for the libvirt backend at `uri`, under TCG.
pub fn libvirt_args(uri: &str) -> Vec<String> {
    [
        "--backend",
        "libvirt",
        "--libvirt-uri",
        uri,
        "--accel",
        "tcg",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}
