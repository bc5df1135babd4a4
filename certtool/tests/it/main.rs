//! Integration tests of `cumulo-cert`: the built binary's command line and errors (`cli`), what
//! `openssl` makes of its output (`openssl`), and real mutual TLS 1.3 handshakes in rustls with
//! its certificates (`tls`).

// Test helpers live outside `#[test]` functions, where clippy.toml's test allowances do not reach.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cli;
mod openssl;
mod tls;

use std::path::Path;
use std::process::{Command, Output};

/// Runs the built `cumulo-cert` in `dir`.
pub fn cumulo_cert(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cumulo-cert"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("cumulo-cert runs")
}

/// Runs `cumulo-cert` and insists on success; returns its standard output.
pub fn ok(dir: &Path, args: &[&str]) -> String {
    let out = cumulo_cert(dir, args);
    assert!(
        out.status.success(),
        "cumulo-cert {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The names in a directory (recursively, relative), sorted.
pub fn listing(dir: &Path) -> Vec<String> {
    let mut names = Vec::new();
    for entry in walk(dir) {
        names.push(
            entry
                .strip_prefix(dir)
                .unwrap()
                .to_string_lossy()
                .into_owned(),
        );
    }
    names.sort();
    names
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        }
        out.push(path);
    }
    out
}

/// A directory with a CA (`ca.pem`, `ca.key`) made by the binary.
pub fn with_ca() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    ok(
        dir.path(),
        &["--anchor", "--host", "ca.test", "--out", "ca"],
    );
    dir
}
