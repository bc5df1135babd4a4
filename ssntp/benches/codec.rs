//! Codec benchmarks: framing decode of 64-byte-payload frames from one buffer, typed
//! decode/encode of a READY payload, and our payload decoder (`Payload::decode`, cbor4ii since
//! issue 19) against ciborium's reader on the same bytes. Run: `cargo bench -p ssntp --bench codec`; the decoder
//! comparison alone: `cargo bench -p ssntp --bench codec -- decoders`; the receiving path of a
//! session (framing, the receiving rules, the typed decode, a batch of messages), on one thread,
//! without TLS or tasks: `cargo bench -p ssntp --bench codec -- receive`.

use bytes::BytesMut;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use serde::de::DeserializeOwned;
use ssntp::frame::{DEFAULT_MAX_FRAME, Frame, HEADER_LEN};
use ssntp::handshake::HandshakeConfig;
use ssntp::payload::{
    Cidr, FwType, InstanceStat, InstanceState, MacAddr, Networking, NodeNetwork, NodeState,
    NodeStatus, Requirements, Start, Stats, Storage, VmType,
};
use ssntp::payload::{ClusterConfig, Connect, Reason};
use ssntp::session::{Now, Received, Session, Viewed};
use ssntp::view::Frames;
use ssntp::{
    Decoded, Decoder, Operand, Payload, PeerCertificate, Role, ServerHandshake, Uuid, UuidBinding,
};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

const FRAMES: usize = 10_000;

/// One buffer holding `FRAMES` frames with 64-byte bodies.
fn stream() -> BytesMut {
    let frame = Frame {
        operand: Operand::Stats,
        minor: 0,
        origin: Uuid::from_bytes([7; 16]),
        trace: None,
        payload: vec![0xa0; 64].into(),
    };
    let mut buf = BytesMut::new();
    for _ in 0..FRAMES {
        frame.encode(&mut buf, DEFAULT_MAX_FRAME).expect("encodes");
    }
    buf
}

fn framing(c: &mut Criterion) {
    let buf = stream();
    let decoder = Decoder::default();
    let mut g = c.benchmark_group("framing_64B");
    g.throughput(Throughput::Elements(FRAMES as u64));
    g.bench_function("decode_bytesmut", |b| {
        b.iter_batched(
            || buf.clone(),
            |mut buf| {
                let mut n = 0usize;
                while let Ok(Decoded::Frame(raw)) = decoder.decode(&mut buf) {
                    n += raw.body.len();
                    black_box(&raw);
                }
                n
            },
            BatchSize::LargeInput,
        )
    });
    g.bench_function("decode_slice", |b| {
        b.iter(|| {
            let mut at = 0;
            let mut n = 0usize;
            while let Ok(Some(f)) = decoder.decode_slice(black_box(&buf[at..])) {
                n += f.body.len();
                at += f.used;
            }
            n
        })
    });
    g.finish();
}

fn node_status() -> NodeStatus {
    NodeStatus {
        node_uuid: Uuid::from_bytes([0x11; 16]),
        hostname: "compute-node-0001".into(),
        mem_total_mb: 65536,
        mem_available_mb: 40000,
        disk_total_mb: 1_000_000,
        disk_available_mb: 800_000,
        vcpus_total: 32,
        vcpus_available: 20,
        load: 150,
        networks: vec![NodeNetwork {
            ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 11)),
            mac: MacAddr([2, 0, 10, 0, 0, 11]),
        }],
        zone: None,
    }
}

fn ready() -> Payload {
    Payload::Ready(node_status())
}

fn ready_payload(c: &mut Criterion) {
    let payload = ready();
    let bytes = payload.encode();
    let mut g = c.benchmark_group("ready_payload");
    g.throughput(Throughput::Elements(1));
    g.bench_function("decode", |b| {
        b.iter(|| Payload::decode(Operand::Ready, black_box(&bytes)).expect("decodes"))
    });
    g.bench_function("encode", |b| {
        let mut out = Vec::with_capacity(256);
        b.iter(|| {
            out.clear();
            black_box(&payload).encode_into(&mut out);
            out.len()
        })
    });
    g.finish();
}

/// STATS of a node running `n` instances (half of them with an SSH address and a CPU figure).
fn stats(n: u8) -> Payload {
    let instances = (0..n)
        .map(|i| InstanceStat {
            instance_uuid: Uuid::from_bytes([i; 16]),
            state: InstanceState::Active,
            ssh_ip: (i % 2 == 0).then(|| IpAddr::V4(Ipv4Addr::new(172, 16, 0, i))),
            ssh_port: (i % 2 == 0).then_some(33000 + u16::from(i)),
            memory_usage_mb: 512 + u32::from(i),
            disk_usage_mb: 2048,
            cpu_usage: (i % 2 == 0).then_some(u32::from(i % 100)),
            volumes: Vec::new(),
        })
        .collect();
    Payload::Stats(Box::new(Stats {
        node: node_status(),
        status: NodeState::Ready,
        instances,
    }))
}

/// A START with every optional part present: networking, two disks, user and meta data.
fn start() -> Payload {
    Payload::Start(Box::new(Start {
        instance_uuid: Uuid::from_bytes([0x21; 16]),
        tenant_uuid: Uuid::from_bytes([0x22; 16]),
        workload_uuid: Uuid::from_bytes([0x23; 16]),
        vm_type: VmType::Qemu,
        fw_type: FwType::Efi,
        image: "debian-12-genericcloud-amd64".into(),
        requirements: Requirements {
            vcpus: 2,
            mem_mb: 2048,
            disk_mb: 20_480,
            network_node: false,
            node_id: None,
            hostname: None,
            avoid_nodes: Vec::new(),
            group: None,
            zone: None,
        },
        networking: Some(Networking {
            vnic_mac: MacAddr([2, 0, 0xac, 0x10, 0, 5]),
            vnic_uuid: Uuid::from_bytes([0x24; 16]),
            concentrator_uuid: Uuid::from_bytes([0x25; 16]),
            concentrator_ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            subnet: Cidr::new(IpAddr::V4(Ipv4Addr::new(172, 16, 0, 0)), 24).expect("a /24"),
            subnet_key: 4097,
            private_ip: IpAddr::V4(Ipv4Addr::new(172, 16, 0, 5)),
            public_ip: false,
            firewall: None,
        }),
        storage: Some(vec![
            Storage {
                id: Uuid::from_bytes([0x26; 16]),
                boot: true,
                size_mb: 20_480,
                ephemeral: true,
            },
            Storage {
                id: Uuid::from_bytes([0x27; 16]),
                boot: false,
                size_mb: 102_400,
                ephemeral: false,
            },
        ]),
        user_data: Some("#cloud-config\nusers:\n  - name: demo\n    ssh_authorized_keys:\n      - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl demo\n".into()),
        meta_data: Some(BTreeMap::from([
            ("hostname".into(), "vm-0005".into()),
            ("project".into(), "bench".into()),
        ])),
        restart: false,
        kernel: None,
    }))
}

/// One payload decoded with `$decode` (a generic `fn(&[u8]) -> T`) into the variant of its
/// operand, so that every decoder builds the same `Payload` as `Payload::decode`.
macro_rules! typed {
    ($operand:expr, $bytes:expr, $decode:ident) => {
        match $operand {
            Operand::Ready => Payload::Ready($decode($bytes)),
            Operand::Stats => Payload::Stats($decode($bytes)),
            Operand::Start => Payload::Start($decode($bytes)),
            other => panic!("no comparison case for {other}"),
        }
    };
}

/// ciborium's reader: what payloads were decoded with before issue 19 (copies text).
fn ciborium_one<T: DeserializeOwned>(bytes: &[u8]) -> T {
    ciborium::de::from_reader(bytes).expect("ciborium decodes")
}

/// Hostile inputs both compared decoders must refuse without recursing or allocating by the
/// declared length (checked once, not timed): 100,000 nested arrays, and a STATS whose
/// `instances` declares 2^32 items and holds none.
fn hostile_inputs_are_refused() {
    let deep = vec![0x81; 100_000];
    assert!(ssntp::payload::cbor::decode_one::<ciborium::Value>(&deep).is_err());
    assert!(ciborium::de::from_reader::<ciborium::Value, _>(&deep[..]).is_err());

    let mut huge = stats(0).encode();
    let empty = [
        0x69, b'i', b'n', b's', b't', b'a', b'n', b'c', b'e', b's', 0x80,
    ];
    let at = huge
        .windows(empty.len())
        .position(|w| w == empty)
        .expect("an empty instances array")
        + empty.len()
        - 1;
    huge.splice(at..=at, [0x9b, 0, 0, 0, 1, 0, 0, 0, 0]);
    assert!(Payload::decode(Operand::Stats, &huge).is_err());
    assert!(ciborium::de::from_reader::<Box<Stats>, _>(&huge[..]).is_err());
}

/// One decoder of the comparison: its name and a decode of the case's bytes into a `Payload`.
type Decode<'a> = (&'static str, Box<dyn Fn(&[u8]) -> Payload + 'a>);

/// Median nanoseconds per decode of each decoder, the decoders taking turns (201 rounds of about
/// 0.2 ms each) so that a change in the machine's load falls on all of them alike, and slices
/// short enough that most of them run without being preempted; printed to stderr beside
/// criterion's figures, which time one decoder after the other.
fn interleaved(case: &str, bytes: &[u8], decoders: &[Decode<'_>]) {
    let mut samples = vec![Vec::new(); decoders.len()];
    for _ in 0..201 {
        for (i, (_, decode)) in decoders.iter().enumerate() {
            let started = Instant::now();
            let mut n = 0u32;
            while started.elapsed() < Duration::from_micros(200) {
                for _ in 0..4 {
                    black_box(decode(black_box(bytes)));
                }
                n += 4;
            }
            samples[i].push(started.elapsed().as_secs_f64() * 1e9 / f64::from(n));
        }
    }
    let line: Vec<String> = decoders
        .iter()
        .zip(&mut samples)
        .map(|((name, _), s)| {
            s.sort_by(f64::total_cmp);
            format!("{name} {:.0} ns", s[s.len() / 2])
        })
        .collect();
    eprintln!("decoders/{case} interleaved medians: {}", line.join(", "));
}

/// Typed decode of the same bytes (written by our encoder, ciborium) by `Payload::decode`
/// (cbor4ii) and ciborium's reader; each decoder's result is checked equal to
/// the original before timing.
fn decoders(c: &mut Criterion) {
    hostile_inputs_are_refused();
    for (name, payload) in [
        ("ready", ready()),
        ("stats100", stats(100)),
        ("start", start()),
    ] {
        let operand = payload.operand();
        let bytes = payload.encode();
        let decoders: Vec<Decode<'_>> = vec![
            (
                "payload_decode",
                Box::new(move |b| Payload::decode(operand, b).expect("decodes")),
            ),
            (
                "ciborium_reader",
                Box::new(move |b| typed!(operand, b, ciborium_one)),
            ),
        ];
        for (decoder, decode) in &decoders {
            assert_eq!(decode(&bytes), payload, "{decoder} on {name}");
        }
        let case = format!("{name}_{}B", bytes.len());
        interleaved(&case, &bytes, &decoders);

        let mut g = c.benchmark_group(format!("decoders/{case}"));
        g.throughput(Throughput::Elements(1));
        for (decoder, decode) in &decoders {
            g.bench_function(*decoder, |b| b.iter(|| decode(black_box(&bytes))));
        }
        g.finish();
    }
}

/// A server session with a client of `role`, as the handshake establishes it.
fn session(role: Role, client: Uuid) -> Session {
    let start = Instant::now();
    let peer = PeerCertificate {
        roles: role,
        binding: UuidBinding::Bound(client),
    };
    let server = (Uuid::from_bytes([0x5c; 16]), Role::SCHEDULER);
    let config = HandshakeConfig::default();
    let hs = ServerHandshake::new(server, ClusterConfig::default(), peer, config, start);
    let connect = Frame::new(client, &Payload::Connect(Connect { role }));
    let mut buf = BytesMut::new();
    connect
        .encode(&mut buf, DEFAULT_MAX_FRAME)
        .expect("encodes");
    let Ok(Decoded::Frame(raw)) = config.decoder().decode(&mut buf) else {
        panic!("CONNECT does not decode");
    };
    hs.handle_frame(start, raw).expect("the handshake").session
}

/// The session reader's work per frame, as `ssntp-net` does it, on one thread: frames decoded
/// from one buffer, the receiving rules applied, each message pushed into a batch. Two streams:
/// 64-byte PROTOCOL_VIOLATION payloads from a controller (the typed decode: a map and a
/// string), and FULL frames without a payload from an agent (nothing to decode).
fn receive(c: &mut Criterion) {
    let client = Uuid::from_bytes([1; 16]);
    // A reason of 54 bytes: a 64-byte payload, as in `ssntp-net`'s throughput bench.
    let violation = Payload::ProtocolViolation(Reason::new("x".repeat(54)));
    assert_eq!(violation.encode().len(), 64);
    let mut g = c.benchmark_group("receive");
    g.throughput(Throughput::Elements(FRAMES as u64));
    for (name, role, payload) in [
        ("typed_64B_from_controller", Role::CONTROLLER, violation),
        ("empty_full_from_agent", Role::AGENT, Payload::Full(None)),
    ] {
        let frame = Frame::new(client, &payload);
        let mut buf = BytesMut::new();
        for _ in 0..FRAMES {
            frame.encode(&mut buf, DEFAULT_MAX_FRAME).expect("encodes");
        }
        let mut session = session(role, client);
        let decoder = Decoder::default();
        let now = Now {
            instant: Instant::now(),
            unix_ns: 0,
        };
        g.bench_function(name, |b| {
            b.iter_batched(
                || buf.clone(),
                |mut buf| {
                    let mut batch = Vec::with_capacity(FRAMES);
                    while let Ok(Decoded::Frame(raw)) = decoder.decode(&mut buf) {
                        if let Received::Message(m) = session.handle_raw(now, raw) {
                            batch.push(m);
                        }
                    }
                    assert_eq!(batch.len(), FRAMES);
                    batch
                },
                BatchSize::LargeInput,
            )
        });
        // The same frames as a server delivering views takes them: every rule applied where
        // each frame lies, one index entry per frame, the read's bytes shared once.
        let read = buf.clone().freeze();
        g.bench_function(format!("{name}_as_views"), |b| {
            b.iter(|| {
                let mut entries = Vec::with_capacity(FRAMES);
                let mut at = 0;
                while let Ok(Some(f)) = decoder.decode_slice(&read[at..]) {
                    let body_at = at + HEADER_LEN;
                    at += f.used;
                    if let Viewed::Passed(entry) =
                        session.handle_view(now, &f.header, f.body, body_at)
                    {
                        entries.push(entry);
                    }
                }
                let frames = Frames::new(read.clone(), entries).expect("entries in the read");
                assert_eq!(frames.len(), FRAMES);
                frames
            })
        });
    }
    g.finish();
}

criterion_group!(benches, framing, ready_payload, decoders, receive);
criterion_main!(benches);
