//! Uploaded image data fetched by a real agent: a START naming `sha512/<hash>` makes the node
//! fetch the data from the controller's node image endpoint, played here by the test ([`Endpoint`]:
//! HTTP/1.1 over TLS 1.3, a controller's certificate of the test's cluster CA, the agent's
//! certificate required), which can send half the data and hold. A kill -9 of the agent in the
//! middle of the download, and data whose hash is wrong. Same needs as the parent module, and the
//! tiny guest as a bootable disk image (`CUMULO_TINY_DISK`, `scripts/tiny-disk.sh`).
// Helpers outside `#[test]` functions unwrap too: a failure there is a test failure.
#![allow(clippy::unwrap_used)]

use super::*;
use agent::backend::libvirt::cache::sha512_of;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::task::TaskTracker;

/// The UUID the guest of `scripts/tiny-disk.sh` gives itself (its kernel command line: the
/// disk carries no instance's meta-data).
const DISK_GUEST: Uuid = Uuid::from_u128(0x0000_0000_0000_4000_8000_0000_0000_d15c);

/// The tiny guest as a bootable qcow2 disk image (`CUMULO_TINY_DISK`), or `None` after saying
/// why, unless `CUMULO_LIBVIRT_REQUIRED=1` (CI): then a failure.
fn tiny_disk_or_skip() -> Option<PathBuf> {
    let found = std::env::var_os("CUMULO_TINY_DISK")
        .map(PathBuf::from)
        .filter(|p| p.is_file());
    if found.is_none() {
        assert!(
            std::env::var("CUMULO_LIBVIRT_REQUIRED").as_deref() != Ok("1"),
            "CUMULO_LIBVIRT_REQUIRED=1 but CUMULO_TINY_DISK names no disk image \
             (scripts/tiny-disk.sh makes one)"
        );
        eprintln!("SKIPPED: no tiny disk image (CUMULO_TINY_DISK, scripts/tiny-disk.sh)");
    }
    found
}

// ---- the node image endpoint, played by the test ----------------------------------------------

/// How the endpoint answers one request for its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// Announces all of the data (`Content-Length`), sends its first half, and holds the
    /// connection until the client goes away or the endpoint stops.
    HalfThenHold,
    /// All of the data.
    Whole,
}

/// A request the endpoint answered.
#[derive(Debug, Clone)]
struct Served {
    /// Its request line.
    line: String,
    /// The roles of the client's certificate.
    roles: Role,
    /// Bytes of data sent.
    sent: usize,
}

/// What the endpoint serves, and what it saw.
struct Serving {
    /// The one path it serves.
    path: String,
    data: Vec<u8>,
    /// How the next requests are answered, in turn ([`Answer::Whole`] after them).
    answers: Mutex<VecDeque<Answer>>,
    served: Mutex<Vec<Served>>,
}

/// The controller's node image endpoint as the test plays it, on loopback: `GET
/// /v1/images/sha512/<name>` gets `data`, as the answers given say; anything else a 404.
struct Endpoint {
    addr: String,
    serving: Arc<Serving>,
    stop: CancellationToken,
    tracker: TaskTracker,
}

impl Endpoint {
    /// Serves `data` under `name` with a controller's certificate from `pki`, requiring a
    /// client certificate of the same CA.
    async fn start(pki: &TestPki, name: &str, data: Vec<u8>, answers: &[Answer]) -> Endpoint {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let tls = pki
            .identity(Role::CONTROLLER, Some(CONTROLLER))
            .server_config()
            .unwrap();
        let serving = Arc::new(Serving {
            path: format!("/v1/images/sha512/{name}"),
            data,
            answers: Mutex::new(answers.iter().copied().collect()),
            served: Mutex::new(Vec::new()),
        });
        let stop = CancellationToken::new();
        let tracker = TaskTracker::new();
        tracker.spawn(run(
            listener,
            tokio_rustls::TlsAcceptor::from(tls),
            serving.clone(),
            stop.clone(),
            tracker.clone(),
        ));
        Endpoint {
            addr,
            serving,
            stop,
            tracker,
        }
    }

    fn served(&self) -> Vec<Served> {
        self.serving.served.lock().unwrap().clone()
    }

    /// Stops listening and ends every connection.
    async fn stop(self) {
        self.stop.cancel();
        self.tracker.close();
        tokio::time::timeout(T, self.tracker.wait())
            .await
            .expect("the endpoint stops in time");
    }
}

async fn run(
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    serving: Arc<Serving>,
    stop: CancellationToken,
    tracker: TaskTracker,
) {
    loop {
        let tcp = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(_) => continue,
            },
        };
        let (acceptor, serving, stop) = (acceptor.clone(), serving.clone(), stop.clone());
        tracker.spawn(async move {
            tokio::select! {
                () = stop.cancelled() => {}
                () = answer(tcp, acceptor, &serving) => {}
            }
        });
    }
}

/// One connection: one request, answered.
async fn answer(
    tcp: tokio::net::TcpStream,
    acceptor: tokio_rustls::TlsAcceptor,
    serving: &Serving,
) {
    let Ok(mut tls) = acceptor.accept(tcp).await else {
        return;
    };
    let roles = ssntp_net::tls::peer_of(tls.get_ref().1).map_or(Role::empty(), |p| p.roles);
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match tls.read(&mut buf).await {
            Ok(n) if n > 0 && head.len() < 16 << 10 => head.extend_from_slice(&buf[..n]),
            _ => return,
        }
    }
    let line = String::from_utf8_lossy(&head)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string();
    let index = {
        let mut served = serving.served.lock().unwrap();
        served.push(Served {
            line: line.clone(),
            roles,
            sent: 0,
        });
        served.len() - 1
    };
    if line != format!("GET {} HTTP/1.1", serving.path) {
        let _ = tls
            .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            .await;
        let _ = tls.shutdown().await;
        return;
    }
    let how = serving
        .answers
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or(Answer::Whole);
    let data = &serving.data;
    let header = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: {}\r\n\r\n",
        data.len()
    );
    if tls.write_all(header.as_bytes()).await.is_err() {
        return;
    }
    let upto = match how {
        Answer::HalfThenHold => data.len() / 2,
        Answer::Whole => data.len(),
    };
    for chunk in data[..upto].chunks(64 << 10) {
        if tls.write_all(chunk).await.is_err() {
            return;
        }
        serving.served.lock().unwrap()[index].sent += chunk.len();
    }
    if tls.flush().await.is_err() {
        return;
    }
    match how {
        // Held until the client goes away (its end of the connection closes).
        Answer::HalfThenHold => while matches!(tls.read(&mut buf).await, Ok(n) if n > 0) {},
        Answer::Whole => {
            let _ = tls.shutdown().await;
        }
    }
}

// ---- the rig and the cache ---------------------------------------------------------------------

/// The parent module's [`Rig`] (its CA `pki`), the agent fetching image data from
/// `image_server`.
async fn rig_fetching_from(uri: &str, node: Uuid, pki: TestPki, image_server: &str) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let state = state_dir(dir.path());
    let sched = real_scheduler(&pki).await;
    let files = agent_files(&pki, Role::AGENT, Some(node), dir.path());
    let mut c = controller(&pki, &sched.addr).await;
    let mut extra = libvirt_args(uri);
    extra.extend(["--image-server".to_string(), image_server.to_string()]);
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let args = argv(&files, &sched.addr, &state, "cn", &extra);
    let log = dir.path().join("agent.log");
    let agent = agent_binary(&args, &log);
    node_connected(&mut c, node).await;
    Rig {
        _pki: pki,
        dir,
        state,
        sched,
        c,
        args,
        log,
        agent,
    }
}

/// The image cache's directory.
fn cache_dir(state: &Path) -> PathBuf {
    state.join("images/sha512")
}

/// The names in the cache's directory.
fn cached(state: &Path) -> Vec<String> {
    std::fs::read_dir(cache_dir(state))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

fn is_part(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".part")
}

/// Watches the cache's directory (on a thread, every few milliseconds) for what must never be
/// there: a file under `hash` that is not all of `data`, and a part while `parts` is false.
struct Watch {
    parts: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<String>>,
}

impl Watch {
    fn start(state: &Path, hash: &str, data: Arc<Vec<u8>>) -> Watch {
        let (dir, kept) = (cache_dir(state), cache_dir(state).join(hash));
        let parts = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (may, stopped) = (parts.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut seen = Vec::new();
            let mut checked = false;
            while !stopped.load(Ordering::SeqCst) {
                let may_part = may.load(Ordering::SeqCst);
                for e in std::fs::read_dir(&dir).unwrap().flatten() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    if is_part(&name) && !may_part {
                        seen.push(format!("a part before any fetch: {name}"));
                    }
                }
                if let Ok(meta) = std::fs::metadata(&kept) {
                    let whole = meta.len() == data.len() as u64;
                    if !whole {
                        seen.push(format!("the data kept with {} bytes", meta.len()));
                    } else if !checked {
                        checked = true;
                        if std::fs::read(&kept).unwrap() != *data {
                            seen.push("the data kept is not the data served".into());
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            seen
        });
        Watch {
            parts,
            stop,
            thread,
        }
    }

    /// From now on a part may be there (a fetch is asked for).
    fn allow_parts(&self) {
        self.parts.store(true, Ordering::SeqCst);
    }

    /// Stops; what it saw that must never be (one line each, without repeats).
    fn finish(self) -> Vec<String> {
        self.stop.store(true, Ordering::SeqCst);
        let mut once = HashSet::new();
        let mut seen = self.thread.join().unwrap();
        seen.retain(|s| once.insert(s.clone()));
        seen
    }
}

/// Waits for a whole line of `instance`'s console that is `line`.
async fn wait_console(state: &Path, instance: Uuid, line: &str) {
    testkit::wait_for(Duration::from_secs(120), || async {
        let log = std::fs::read_to_string(console(state, instance)).unwrap_or_default();
        if log.lines().any(|l| l.trim_end() == line) {
            return Ok(());
        }
        Err(format!(
            "no console line {line:?} from {instance}; its console:\n{log}"
        ))
    })
    .await;
}

// ---- the tests ---------------------------------------------------------------------------------

/// A kill -9 of the agent in the middle of an image's download leaves nothing half-done: the
/// START recorded the instance (pending) before the fetch, and the endpoint has sent half the
/// data, which is in a hidden part of the cache. The restarted agent removes the part as its
/// cache opens (none is there from then on until a fetch is asked for, and nothing is kept under
/// the hash), finds the instance never made (no domain), says so (INSTANCE_DELETED) and forgets
/// it, leaving nothing in libvirt or in its files, and fetches nothing by itself. The START sent
/// again fetches the data once, whole (the cache never holds anything else under the hash), and
/// boots it: the guest of the disk comes up and counts its first boot on the disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_9_mid_download_leaves_no_half_image_and_the_start_again_boots_it() {
    let Some(uri) = libvirt_uri() else { return };
    let Some(disk) = tiny_disk_or_skip() else {
        return;
    };
    let _one_at_a_time = VMS.lock().await;
    let node = u(0x48);
    let data = Arc::new(std::fs::read(disk).unwrap());
    let hash = sha512_of(&data);
    let pki = TestPki::new();
    let endpoint = Endpoint::start(
        &pki,
        &hash,
        data.to_vec(),
        &[Answer::HalfThenHold, Answer::Whole],
    )
    .await;
    let Rig {
        _pki,
        dir: _dir,
        state,
        sched,
        mut c,
        args,
        log,
        mut agent,
    } = rig_fetching_from(&uri, node, pki, &endpoint.addr).await;
    let id = Uuid::new_v4();
    let _leftovers = Leftovers {
        uri: uri.clone(),
        domains: vec![id],
    };
    let image = format!("sha512/{hash}");

    // Half the data on its way, held: the part has grown to about half (the agent writes
    // through a 1 MiB buffer).
    c.send(&start_payload(vm(id, &image)));
    let half = data.len() / 2;
    let part = testkit::wait_for(Duration::from_secs(60), || async {
        let parts: Vec<(String, u64)> = cached(&state)
            .into_iter()
            .filter(|n| is_part(n))
            .map(|n| {
                let size = std::fs::metadata(cache_dir(&state).join(&n)).map_or(0, |m| m.len());
                (n, size)
            })
            .collect();
        match parts.as_slice() {
            [(name, size)] if *size + (1 << 20) >= half as u64 => Ok(name.clone()),
            _ => Err(format!(
                "no part of about {half} bytes in the cache: {parts:?}; served {:?}",
                endpoint.served()
            )),
        }
    })
    .await;
    assert!(part.starts_with(&format!(".{hash}.")), "{part}");
    assert!(!cache_dir(&state).join(&hash).exists());
    c.stats(node, "the instance pending, its data on its way", |s| {
        state_in(s, id) == Some(InstanceState::Pending)
    })
    .await;
    let served = endpoint.served();
    assert_eq!(served.len(), 1, "{served:?}");
    assert_eq!(served[0].line, format!("GET /v1/images/{image} HTTP/1.1"));
    assert!(served[0].roles.contains(Role::AGENT), "{served:?}");
    assert_eq!(served[0].sent, half);

    // Killed; the restarted agent opened its cache before it connected.
    kill_9_and_restart(&mut c, &mut agent, node, &args, &log).await;
    let watch = Watch::start(&state, &hash, data.clone());
    let left = cached(&state);
    assert!(
        left.is_empty(),
        "nothing in the cache after the restart: {left:?}"
    );
    c.expect("INSTANCE_DELETED of the instance never made", |m| {
        event_from(m, node, Operand::InstanceDeleted, id).then_some(())
    })
    .await;
    c.stats(node, "the instance forgotten", |s| {
        state_in(s, id).is_none()
    })
    .await;
    assert!(!domain_exists(&uri, id).await, "no domain of it");
    let files = state.join("libvirt/instances").join(id.to_string());
    assert!(!files.exists(), "no files of it");
    assert_eq!(endpoint.served().len(), 1, "no fetch by itself");

    // The START again: one fetch, whole, and the guest of the disk boots.
    watch.allow_parts();
    let t0 = Instant::now();
    c.send(&start_payload(vm(id, &image)));
    let started = c
        .expect_within(
            Duration::from_secs(120),
            "the instance active, or its START_FAILURE",
            |m| match &m.payload {
                Payload::StartFailure(f) if f.instance_uuid == id => Some(Err(f.clone())),
                _ => stats_from(m, node)
                    .filter(|s| state_in(s, id) == Some(InstanceState::Active))
                    .map(|_| Ok(())),
            },
        )
        .await;
    assert_eq!(started, Ok(()), "the START sent again");
    let active = t0.elapsed();
    wait_console(&state, id, &format!("CUMULO-GUEST-UP {DISK_GUEST}")).await;
    wait_console(&state, id, &format!("CUMULO-DISK-WROTE {DISK_GUEST} 1")).await;
    let up = t0.elapsed();
    let seen = watch.finish();
    assert!(seen.is_empty(), "never in the cache: {seen:?}");
    let served = endpoint.served();
    assert_eq!(served.len(), 2, "{served:?}");
    assert!(served[1].roles.contains(Role::AGENT), "{served:?}");
    assert_eq!(served[1].sent, data.len(), "the second fetch was whole");
    assert_eq!(cached(&state), vec![hash.clone()], "the data, and no part");
    assert!(
        std::fs::read(cache_dir(&state).join(&hash)).unwrap() == *data,
        "the data kept is the data served"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    let fetched = text
        .lines()
        .filter(|l| l.contains("image data fetched"))
        .count();
    assert_eq!(
        fetched, 1,
        "one fetch by the restarted agent; its log:\n{text}"
    );
    eprintln!(
        "FIGURES: the START again after a kill -9 mid-download (TCG, {} bytes fetched over \
         loopback TLS): -> STATS active {active:?}, -> the guest up and its disk written {up:?}",
        data.len()
    );

    c.send(&delete(id, node, false));
    c.expect("INSTANCE_DELETED", |m| {
        event_from(m, node, Operand::InstanceDeleted, id).then_some(())
    })
    .await;
    assert!(!domain_exists(&uri, id).await);
    assert!(!files.exists());
    agent.signal(rustix::process::Signal::TERM);
    assert_eq!(agent.exit_code().await, Some(0));
    sched.stop.cancel();
    endpoint.stop().await;
}

/// Data whose SHA-512 is not the one the START names fails the START (`image_failure`, its
/// message naming both hashes) and nothing is kept: no data under either hash, no part, no
/// instance in STATS, in libvirt or in the agent's files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_data_whose_hash_is_wrong_fails_the_start_and_nothing_is_kept() {
    let Some(uri) = libvirt_uri() else { return };
    let node = u(0x49);
    let asked: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
    let hash = sha512_of(&asked);
    let mut sent = asked;
    sent[4096] ^= 0xff;
    let got = sha512_of(&sent);
    let pki = TestPki::new();
    let endpoint = Endpoint::start(&pki, &hash, sent.clone(), &[]).await;
    let mut r = rig_fetching_from(&uri, node, pki, &endpoint.addr).await;
    let (state, c) = (r.state.clone(), &mut r.c);
    let id = Uuid::new_v4();
    let _leftovers = Leftovers {
        uri: uri.clone(),
        domains: vec![id],
    };
    c.send(&start_payload(vm(id, &format!("sha512/{hash}"))));
    let failure = c
        .expect("the START_FAILURE", |m| {
            start_failure(m, node).filter(|f| f.instance_uuid == id)
        })
        .await;
    assert_eq!(failure.reason, StartFailureReason::ImageFailure);
    let message = failure.message.unwrap_or_default();
    assert!(
        message.contains(&hash) && message.contains(&got),
        "both hashes in: {message}"
    );
    c.stats(node, "the instance forgotten", |s| {
        state_in(s, id).is_none()
    })
    .await;
    let left = cached(&state);
    assert!(left.is_empty(), "nothing kept in the cache: {left:?}");
    assert!(!domain_exists(&uri, id).await);
    assert!(
        !state
            .join("libvirt/instances")
            .join(id.to_string())
            .exists()
    );
    let served = endpoint.served();
    assert_eq!(served.len(), 1, "{served:?}");
    assert_eq!(served[0].sent, sent.len());
    r.finish().await;
    endpoint.stop().await;
}
