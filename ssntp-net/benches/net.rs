//! Benchmarks of SSNTP over loopback TLS 1.3 (run: `cargo bench -p ssntp-net --bench net -- <case>`):
//!
//! - `throughput [frames] [payload bytes]`: one controller sends frames (64-byte payloads by
//!   default) to the server, which receives them as typed events (a message per frame); then
//!   the same frames to a server run with `Delivery::Views`, taken as views of each read (each
//!   payload checked by the session, and either left unread or decoded again by the bench's
//!   application); then the frame path with
//!   nothing to decode (an agent, its budget lifted, sends FULL without a payload); then one
//!   agent within its default read budget (its burst and two seconds more); then, as the
//!   baseline, a bare tokio-rustls stream moves the controller run's bytes (read and
//!   discarded). `THROUGHPUT_READ_BUFFER` sets the server's `ConnConfig::unbudgeted_read_buffer`
//!   (bytes), the read buffer of the sessions without a read budget: the controller's and the
//!   empty frames' runs (the budgeted agent's reads 16 KiB). `THROUGHPUT_PAYLOAD=delete` makes
//!   the controller send DELETE (75 bytes, two UUIDs and a flag: nothing to allocate when
//!   decoded) instead of the 64-byte text payload (`text`, the default); the agent's run keeps
//!   the text payload.
//! - `rtt [n]`: request/response round trips (client → server app → client), p50 and p99; the
//!   client an agent (`RTT_ROLE=controller` for a controller's session).
//! - `handshakes [n] [concurrency]`: full TCP + mutual TLS + SSNTP handshakes per second.
//! - `idle [sessions]`: that many idle sessions to one server process: its RSS, then a server
//!   restart and the time until every client is back. The clients' process runs at nice 10, the
//!   server's handshake thread's default; `IDLE_HANDSHAKE_NICE` sets that thread's.
#![allow(clippy::unwrap_used, clippy::print_stdout, missing_docs)]

use bytes::BytesMut;
use ssntp::frame::{DEFAULT_MAX_FRAME, Frame};
use ssntp::payload::{Connect, Reason};
use ssntp::{Payload, Role, Uuid};
use ssntp_net::{
    Client, ClientConfig, ClientEvent, Delivery, ReadRates, Routes, Server, ServerConfig,
    ServerEvent, TlsIdentity,
};
use std::time::{Duration, Instant};
use testkit::TestPki;
use testkit::procfs::process_cpu;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_util::sync::CancellationToken;

const SERVER: Uuid = Uuid::from_bytes([0x5c; 16]);

/// A PROTOCOL_VIOLATION whose CBOR payload is exactly `size` bytes (any role may send it).
fn payload_of(size: usize) -> Payload {
    let size = size.max(10);
    let mut n = size.saturating_sub(8);
    loop {
        let p = Payload::ProtocolViolation(Reason::new("x".repeat(n)));
        match p.encode().len() {
            l if l == size => return p,
            l if l > size => n -= 1,
            _ => n += 1,
        }
    }
}

async fn start_server(
    pki: &TestPki,
    routes: Routes,
    tune: impl FnOnce(&mut ServerConfig),
) -> (
    String,
    tokio::sync::mpsc::Receiver<ServerEvent>,
    ssntp_net::ServerHandle,
    CancellationToken,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = format!("localhost:{}", listener.local_addr().unwrap().port());
    let mut config = ServerConfig::new(pki.identity(Role::SCHEDULER, Some(SERVER)), SERVER);
    config.routes = routes;
    tune(&mut config);
    let (server, handle, events) = Server::new(config).unwrap();
    let stop = CancellationToken::new();
    tokio::spawn(server.run(listener, stop.clone()));
    (addr, events, handle, stop)
}

async fn start_client(
    identity: TlsIdentity,
    uuid: Uuid,
    role: Role,
    addr: &str,
) -> (
    ssntp_net::ClientHandle,
    tokio::sync::mpsc::Receiver<ClientEvent>,
) {
    let mut config = ClientConfig::new(identity, uuid, role, vec![addr.to_string()]);
    config.conn.queue_frames = 65_536;
    let (handle, mut events) = Client::start(config).unwrap();
    loop {
        if let Some(ClientEvent::Connected { .. }) = events.recv().await {
            return (handle, events);
        }
    }
}

/// How the bench's application takes the frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Take {
    /// Messages (`Delivery::Messages`): each payload decoded by the session.
    Messages,
    /// Views (`Delivery::Views`), each payload checked by the session and left unread.
    Views,
    /// Views, each payload decoded again by the application as it reads it.
    ViewsDecoded,
}

/// Typed events through the full stack: one client of `role` sends `frames` frames of `payload`
/// to a server with the read budgets `rates`, taken as `take` says; how many arrived as typed
/// events, how long that took, and the CPU time the process used meanwhile (sender and
/// receiver together).
async fn typed_run(
    pki: &TestPki,
    role: Role,
    rates: ReadRates,
    frames: usize,
    payload: &Payload,
    take: Take,
) -> (usize, Duration, Duration) {
    let (addr, mut events, _h, stop) = start_server(pki, Routes::new(), |c| {
        c.event_queue = 65_536;
        c.read_rates = rates;
        if take != Take::Messages {
            c.delivery = Delivery::Views;
        }
        if let Ok(bytes) = std::env::var("THROUGHPUT_READ_BUFFER") {
            c.conn.unbudgeted_read_buffer = bytes
                .parse()
                .expect("THROUGHPUT_READ_BUFFER: a size in bytes, digits only");
        }
    })
    .await;
    let id = Uuid::from_bytes([1; 16]);
    let (client, _ce) = start_client(pki.identity(role, Some(id)), id, role, &addr).await;
    let _ = events.recv().await; // Connected
    let frame = Frame::new(client.uuid(), payload);
    let operand = payload.operand();
    let start = Instant::now();
    let cpu = process_cpu();
    let sender = tokio::spawn(async move {
        for _ in 0..frames {
            client.send_wait(&frame).await.unwrap();
        }
        client
    });
    let mut got = 0usize;
    let mut batch = Vec::with_capacity(1024);
    while got < frames {
        batch.clear();
        if events.recv_many(&mut batch, 1024).await == 0 {
            break;
        }
        for e in &batch {
            match e {
                ServerEvent::Frames { messages, .. } => {
                    got += messages
                        .iter()
                        .filter(|m| m.payload.operand() == operand)
                        .count();
                }
                ServerEvent::Views { frames, .. } if take == Take::ViewsDecoded => {
                    got += frames
                        .iter()
                        .filter(|f| f.payload().is_ok_and(|p| p.operand() == operand))
                        .count();
                }
                ServerEvent::Views { frames, .. } => {
                    got += frames.iter().filter(|f| f.operand() == operand).count();
                }
                _ => {}
            }
        }
    }
    let elapsed = start.elapsed();
    let cpu = process_cpu() - cpu;
    let _client = sender.await.unwrap();
    stop.cancel();
    (got, elapsed, cpu)
}

async fn throughput(frames: usize, size: usize) {
    let pki = TestPki::new();
    let payload = match std::env::var("THROUGHPUT_PAYLOAD").as_deref() {
        Ok("delete") => Payload::Delete(ssntp::payload::Delete {
            instance_uuid: Uuid::from_bytes([0x1a; 16]),
            workload_agent_uuid: Uuid::from_bytes([0xa6; 16]),
            stop: false,
        }),
        Ok("text") | Err(_) => payload_of(size),
        Ok(other) => panic!("THROUGHPUT_PAYLOAD: text or delete, not {other}"),
    };
    // What any role may send, for the agent's run: the text payload.
    let agent_payload = payload_of(size);
    let size = payload.encode().len();
    // A controller's session has no read budget: the typed path as fast as it goes.
    let rates = ReadRates::default();
    let (got, typed, typed_cpu) = typed_run(
        &pki,
        Role::CONTROLLER,
        rates,
        frames,
        &payload,
        Take::Messages,
    )
    .await;
    // The same frames taken as views of each read: checked, and read or not.
    let (views_got, views_time, views_cpu) =
        typed_run(&pki, Role::CONTROLLER, rates, frames, &payload, Take::Views).await;
    let (decoded_got, decoded_time, decoded_cpu) = typed_run(
        &pki,
        Role::CONTROLLER,
        rates,
        frames,
        &payload,
        Take::ViewsDecoded,
    )
    .await;
    // The frame path with nothing to decode: an agent (its budget lifted) sends FULL without a
    // payload (24 bytes on the wire), each still delivered as a message.
    let (empty_got, empty_time, empty_cpu) = typed_run(
        &pki,
        Role::AGENT,
        ReadRates::UNLIMITED,
        frames,
        &Payload::Full(None),
        Take::Messages,
    )
    .await;
    // An agent's has the default one: its burst, then two seconds of its sustained rate.
    let wire = Frame::new(SERVER, &payload)
        .to_bytes(DEFAULT_MAX_FRAME)
        .unwrap()
        .len();
    let agent_wire = Frame::new(SERVER, &agent_payload)
        .to_bytes(DEFAULT_MAX_FRAME)
        .unwrap()
        .len();
    let budget = rates.for_role(Role::AGENT).unwrap();
    let sustained = budget.frames_per_sec(agent_wire as u64);
    let agent_frames = frames.min(
        (budget.burst as f64 / (agent_wire as u64 + budget.frame_cost) as f64 + 2.0 * sustained)
            as usize,
    );
    let (agent_got, agent_time, _) = typed_run(
        &pki,
        Role::AGENT,
        rates,
        agent_frames,
        &agent_payload,
        Take::Messages,
    )
    .await;

    // Baseline: the same bytes over a bare tokio-rustls stream, read and discarded.
    let bytes_per_frame = wire;
    let total = bytes_per_frame * frames;
    let server_id = pki.identity(Role::SCHEDULER, Some(SERVER));
    let client_id = pki.identity(Role::AGENT, None);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let acceptor = tokio_rustls::TlsAcceptor::from(server_id.server_config().unwrap());
    let bare_cpu = process_cpu();
    let reader = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut tls = acceptor.accept(tcp).await.unwrap();
        let mut buf = BytesMut::with_capacity(64 << 10);
        let mut n = 0usize;
        let start = Instant::now();
        while n < total {
            buf.clear();
            let r = tls.read_buf(&mut buf).await.unwrap();
            if r == 0 {
                break;
            }
            n += r;
        }
        start.elapsed()
    });
    let connector = tokio_rustls::TlsConnector::from(client_id.client_config().unwrap());
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let mut tls = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let one = Frame::new(SERVER, &payload)
        .to_bytes(DEFAULT_MAX_FRAME)
        .unwrap();
    let chunk: Vec<u8> = one
        .iter()
        .copied()
        .cycle()
        .take(one.len() * (64usize << 10).div_ceil(one.len()))
        .collect();
    let mut sent = 0;
    while sent < total {
        let n = chunk.len().min(total - sent);
        tls.write_all(&chunk[..n]).await.unwrap();
        sent += n;
    }
    tls.flush().await.unwrap();
    let bare = reader.await.unwrap();
    let bare_cpu = process_cpu() - bare_cpu;
    let typed_rate = got as f64 / typed.as_secs_f64();
    let agent_rate = agent_got as f64 / agent_time.as_secs_f64();
    let bare_rate = frames as f64 / bare.as_secs_f64();
    println!(
        "throughput: {got} frames of a {size}-byte {:?} payload ({bytes_per_frame} bytes on the wire)",
        payload.operand()
    );
    println!(
        "  ssntp, typed events, controller session (no read budget): {:.3} M frames/s, {:.0} MB/s ({typed:?})",
        typed_rate / 1e6,
        typed_rate * bytes_per_frame as f64 / 1e6
    );
    println!(
        "  ssntp, typed events, agent session (read budget {budget}; {agent_wire}-byte frames of the text payload): {agent_got} frames at {:.3} M frames/s ({agent_time:?}); \
         the budget: a burst of {:.0} frames, then {:.0} frames/s",
        agent_rate / 1e6,
        budget.burst as f64 / (agent_wire as u64 + budget.frame_cost) as f64,
        sustained
    );
    let empty_rate = empty_got as f64 / empty_time.as_secs_f64();
    println!(
        "  ssntp, nothing to decode (FULL without payload, 24 bytes; agent session, no read budget): \
         {:.3} M frames/s ({:.0} % of the frames/s of the bare stream of {bytes_per_frame}-byte frames below: its frames are smaller, so this flatters it), \
         CPU per frame {:.0} ns both ends ({empty_time:?})",
        empty_rate / 1e6,
        100.0 * empty_rate / bare_rate,
        empty_cpu.as_nanos() as f64 / empty_got.max(1) as f64
    );
    println!(
        "  bare tokio-rustls:   {:.3} M frames/s, {:.0} MB/s ({bare:?})",
        bare_rate / 1e6,
        bare_rate * bytes_per_frame as f64 / 1e6
    );
    println!(
        "  ratio (controller session / bare): {:.0} %",
        100.0 * typed_rate / bare_rate
    );
    for (what, got, time, cpu) in [
        (
            "views (Delivery::Views), payloads checked, unread",
            views_got,
            views_time,
            views_cpu,
        ),
        (
            "views, each payload decoded by the application",
            decoded_got,
            decoded_time,
            decoded_cpu,
        ),
    ] {
        let rate = got as f64 / time.as_secs_f64();
        println!(
            "  ssntp, typed {what}, controller session: {:.3} M frames/s, {:.0} % of bare, \
             CPU per frame {:.0} ns both ends ({time:?})",
            rate / 1e6,
            100.0 * rate / bare_rate,
            cpu.as_nanos() as f64 / got.max(1) as f64
        );
    }
    println!(
        "  reader time per frame {:.0} ns, per wire byte {:.3} ns (typed, controller session)",
        1e9 / typed_rate,
        1e9 / (typed_rate * bytes_per_frame as f64)
    );
    println!(
        "  CPU per frame, both ends together: {:.0} ns typed (controller session), {:.0} ns bare",
        typed_cpu.as_nanos() as f64 / got.max(1) as f64,
        bare_cpu.as_nanos() as f64 / frames.max(1) as f64
    );
}

async fn rtt(n: usize) {
    let pki = TestPki::new();
    let (addr, mut events, handle, stop) = start_server(&pki, Routes::new(), |_| {}).await;
    let echo = tokio::spawn(async move {
        while let Some(e) = events.recv().await {
            if let ServerEvent::Frames { uuid, messages, .. } = e {
                for m in messages {
                    let _ = handle.send(uuid, &Frame::new(SERVER, &m.payload));
                }
            }
        }
    });
    let id = Uuid::from_bytes([2; 16]);
    // An agent's session by default (read budget, decoded by its reader); a controller's has
    // no budget, and its payloads are decoded by a second task.
    let role = match std::env::var("RTT_ROLE").as_deref() {
        Ok("controller") => Role::CONTROLLER,
        Ok("agent") | Err(_) => Role::AGENT,
        Ok(other) => panic!("RTT_ROLE: agent or controller, not {other}"),
    };
    let (client, mut ce) = start_client(pki.identity(role, Some(id)), id, role, &addr).await;
    let frame = Frame::new(id, &payload_of(64));
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        client.send(&frame).unwrap();
        loop {
            if let Some(ClientEvent::Frames { .. }) = ce.recv().await {
                break;
            }
        }
        samples.push(t.elapsed());
    }
    samples.sort();
    let p = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
    println!(
        "rtt over {n} round trips ({role} session): p50 {:?}, p99 {:?}, max {:?}",
        p(0.50),
        p(0.99),
        samples[n - 1]
    );
    stop.cancel();
    echo.abort();
}

/// One full handshake: TCP, mutual TLS 1.3, CONNECT → CONNECTED.
async fn one_handshake(connector: &tokio_rustls::TlsConnector, port: u16, id: Uuid) {
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let mut tls = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let connect = Frame::new(id, &Payload::Connect(Connect { role: Role::AGENT }))
        .to_bytes(DEFAULT_MAX_FRAME)
        .unwrap();
    tls.write_all(&connect).await.unwrap();
    tls.flush().await.unwrap();
    let mut buf = [0u8; 24];
    tls.read_exact(&mut buf).await.unwrap();
    assert_eq!(buf[3], 0, "CONNECTED");
    let _ = tls.shutdown().await;
}

async fn handshakes(n: usize, concurrency: usize) {
    let pki = TestPki::new();
    let (addr, mut events, _h, stop) = start_server(&pki, Routes::new(), |_| {}).await;
    tokio::spawn(async move { while events.recv().await.is_some() {} });
    let port: u16 = addr.rsplit_once(':').unwrap().1.parse().unwrap();
    let identity = pki.identity(Role::AGENT, None);
    let connector = tokio_rustls::TlsConnector::from(identity.client_config().unwrap());
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..concurrency {
        let connector = connector.clone();
        tasks.push(tokio::spawn(async move {
            for i in (w..n).step_by(concurrency) {
                one_handshake(&connector, port, Uuid::from_u128(i as u128 + 1)).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let e = start.elapsed();
    println!(
        "handshakes: {n} full mutual-TLS + SSNTP handshakes, {concurrency} at a time: {:.0}/s ({e:?})",
        n as f64 / e.as_secs_f64()
    );
    stop.cancel();
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// `idle` runs three roles: the coordinator (this), a server process, a clients process.
async fn idle(sessions: usize) {
    let dir = std::env::temp_dir().join(format!("ssntp-idle-{}", std::process::id()));
    let pki = TestPki::new();
    let server_leaf = pki.leaf(Role::SCHEDULER, Some(SERVER));
    let agent_leaf = pki.leaf(Role::AGENT, None);
    server_leaf.write(&dir, "server");
    agent_leaf.write(&dir, "agent");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let exe = std::env::current_exe().unwrap();
    let spawn_server = || {
        std::process::Command::new(&exe)
            .args([
                "idle-server",
                &dir.to_string_lossy(),
                &port.to_string(),
                &sessions.to_string(),
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let read_line = |child: &mut std::process::Child| {
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        line
    };
    let mut server = spawn_server();
    // The clients stand for other hosts: at the nice value of the server's handshake thread
    // (10 by default), so that the server's handshakes are not outranked by the clients' side
    // of them, as they would not be by clients elsewhere.
    let mut clients = std::process::Command::new("nice")
        .args(["-n", "10"])
        .arg(&exe)
        .args([
            "idle-clients",
            &dir.to_string_lossy(),
            &port.to_string(),
            &sessions.to_string(),
        ])
        .spawn()
        .unwrap();
    let t = Instant::now();
    let line = read_line(&mut server);
    println!(
        "idle: {sessions} sessions up after {:?} ({})",
        t.elapsed(),
        line.trim()
    );
    let rss = rss_kib(server.id());
    println!(
        "idle: server RSS with {sessions} idle sessions: {:.1} MiB",
        rss as f64 / 1024.0
    );
    server.kill().unwrap();
    server.wait().unwrap();
    let t = Instant::now();
    let mut server = spawn_server();
    let line = read_line(&mut server);
    println!(
        "idle: after a server restart, all {sessions} back in {:?} ({})",
        t.elapsed(),
        line.trim()
    );
    server.kill().unwrap();
    clients.kill().unwrap();
    let _ = server.wait();
    let _ = clients.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

async fn idle_server(dir: &str, port: u16, sessions: usize) {
    let dir = std::path::Path::new(dir);
    let tls = TlsIdentity::load(
        &dir.join("ca.pem"),
        &dir.join("server.pem"),
        &dir.join("server.key"),
    )
    .unwrap();
    let mut config = ServerConfig::new(tls, SERVER);
    config.max_connections = sessions + 100;
    if let Ok(nice) = std::env::var("IDLE_HANDSHAKE_NICE") {
        config.handshakes = Some(ssntp_net::handshaker::HandshakerConfig {
            nice: nice.parse().unwrap(),
        });
    }
    let (server, handle, mut events) = Server::new(config).unwrap();
    let listener = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    tokio::spawn(server.run(listener, CancellationToken::new()));
    tokio::spawn(async move { while events.recv().await.is_some() {} });
    let t = Instant::now();
    while handle.sessions().len() < sessions {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!("{} sessions in {:?}", handle.sessions().len(), t.elapsed());
    std::future::pending::<()>().await;
}

async fn idle_clients(dir: &str, port: u16, sessions: usize) {
    let dir = std::path::Path::new(dir);
    let tls = TlsIdentity::load(
        &dir.join("ca.pem"),
        &dir.join("agent.pem"),
        &dir.join("agent.key"),
    )
    .unwrap();
    let mut handles = Vec::with_capacity(sessions);
    for i in 0..sessions {
        let mut config = ClientConfig::new(
            tls.clone(),
            Uuid::from_u128(i as u128 + 1),
            Role::AGENT,
            vec![format!("localhost:{port}")],
        );
        config.conn.read_buffer = 4096;
        config.conn.queue_frames = 16;
        config.event_queue = 16;
        let (h, mut ev) = Client::start(config).unwrap();
        tokio::spawn(async move { while ev.recv().await.is_some() {} });
        handles.push(h);
        if i % 64 == 63 {
            tokio::task::yield_now().await;
        }
    }
    std::future::pending::<()>().await;
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let arg =
        |i: usize, default: usize| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(default);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    match args.first().map(String::as_str) {
        Some("throughput") => rt.block_on(throughput(arg(1, 2_000_000), arg(2, 64))),
        Some("rtt") => rt.block_on(rtt(arg(1, 20_000))),
        Some("handshakes") => rt.block_on(handshakes(arg(1, 4_000), arg(2, 16))),
        Some("idle") => rt.block_on(idle(arg(1, 10_000))),
        Some("idle-server") => rt.block_on(idle_server(&args[1], arg(2, 0) as u16, arg(3, 10_000))),
        Some("idle-clients") => {
            rt.block_on(idle_clients(&args[1], arg(2, 0) as u16, arg(3, 10_000)))
        }
        _ => {
            rt.block_on(throughput(2_000_000, 64));
            rt.block_on(rtt(20_000));
            rt.block_on(handshakes(4_000, 16));
        }
    }
}
