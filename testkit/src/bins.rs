//! The workspace's binaries, for tests outside the crate that builds them (where cargo sets no
//! `CARGO_BIN_EXE_*`): they are next to the test executable's directory, where `cargo build
//! --bins` puts them.

use std::path::PathBuf;

/// The path of the workspace binary `name` (`cumulo-agent`, ...).
///
/// # Panics
/// When it is not built, saying how to build it.
pub fn path(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let dir = exe.parent().map(PathBuf::from).unwrap_or_default();
    // Test executables live in target/<profile>/deps; binaries one level up.
    for candidate in [dir.join(name), dir.join("..").join(name)] {
        if candidate.is_file() {
            return candidate;
        }
    }
    panic!(
        "{name} is not built next to {}: cargo build --workspace --bins first",
        dir.display()
    )
}
