//! The REST API under hostile load: what an honest user sees while unauthenticated clients try to
//! knock the API over. The API is served in-process (plain HTTP on 127.0.0.1, SQLite store, the
//! fake cluster, production password hashing: 600,000 PBKDF2 rounds) on a runtime of its own; an
//! honest client on 127.0.0.1 logs in and lists servers, and attackers use 127.0.0.2 and up.
//! Three phases of `--seconds` each:
//!
//! 1. quiet: the honest client alone;
//! 2. login flood: `--flooders` connections per attacker address, each logging in again and
//!    again as a made-up user with a wrong password (after a refusal, 429 or 503, it waits 50 ms:
//!    the attackers share this machine's two cores with the server);
//! 3. slowloris: up to `--holders` connections per attacker address, each sending half a
//!    request's headers and then nothing, reconnecting whenever the server closes it.
//!
//! For each phase: p50/p99 of the honest login (`POST /v3/auth/tokens`) and of an authenticated
//! `GET /compute/v2.1/servers`, and how many of them failed (refused, timed out after 30 s, or
//! the connection failed); and what the attackers got.
//!
//! ```text
//! cargo bench -p controller --bench hostile_api -- --seconds 20
//! ```
//!
//! Figures: docs/reliability.md (## Bad input: hostile API clients).
// A bench binary prints its figures and fails loudly.
#![allow(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)]

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use controller::api::password;
use controller::api::testing::{FakeCluster, TestApi};
use store::{NewTenant, NewUser, Quota, Role, SqliteStore, Store};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;

const HONEST_USER: &str = "honest";
const HONEST_PASSWORD: &str = "honest-password";
/// How long a request may take before it counts as timed out.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

struct Opts {
    seconds: u64,
    addresses: u8,
    flooders: usize,
    holders: usize,
}

fn parse_opts() -> Opts {
    let mut o = Opts {
        seconds: 20,
        addresses: 8,
        flooders: 16,
        holders: 256,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut v = || {
            it.next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("{a} wants a number"))
        };
        match a.as_str() {
            "--seconds" => o.seconds = v().max(1),
            "--addresses" => o.addresses = v().clamp(1, 200) as u8,
            "--flooders" => o.flooders = v() as usize,
            "--holders" => o.holders = v() as usize,
            // `cargo bench` passes --bench.
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    o
}

/// The status and the `X-Subject-Token` header of one request sent from `from` on a connection
/// of its own.
async fn http(
    from: IpAddr,
    to: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> Result<(u16, Option<String>), String> {
    let exchange = async {
        let socket = TcpSocket::new_v4().map_err(|e| e.to_string())?;
        socket
            .bind(SocketAddr::new(from, 0))
            .map_err(|e| e.to_string())?;
        let mut stream = socket.connect(to).await.map_err(|e| e.to_string())?;
        let auth = token.map_or(String::new(), |t| format!("X-Auth-Token: {t}\r\n"));
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {to}\r\nConnection: close\r\n{auth}\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut answer = Vec::new();
        stream
            .read_to_end(&mut answer)
            .await
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&answer);
        let status = text
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| "no HTTP answer".to_string())?;
        let token = text.lines().find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("x-subject-token")
                .then(|| value.trim().to_string())
        });
        Ok((status, token))
    };
    tokio::time::timeout(REQUEST_TIMEOUT, exchange)
        .await
        .map_err(|_| "timed out".to_string())?
}

fn login_body(user: &str, password: &str) -> String {
    serde_json::json!({"auth": {
        "identity": {"methods": ["password"], "password": {"user": {
            "name": user, "domain": {"name": "Default"}, "password": password}}},
        "scope": {"project": {"name": HONEST_USER, "domain": {"name": "Default"}}}}})
    .to_string()
}

fn attacker(i: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2 + i))
}

/// Latencies of what succeeded and counts of how the rest failed.
#[derive(Default)]
struct Sample {
    ok: Vec<Duration>,
    failed: BTreeMap<String, u64>,
}

impl Sample {
    fn record(
        &mut self,
        started: Instant,
        result: Result<(u16, Option<String>), String>,
        want: u16,
    ) {
        match result {
            Ok((status, _)) if status == want => self.ok.push(started.elapsed()),
            Ok((status, _)) => *self.failed.entry(status.to_string()).or_default() += 1,
            Err(e) => *self.failed.entry(e).or_default() += 1,
        }
    }

    fn summary(&mut self) -> String {
        self.ok.sort();
        let pct = |p: f64| -> String {
            if self.ok.is_empty() {
                return "-".into();
            }
            let i = ((self.ok.len() as f64 - 1.0) * p).round() as usize;
            format!("{:.0} ms", self.ok[i].as_secs_f64() * 1000.0)
        };
        let failed: Vec<String> = self
            .failed
            .iter()
            .map(|(k, n)| format!("{n}× {k}"))
            .collect();
        format!(
            "{} ok, p50 {}, p99 {}{}",
            self.ok.len(),
            pct(0.5),
            pct(0.99),
            if failed.is_empty() {
                String::new()
            } else {
                format!("; failed: {}", failed.join(", "))
            }
        )
    }
}

/// The honest user until `stop`: a login, then five server lists with the token it got (or the
/// first token, if the login failed), then a pause of 200 ms.
async fn honest(api: SocketAddr, first_token: String, stop: Arc<AtomicBool>) -> (Sample, Sample) {
    let me = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let (mut logins, mut gets) = (Sample::default(), Sample::default());
    let body = login_body(HONEST_USER, HONEST_PASSWORD);
    let mut token = first_token;
    while !stop.load(Ordering::SeqCst) {
        let started = Instant::now();
        let result = http(me, api, "POST", "/v3/auth/tokens", None, &body).await;
        if let Ok((201, Some(t))) = &result {
            token = t.clone();
        }
        logins.record(started, result, 201);
        for _ in 0..5 {
            let started = Instant::now();
            let result = http(me, api, "GET", "/compute/v2.1/servers", Some(&token), "").await;
            gets.record(started, result, 200);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    (logins, gets)
}

#[derive(Default)]
struct Attack {
    answers: Mutex<BTreeMap<String, u64>>,
    held: AtomicU64,
    most_held: AtomicU64,
    opened: AtomicU64,
}

async fn flood(
    api: SocketAddr,
    from: IpAddr,
    who: usize,
    attack: Arc<Attack>,
    stop: Arc<AtomicBool>,
) {
    let mut n = 0u64;
    while !stop.load(Ordering::SeqCst) {
        n += 1;
        let body = login_body(&format!("nobody-{from}-{who}-{n}"), "wrong-password");
        let result = http(from, api, "POST", "/v3/auth/tokens", None, &body).await;
        let key = match &result {
            Ok((status, _)) => status.to_string(),
            Err(e) => e.clone(),
        };
        *attack.answers.lock().unwrap().entry(key).or_default() += 1;
        if !matches!(result, Ok((401, _))) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn hold(api: SocketAddr, from: IpAddr, attack: Arc<Attack>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::SeqCst) {
        let connect = async {
            let socket = TcpSocket::new_v4().ok()?;
            socket.bind(SocketAddr::new(from, 0)).ok()?;
            socket.connect(api).await.ok()
        };
        let Ok(Some(mut stream)) = tokio::time::timeout(Duration::from_secs(5), connect).await
        else {
            continue;
        };
        attack.opened.fetch_add(1, Ordering::SeqCst);
        let now = attack.held.fetch_add(1, Ordering::SeqCst) + 1;
        attack.most_held.fetch_max(now, Ordering::SeqCst);
        let head = format!("POST /v3/auth/tokens HTTP/1.1\r\nHost: {api}\r\n");
        if stream.write_all(head.as_bytes()).await.is_ok() {
            let mut buf = [0u8; 512];
            // Wait until the server closes it (or the phase ends).
            loop {
                tokio::select! {
                    read = stream.read(&mut buf) => match read {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    },
                    () = tokio::time::sleep(Duration::from_millis(200)) => {
                        if stop.load(Ordering::SeqCst) { break; }
                    }
                }
            }
        }
        attack.held.fetch_sub(1, Ordering::SeqCst);
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Phase {
    Quiet,
    Flood,
    Slowloris,
}

fn run_phase(phase: Phase, api: SocketAddr, token: &str, o: &Opts) {
    let stop = Arc::new(AtomicBool::new(false));
    let attack = Arc::new(Attack::default());
    let attackers = {
        let (stop, attack) = (stop.clone(), attack.clone());
        let (addresses, flooders, holders) = (o.addresses, o.flooders, o.holders);
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let mut tasks = tokio::task::JoinSet::new();
                for a in 0..addresses {
                    let from = attacker(a);
                    match phase {
                        Phase::Quiet => {}
                        Phase::Flood => {
                            for who in 0..flooders {
                                tasks.spawn(flood(api, from, who, attack.clone(), stop.clone()));
                            }
                        }
                        Phase::Slowloris => {
                            for _ in 0..holders {
                                tasks.spawn(hold(api, from, attack.clone(), stop.clone()));
                            }
                        }
                    }
                }
                while tasks.join_next().await.is_some() {}
            });
        })
    };
    if phase != Phase::Quiet {
        // Let the attack build up before measuring.
        std::thread::sleep(Duration::from_secs(3));
    }
    let honest_stop = Arc::new(AtomicBool::new(false));
    let measuring = {
        let (stop, token) = (honest_stop.clone(), token.to_string());
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(honest(api, token, stop))
        })
    };
    std::thread::sleep(Duration::from_secs(o.seconds));
    honest_stop.store(true, Ordering::SeqCst);
    let (mut logins, mut gets) = measuring.join().unwrap();
    stop.store(true, Ordering::SeqCst);
    attackers.join().unwrap();
    let name = match phase {
        Phase::Quiet => "quiet",
        Phase::Flood => "login flood",
        Phase::Slowloris => "slowloris",
    };
    println!("## {name}");
    println!("  honest login: {}", logins.summary());
    println!("  honest GET:   {}", gets.summary());
    match phase {
        Phase::Quiet => {}
        Phase::Flood => {
            let answers = attack.answers.lock().unwrap();
            let text: Vec<String> = answers.iter().map(|(k, n)| format!("{n}× {k}")).collect();
            println!("  attackers' logins: {}", text.join(", "));
        }
        Phase::Slowloris => println!(
            "  attackers' connections: {} opened, at most {} held at once",
            attack.opened.load(Ordering::SeqCst),
            attack.most_held.load(Ordering::SeqCst)
        ),
    }
}

fn main() {
    let o = parse_opts();
    let dir = tempfile::tempdir().unwrap();
    let server = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("db")).unwrap());
    let tenant = store
        .create_tenant(NewTenant {
            name: HONEST_USER.into(),
            quota: Quota::default(),
            subnet_prefix: 24,
        })
        .unwrap();
    let user = store
        .create_user(NewUser {
            name: HONEST_USER.into(),
            password_hash: password::hash(HONEST_PASSWORD, password::DEFAULT_ITERATIONS).unwrap(),
        })
        .unwrap();
    store.grant_role(user.id, tenant.id, Role::Member).unwrap();
    let cluster = Arc::new(FakeCluster::new(store.clone()));
    let api = server
        .block_on(TestApi::start_with(store, cluster, None, |c| {
            c.password_iterations = password::DEFAULT_ITERATIONS;
        }))
        .unwrap();
    let addr = api.addr;
    println!(
        "hostile API bench: {} s per phase, {} attacker addresses, {} flooders and up to {} \
         held connections per address",
        o.seconds, o.addresses, o.flooders, o.holders
    );
    let body = login_body(HONEST_USER, HONEST_PASSWORD);
    let me = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let token = match server.block_on(http(me, addr, "POST", "/v3/auth/tokens", None, &body)) {
        Ok((201, Some(token))) => token,
        other => panic!("the honest login failed: {other:?}"),
    };
    for phase in [Phase::Quiet, Phase::Flood, Phase::Slowloris] {
        run_phase(phase, addr, &token, &o);
    }
    server.block_on(api.stop()).unwrap();
}
