//! Fuzz entry points. Each takes arbitrary bytes, must never panic on them, and asserts a
//! property beyond "no panic" (round trips, agreement between two decoding paths, the rules of
//! the handshake). The targets under `fuzz/` are one-line calls to these; the seed corpus under
//! `fuzz/corpus/` is replayed by this module's tests.

use bytes::BytesMut;
use std::time::{Duration, Instant};
use uuid::Uuid;

use crate::codec::{Decoded, Decoder, FrameError};
use crate::frame::{DEFAULT_MAX_FRAME, Frame, Operand, RawFrame};
use crate::handshake::{
    ClientHandshake, HandshakeConfig, PeerCertificate, ServerHandshake, UuidBinding,
};
use crate::payload::{ClusterConfig, Payload, PayloadError};
use crate::role::Role;
use crate::session::{Now, Received, Session, SessionConfig, Tick, Viewed};
use crate::view::Frames;

/// A small max_frame so that the fuzzer reaches the size cap.
const FUZZ_MAX_FRAME: u32 = 4096;

/// Every frame of `data` as one stream, until it needs more bytes or fails to frame.
fn frames(decoder: &Decoder, data: &[u8]) -> (Vec<RawFrame>, Option<FrameError>) {
    let mut buf = BytesMut::from(data);
    let mut out = Vec::new();
    loop {
        match decoder.decode(&mut buf) {
            Ok(Decoded::Frame(raw)) => out.push(raw),
            Ok(Decoded::NeedMore(_)) => return (out, None),
            Err(e) => return (out, Some(e)),
        }
    }
}

/// Checks that an encodable frame survives encode → decode unchanged, and that a decodable
/// payload survives decode → encode → decode unchanged.
fn check_round_trip(frame: &Frame) {
    if let Ok(bytes) = frame.to_bytes(DEFAULT_MAX_FRAME) {
        let mut buf = BytesMut::from(&bytes[..]);
        let Ok(Decoded::Frame(raw)) = Decoder::default().decode(&mut buf) else {
            panic!("an encoded frame does not decode");
        };
        assert!(buf.is_empty());
        assert_eq!(raw.into_frame().as_ref(), Ok(frame), "frame round trip");
    }
    if let Ok(payload) = frame.decode_payload() {
        check_payload_round_trip(&payload);
    }
}

fn check_payload_round_trip(payload: &Payload) {
    let again = Payload::decode(payload.operand(), &payload.encode());
    assert_eq!(again.as_ref(), Ok(payload), "payload round trip");
}

/// The frame decoder on one buffer: every frame it yields splits, re-encodes, and decodes to
/// itself; an error is only ever a framing error with the header that caused it.
pub fn frame_decode(data: &[u8]) {
    let decoder = Decoder::new(FUZZ_MAX_FRAME);
    let (raws, err) = frames(&decoder, data);
    for raw in raws {
        assert!(raw.body.len() <= FUZZ_MAX_FRAME as usize);
        if let Ok(frame) = raw.into_frame() {
            check_round_trip(&frame);
        }
    }
    if let Some(FrameError::TooLarge { length, max }) = err {
        assert!(length > max);
    }
}

/// The decoder fed in chunks (sizes from the first bytes) yields exactly what it yields on the
/// whole buffer, and the slice decoder agrees with both.
pub fn chunked_decode(data: &[u8]) {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let sizes: Vec<usize> = rest
        .iter()
        .take(usize::from(n % 16))
        .map(|&b| usize::from(b) + 1)
        .collect();
    let stream = &rest[sizes.len().min(rest.len())..];
    let decoder = Decoder::new(FUZZ_MAX_FRAME);
    let whole = frames(&decoder, stream);

    let mut buf = BytesMut::new();
    let mut chunked = Vec::new();
    let mut error = None;
    let mut at = 0;
    let mut i = 0;
    'feed: while at < stream.len() {
        let size = sizes
            .get(i % sizes.len().max(1))
            .copied()
            .unwrap_or(stream.len());
        let end = (at + size).min(stream.len());
        buf.extend_from_slice(&stream[at..end]);
        at = end;
        i += 1;
        loop {
            match decoder.decode(&mut buf) {
                Ok(Decoded::Frame(raw)) => chunked.push(raw),
                Ok(Decoded::NeedMore(more)) => {
                    assert!(more > 0);
                    break;
                }
                Err(e) => {
                    error = Some(e);
                    break 'feed;
                }
            }
        }
    }
    assert_eq!(
        (chunked, error),
        whole.clone(),
        "chunked decoding disagrees"
    );

    let mut at = 0;
    let mut sliced = Vec::new();
    let slice_err = loop {
        match decoder.decode_slice(&stream[at..]) {
            Ok(Some(f)) => {
                sliced.push((f.header, f.body.to_vec()));
                at += f.used;
            }
            Ok(None) => break None,
            Err(e) => break Some(e),
        }
    };
    let whole_frames: Vec<_> = whole
        .0
        .iter()
        .map(|r| (r.header, r.body.to_vec()))
        .collect();
    assert_eq!(
        (sliced, slice_err),
        (whole_frames, whole.1),
        "slice decoding disagrees"
    );
}

/// Every known operand's payload decoder: the first two bytes pick (type, operand), the rest is
/// the payload; whatever decodes re-encodes and decodes to itself.
pub fn payload(data: &[u8]) {
    let [ty, op, rest @ ..] = data else { return };
    let operand = Operand::from_wire(ty % 4, op % 12);
    match Payload::decode(operand, rest) {
        Ok(p) => {
            assert_eq!(p.operand(), operand);
            check_payload_round_trip(&p);
        }
        Err(PayloadError::UnknownOperand(_)) => assert!(!operand.is_known()),
        Err(PayloadError::Missing) => assert!(rest.is_empty()),
        Err(_) => assert!(operand.is_known() && !rest.is_empty()),
    }
}

fn binding(selector: u8, first: Option<&RawFrame>) -> UuidBinding {
    match selector % 4 {
        0 => UuidBinding::Unbound,
        1 => UuidBinding::Bound(first.map_or(Uuid::nil(), |f| f.header.origin)),
        2 => UuidBinding::Bound(Uuid::from_bytes([0x42; 16])),
        _ => UuidBinding::Ambiguous,
    }
}

fn config() -> HandshakeConfig {
    HandshakeConfig {
        handshake_timeout: Duration::from_secs(10),
        session: SessionConfig {
            idle_timeout: Duration::from_secs(30),
            max_frame: FUZZ_MAX_FRAME,
        },
    }
}

/// Feeds an established session the remaining frames, checking the receiving rules' promises,
/// and that the rules applied in place ([`Session::handle_view`], on a copy of the session)
/// agree with them: the same refusals, and views of the same messages.
fn drive_session(
    mut session: Session,
    start: Instant,
    raws: Vec<RawFrame>,
    err: Option<FrameError>,
) {
    let mut viewer = session.clone();
    for (i, raw) in raws.into_iter().enumerate() {
        let ms = 1_000 * (i as u64 + 1);
        let now = Now {
            instant: start + Duration::from_millis(ms),
            unix_ns: ms * 1_000_000,
        };
        let was_error = raw.header.operand.is_error();
        let body = raw.body.clone();
        let viewed = viewer.handle_view(now, &raw.header, &body, 0);
        let received = session.handle_raw(now, raw);
        match (viewed, &received) {
            (Viewed::Passed(entry), Received::Message(m)) => {
                let frames = Frames::new(body, vec![entry]).expect("the entry lies in its body");
                let view = frames.get(0).expect("one frame");
                assert_eq!(
                    view.to_message().as_ref(),
                    Ok(m),
                    "a view of another message"
                );
            }
            (Viewed::Done(done), received) => assert_eq!(&done, received, "views disagree"),
            (Viewed::Passed(_), other) => panic!("passed in place, not whole: {other:?}"),
        }
        assert_eq!(viewer.last_received(), session.last_received());
        match received {
            Received::Message(m) => {
                assert!(m.payload.operand().is_known());
                check_round_trip(&m.frame);
            }
            Received::Rejected { violation, reply } => {
                assert!(!violation.closes_session());
                if was_error {
                    assert!(reply.is_none(), "an ERROR was answered with an ERROR");
                }
                if let Some(reply) = reply {
                    assert!(reply.operand.is_error());
                    assert_eq!(reply.origin, session.local_uuid());
                    check_round_trip(&reply);
                }
            }
            Received::Heartbeat | Received::PeerClosed { .. } => {}
        }
        if let Some(Tick::Heartbeat(f) | Tick::Idle(Some(f))) = session.poll(now.instant) {
            assert_eq!(f.origin, session.local_uuid());
        }
    }
    if let Some(e) = err {
        let (violation, reply) = session.handle_framing_error(e);
        assert!(violation.closes_session());
        assert!(reply.is_some_and(|r| r.operand == Operand::ProtocolViolation));
    }
}

/// The server handshake fed a certificate (first two bytes) and a stream of frames: it accepts
/// only a CONNECT whose claim is valid, within the certificate and bound identity; it answers
/// every refusal with CONNECTION_ABORTED or CONNECTION_FAILURE; the session then applies the
/// receiving rules to the rest.
pub fn server_handshake(data: &[u8]) {
    let [roles, bind, stream @ ..] = data else {
        return;
    };
    let decoder = config().decoder();
    let (mut raws, err) = frames(&decoder, stream);
    let cert = PeerCertificate {
        roles: Role::from_bits_retain(u32::from(*roles)),
        binding: binding(*bind, raws.first()),
    };
    let server = (Uuid::from_bytes([0x5c; 16]), Role::SCHEDULER);
    let start = Instant::now();
    let hs = ServerHandshake::new(server, ClusterConfig::default(), cert, config(), start);
    if raws.is_empty() {
        let rejected = match err {
            Some(e) => hs.handle_framing_error(e),
            None => match hs.handle_timeout(start + Duration::from_secs(10)) {
                Err(r) => r,
                Ok(_) => panic!("the handshake outlived its deadline"),
            },
        };
        assert_eq!(rejected.reply().operand, Operand::ConnectionFailure);
        return;
    }
    let first = raws.remove(0);
    let connect = first.header.operand == Operand::Connect;
    match hs.handle_frame(start, first) {
        Ok(accepted) => {
            assert!(connect);
            let claimed = accepted.session.peer_role();
            assert!(claimed.is_valid_claim() && cert.roles.contains(claimed));
            assert_eq!(accepted.reply.operand, Operand::Connected);
            drive_session(accepted.session, start, raws, err);
        }
        Err(rejected) => {
            let reply = rejected.reply();
            assert!(matches!(
                reply.operand,
                Operand::ConnectionAborted | Operand::ConnectionFailure
            ));
            assert_eq!(
                reply.operand == Operand::ConnectionAborted,
                rejected.error.is_abort()
            );
        }
    }
}

/// The client handshake fed the server certificate (first two bytes), a claim (third byte) and a
/// stream of frames from the server: it connects only on a CONNECTED whose role is a server role
/// within the certificate; the session then applies the receiving rules to the rest.
pub fn client_handshake(data: &[u8]) {
    let [roles, bind, claim, stream @ ..] = data else {
        return;
    };
    let decoder = config().decoder();
    let (mut raws, err) = frames(&decoder, stream);
    let server = PeerCertificate {
        roles: Role::from_bits_retain(u32::from(*roles)),
        binding: binding(*bind, raws.first()),
    };
    let claim = Role::from_bits_retain(u32::from(*claim));
    let me = (Uuid::from_bytes([0x11; 16]), Role::all());
    let start = Instant::now();
    let Ok((hs, connect)) = ClientHandshake::start(me, claim, server, config(), start) else {
        assert!(!claim.is_valid_claim());
        return;
    };
    check_round_trip(&connect);
    if raws.is_empty() {
        assert!(hs.handle_timeout(start + Duration::from_secs(10)).is_err());
        return;
    }
    let first = raws.remove(0);
    let operand = first.header.operand;
    match hs.handle_frame(start, first) {
        Ok(accepted) => {
            assert_eq!(operand, Operand::Connected);
            let role = accepted.session.peer_role();
            assert!(server.roles.contains(role) && role.intersects(Role::SERVER | Role::SCHEDULER));
            drive_session(accepted.session, start, raws, err);
        }
        Err(e) => {
            if operand == Operand::ConnectionAborted {
                assert!(
                    !e.is_retryable() || matches!(e, crate::ClientHandshakeError::Unexpected(_))
                );
            }
        }
    }
}

/// The certificate reader on arbitrary DER: never panics, and where the full reading (for
/// `--dump`) succeeds, the roles and binding it finds are what the endpoints' reading finds.
/// (The endpoints' reading needs less of the certificate, so it may succeed alone.)
pub fn cert(data: &[u8]) {
    let peer = crate::cert::peer_certificate(data);
    if let Ok(info) = crate::cert::CertInfo::parse(data) {
        assert_eq!(
            peer.as_ref().ok(),
            Some(&info.peer()),
            "two readings differ"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    type Target = fn(&[u8]);

    const TARGETS: [(&str, Target); 6] = [
        ("cert", cert),
        ("frame_decode", frame_decode),
        ("chunked_decode", chunked_decode),
        ("payload", payload),
        ("server_handshake", server_handshake),
        ("client_handshake", client_handshake),
    ];

    /// Replays every committed corpus and crash-regression file through its entry point.
    #[test]
    fn seed_corpus_replays() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
        for (name, target) in TARGETS {
            let mut n = 0;
            for dir in [
                root.join("corpus").join(name),
                root.join("regressions").join(name),
            ] {
                let Ok(entries) = std::fs::read_dir(&dir) else {
                    continue;
                };
                for entry in entries {
                    let path = entry.unwrap().path();
                    target(&std::fs::read(&path).unwrap());
                    n += 1;
                }
            }
            assert!(n > 0, "no seed corpus for {name}");
        }
    }

    /// Writes the seed corpus from the golden vectors: `cargo test -p ssntp -- --ignored
    /// write_seed_corpus` (then commit `fuzz/corpus`).
    #[test]
    #[ignore = "writes files; run by hand to refresh the seed corpus"]
    fn write_seed_corpus() {
        use crate::golden::vectors;
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
        let write = |target: &str, name: &str, bytes: &[u8]| {
            let dir = root.join(target);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(name), bytes).unwrap();
        };
        let encoded: Vec<(String, Vec<u8>, Frame)> = vectors()
            .into_iter()
            .map(|(name, f, _)| {
                let file = name.to_lowercase().replace([' ', ','], "_");
                (file, f.to_bytes(DEFAULT_MAX_FRAME).unwrap().to_vec(), f)
            })
            .collect();
        let mut all = Vec::new();
        for (name, bytes, frame) in &encoded {
            write("frame_decode", name, bytes);
            let (ty, op) = frame.operand.to_wire();
            let mut p = vec![ty, op];
            p.extend_from_slice(&frame.payload);
            write("payload", name, &p);
            all.extend_from_slice(bytes);
        }
        write("frame_decode", "all", &all);
        let mut chunked = vec![3, 0, 7, 200];
        chunked.extend_from_slice(&all);
        write("chunked_decode", "all_in_chunks", &chunked);
        let find = |n: &str| encoded.iter().find(|(f, ..)| f == n).unwrap().1.clone();
        let mut server = vec![0x14, 1];
        for n in [
            "connect",
            "ready",
            "stats",
            "heartbeat",
            "start_failure",
            "start",
        ] {
            server.extend_from_slice(&find(n));
        }
        write("server_handshake", "agent_session", &server);
        let mut client = vec![0x08, 0, 0x14];
        for n in [
            "connected",
            "start",
            "delete__traced",
            "heartbeat",
            "connect",
        ] {
            client.extend_from_slice(&find(n));
        }
        write("client_handshake", "agent_session", &client);
    }

    #[test]
    fn entry_points_take_empty_and_tiny_inputs() {
        for (_, target) in TARGETS {
            for data in [&[][..], &[0], &[1, 0], &[0x14, 0, 0x14], &[0xff; 30]] {
                target(data);
            }
        }
    }
}
