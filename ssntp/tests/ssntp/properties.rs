//! Properties: decode(encode(f)) == f for every frame and payload, and any split of a byte
//! stream decodes to the same frames.

use bytes::BytesMut;
use proptest::collection::vec;
use proptest::prelude::*;
use ssntp::frame::{DEFAULT_MAX_FRAME, Frame};
use ssntp::payload::Payload;
use ssntp::{Decoded, Decoder};

use crate::strategies::{frame, payload, raw_frame};

fn decode_all(decoder: &Decoder, buf: &mut BytesMut) -> Vec<Frame> {
    let mut out = Vec::new();
    while let Decoded::Frame(raw) = decoder.decode(buf).expect("frames are within limits") {
        assert_eq!(raw.header.length as usize, raw.body.len());
        out.push(raw.into_frame().expect("bodies split"));
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn payloads_round_trip(p in payload()) {
        let bytes = p.encode();
        prop_assert_eq!(Payload::decode(p.operand(), &bytes), Ok(p));
    }

    #[test]
    fn frames_round_trip((f, p) in frame()) {
        let mut buf = BytesMut::from(&f.to_bytes(DEFAULT_MAX_FRAME).expect("encodes")[..]);
        let got = decode_all(&Decoder::default(), &mut buf);
        prop_assert!(buf.is_empty());
        prop_assert_eq!(got.len(), 1);
        prop_assert_eq!(&got[0], &f);
        prop_assert_eq!(got[0].decode_payload(), Ok(p));
    }

    #[test]
    fn an_untraced_frames_length_is_known_without_encoding_it((f, _p) in frame()) {
        let encoded = f.to_bytes(DEFAULT_MAX_FRAME).expect("encodes").len();
        let known = f.untraced_len(DEFAULT_MAX_FRAME).expect("fits");
        prop_assert_eq!(known, f.trace.is_none().then_some(encoded));
        if let Some(len) = known {
            let small = (len - ssntp::frame::HEADER_LEN) as u32;
            prop_assert!(f.untraced_len(small).is_ok());
            if small > 0 {
                prop_assert!(f.untraced_len(small - 1).is_err());
                prop_assert!(f.to_bytes(small - 1).is_err());
            }
        }
    }

    #[test]
    fn any_split_of_a_stream_decodes_the_same(frames in vec(raw_frame(), 1..8), cuts in vec(any::<prop::sample::Index>(), 0..12)) {
        let mut stream = BytesMut::new();
        for f in &frames {
            f.encode(&mut stream, DEFAULT_MAX_FRAME).expect("encodes");
        }
        let stream = stream.freeze();
        let mut points: Vec<usize> = cuts.iter().map(|i| i.index(stream.len() + 1)).collect();
        points.push(0);
        points.push(stream.len());
        points.sort_unstable();
        let decoder = Decoder::default();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for w in points.windows(2) {
            buf.extend_from_slice(&stream[w[0]..w[1]]);
            got.extend(decode_all(&decoder, &mut buf));
        }
        prop_assert!(buf.is_empty());
        prop_assert_eq!(got, frames);
    }

    #[test]
    fn slice_decoding_agrees_with_buffer_decoding(frames in vec(raw_frame(), 1..6)) {
        let mut stream = BytesMut::new();
        for f in &frames {
            f.encode(&mut stream, DEFAULT_MAX_FRAME).expect("encodes");
        }
        let decoder = Decoder::default();
        let mut at = 0;
        let mut n = 0;
        while let Some(sf) = decoder.decode_slice(&stream[at..]).expect("within limits") {
            let expect = frames[n].to_bytes(DEFAULT_MAX_FRAME).expect("encodes");
            prop_assert_eq!(&stream[at..at + sf.used], &expect[..]);
            at += sf.used;
            n += 1;
        }
        prop_assert_eq!((at, n), (stream.len(), frames.len()));
    }
}

#[test]
fn the_size_cap_is_exact_and_checked_before_the_body_arrives() {
    let decoder = Decoder::new(1 << 20);
    let header = |len: u32| {
        let mut h = vec![1u8, 0, 1, 5];
        h.extend_from_slice(&len.to_be_bytes());
        h.extend_from_slice(&[0u8; 16]);
        h
    };
    // 1 MiB is accepted (needs the body), 1 MiB + 1 is refused from the header alone.
    let mut ok = BytesMut::from(&header(1 << 20)[..]);
    assert_eq!(decoder.decode(&mut ok), Ok(Decoded::NeedMore(1 << 20)));
    assert!(
        ok.capacity() <= 24 + (64 << 10),
        "room grows with what arrives, not at once"
    );
    let mut big = BytesMut::from(&header((1 << 20) + 1)[..]);
    let before = big.capacity();
    assert_eq!(
        decoder.decode(&mut big),
        Err(ssntp::FrameError::TooLarge {
            length: (1 << 20) + 1,
            max: 1 << 20
        })
    );
    assert_eq!(
        big.capacity(),
        before,
        "nothing reserved for a refused body"
    );
    // Never above 16 MiB, whatever is asked.
    assert_eq!(Decoder::new(u32::MAX).max_frame(), 16 << 20);
    // A wrong major version is refused whatever the length.
    let mut v2 = BytesMut::from(&header(0)[..]);
    v2[0] = 2;
    assert_eq!(
        decoder.decode(&mut v2),
        Err(ssntp::FrameError::Version { major: 2 })
    );
    // Fewer than 24 bytes: need the rest of the header.
    let mut short = BytesMut::from(&header(0)[..10]);
    assert_eq!(decoder.decode(&mut short), Ok(Decoded::NeedMore(14)));
}
