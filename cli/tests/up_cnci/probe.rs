//! Traffic probes for the `up_cnci` tests: TCP listeners and one-shot connections, run in the
//! cluster's network namespace or in a namespace inside it.

use std::io::BufRead;
use std::process::{Child, Command, Stdio};

use super::Cluster;

/// `python3 -c SCRIPT ARGS` in the named namespace `ns` inside the cluster's, or in the
/// cluster's own.
fn python(cluster: &Cluster, ns: Option<&str>, script: &str, args: &[&str]) -> Command {
    match ns {
        Some(ns) => {
            let mut all = vec!["netns", "exec", ns, "python3", "-c", script];
            all.extend_from_slice(args);
            cluster.command_in_ns("ip", &all)
        }
        None => {
            let mut all = vec!["-c", script];
            all.extend_from_slice(args);
            cluster.command_in_ns("python3", &all)
        }
    }
}

/// Spawns `command` and waits for its first line, `listening`.
fn spawn_listening(mut command: Command) -> Child {
    let mut server = command
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut out = std::io::BufReader::new(server.stdout.take().unwrap());
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "listening");
    server
}

/// A TCP listener on `port` (every address) in the named namespace `ns` inside the cluster's, or
/// in the cluster's own: each connection gets `said` and a newline. Returns once it listens.
pub fn listen(cluster: &Cluster, ns: Option<&str>, port: u16, said: &str) -> Child {
    const SERVER: &str = r#"
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(16)
print("listening", flush=True)
while True:
    c, _ = s.accept()
    c.sendall(sys.argv[2].encode() + b"\n")
    c.close()
"#;
    spawn_listening(python(cluster, ns, SERVER, &[&port.to_string(), said]))
}

/// One TCP connection to `addr`:`port` (2 s at most) from the named namespace `ns` inside the
/// cluster's, or from the cluster's own: what it read, or `failed: ...`.
pub fn connect_from(cluster: &Cluster, ns: Option<&str>, addr: &str, port: u16) -> String {
    const CLIENT: &str = r#"
import socket, sys
try:
    c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2)
    print(c.recv(100).decode().strip())
except OSError as e:
    print("failed:", e)
"#;
    let out = python(cluster, ns, CLIENT, &[addr, &port.to_string()])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
