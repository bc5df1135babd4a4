//! PEM encoding (RFC 7468) of DER bytes, by the `pem` crate (rcgen's own); decoding is
//! rustls-pki-types'.

use ::pem::{EncodeConfig, LineEnding, Pem};

/// `-----BEGIN {label}-----`, the base64 of `der` in lines of 64, `-----END {label}-----`, each
/// line ended by `\n` (what `cumulo-cert` has always written; the `pem` crate's default is CRLF).
pub fn encode(label: &str, der: &[u8]) -> String {
    ::pem::encode_config(
        &Pem::new(label, der),
        EncodeConfig::new().set_line_ending(LineEnding::LF),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_padding() {
        let body = |der: &[u8]| {
            encode("X", der)
                .lines()
                .nth(1)
                .unwrap_or_default()
                .to_string()
        };
        assert_eq!(encode("X", b""), "-----BEGIN X-----\n-----END X-----\n");
        assert_eq!(body(b"f"), "Zg==");
        assert_eq!(body(b"fo"), "Zm8=");
        assert_eq!(body(b"foo"), "Zm9v");
        assert_eq!(body(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn lines_of_64() {
        let text = encode("X", &[7u8; 100]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "-----BEGIN X-----");
        assert_eq!(lines[1].len(), 64);
        assert_eq!(lines[2].len(), 64);
        assert_eq!(lines[3].len(), 136 - 128);
        assert_eq!(lines[4], "-----END X-----");
    }

    #[test]
    fn byte_identical_to_what_cumulo_cert_always_wrote() {
        let der: Vec<u8> = (0..100).collect();
        assert_eq!(
            encode("CERTIFICATE", &der),
            "-----BEGIN CERTIFICATE-----\n\
             AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4v\n\
             MDEyMzQ1Njc4OTo7PD0+P0BBQkNERUZHSElKS0xNTk9QUVJTVFVWV1hZWltcXV5f\n\
             YGFiYw==\n\
             -----END CERTIFICATE-----\n"
        );
        assert_eq!(encode("X", b""), "-----BEGIN X-----\n-----END X-----\n");
    }
}
