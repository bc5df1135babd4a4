//! Codec benchmarks: framing decode of 64-byte-payload frames from one buffer, and typed
//! decode/encode of a READY payload. Run: `cargo bench -p ssntp --bench codec`.

use bytes::BytesMut;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use ssntp::frame::{DEFAULT_MAX_FRAME, Frame};
use ssntp::payload::{MacAddr, NodeNetwork, NodeStatus};
use ssntp::{Decoded, Decoder, Operand, Payload, Uuid};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};

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

fn ready() -> Payload {
    Payload::Ready(NodeStatus {
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
    })
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

criterion_group!(benches, framing, ready_payload);
criterion_main!(benches);
