//! The `cumulo-scheduler` binary: refuses a certificate without the scheduler role in one line,
//! serves metrics, prints its heartbeat line, and exits cleanly on SIGTERM.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use ssntp::Role;
use std::io::{BufRead, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use testkit::TestPki;
use testkit::procfs::free_port;

fn get_metrics(port: u16) -> Option<String> {
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    tcp.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    tcp.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .ok()?;
    let mut body = String::new();
    tcp.read_to_string(&mut body).ok()?;
    Some(body)
}

#[test]
fn a_certificate_without_the_scheduler_role_is_refused_in_one_line() {
    let pki = TestPki::new();
    let dir = std::env::temp_dir().join(format!("sched-cli-role-{}", std::process::id()));
    let (ca, cert, key) = pki.leaf(Role::AGENT, None).write(&dir, "agent");
    let out = Command::new(env!("CARGO_BIN_EXE_cumulo-scheduler"))
        .args([
            "--ca-cert",
            ca.to_str().unwrap(),
            "--cert",
            cert.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
        ])
        .args(["--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("lack scheduler"), "{stderr}");
    // A usage error is exit code 2.
    let usage = Command::new(env!("CARGO_BIN_EXE_cumulo-scheduler"))
        .arg("--stats-interval")
        .arg("soon")
        .output()
        .unwrap();
    assert_eq!(usage.status.code(), Some(2));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn serves_metrics_prints_heartbeats_and_stops_on_sigterm() {
    let pki = TestPki::new();
    let dir = std::env::temp_dir().join(format!("sched-cli-run-{}", std::process::id()));
    let (ca, cert, key) = pki.leaf(Role::SCHEDULER, None).write(&dir, "scheduler");
    let (ssntp_port, metrics_port) = (free_port(), free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_cumulo-scheduler"))
        .args([
            "--ca-cert",
            ca.to_str().unwrap(),
            "--cert",
            cert.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
        ])
        .args(["--listen", &format!("127.0.0.1:{ssntp_port}")])
        .args(["--metrics-listen", &format!("127.0.0.1:{metrics_port}")])
        .args([
            "--state-dir",
            dir.join("state").to_str().unwrap(),
            "--heartbeat",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Metrics appear within a few seconds (the summary is refreshed every second).
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(body) = get_metrics(metrics_port)
            && body.starts_with("HTTP/1.1 200")
            && body.contains("cumulo_scheduler_sessions{role=\"agent\"} 0")
        {
            assert!(
                body.contains("cumulo_scheduler_placement_seconds_count 0"),
                "{body}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "no metrics");
        std::thread::yield_now();
    }
    // The heartbeat line, then a clean stop on SIGTERM.
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("placements") {
        line.clear();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "stderr closed");
    }
    assert!(line.contains("controllers 0 nodes 0"), "{line}");
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "did not stop on SIGTERM");
        std::thread::yield_now();
    };
    assert!(status.success(), "{status}");
    // It kept a UUID in its state directory (its certificate binds none).
    assert!(dir.join("state/ssntp-scheduler.uuid").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}
