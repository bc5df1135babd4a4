//! What the `cumulo` CLI's integration tests share.

use std::path::Path;

/// Whether `bins`, the cluster's binaries a test runs, are built next to `cumulo`; without them
/// the test is skipped (with a message) unless `CUMULO_REQUIRE_BINS=1`.
pub fn binaries_or_skip(bins: &[&str]) -> bool {
    let dir = Path::new(env!("CARGO_BIN_EXE_cumulo")).parent().unwrap();
    let missing: Vec<&str> = bins
        .iter()
        .copied()
        .filter(|b| !dir.join(b).is_file())
        .collect();
    if missing.is_empty() {
        return true;
    }
    assert!(
        std::env::var("CUMULO_REQUIRE_BINS").as_deref() != Ok("1"),
        "CUMULO_REQUIRE_BINS=1 but {missing:?} are not built: cargo build --bins"
    );
    eprintln!("SKIPPED: {missing:?} not built (cargo build --bins)");
    false
}
