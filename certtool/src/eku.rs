//! The Extended Key Usage extension of a role certificate: `serverAuth`, `clientAuth`, then the
//! role OIDs (PROTOCOL.md §2), never `anyExtendedKeyUsage`.
//!
//! rcgen's `ExtendedKeyUsagePurpose::Other` takes `u64` arcs, and the role arc
//! `2.25.15223806111904034722754700881208103483` needs 124 bits, so the extension is encoded here
//! (DER: a SEQUENCE of OBJECT IDENTIFIERs) and handed to rcgen as a custom extension.

use rcgen::CustomExtension;
use ssntp::Role;

/// The extension's OID, `id-ce-extKeyUsage` (2.5.29.37).
const EXT_KEY_USAGE: [u64; 4] = [2, 5, 29, 37];

/// DER content of `id-kp-serverAuth` (1.3.6.1.5.5.7.3.1).
pub const SERVER_AUTH: [u8; 8] = [0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x01];
/// DER content of `id-kp-clientAuth` (1.3.6.1.5.5.7.3.2).
pub const CLIENT_AUTH: [u8; 8] = [0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x02];

/// The non-critical Extended Key Usage extension for a certificate with these roles (and the
/// REST API admin's OID, [`ssntp::api_admin_oid`], when `api_admin`).
pub fn extension(roles: Role, api_admin: bool) -> CustomExtension {
    CustomExtension::from_oid_content(&EXT_KEY_USAGE, der(roles, api_admin))
}

/// The extension's value: `SEQUENCE { serverAuth, clientAuth, role OIDs in bit order, the API
/// admin's OID if asked }`.
pub fn der(roles: Role, api_admin: bool) -> Vec<u8> {
    let mut oids = vec![SERVER_AUTH.to_vec(), CLIENT_AUTH.to_vec()];
    oids.extend(roles.singles().filter_map(Role::oid_der));
    if api_admin {
        oids.push(ssntp::api_admin_oid_der());
    }
    let mut body = Vec::new();
    for oid in &oids {
        push_tlv(&mut body, 0x06, oid);
    }
    let mut out = Vec::with_capacity(body.len() + 4);
    push_tlv(&mut out, 0x30, &body);
    out
}

/// Appends a DER tag, definite length and value.
fn push_tlv(out: &mut Vec<u8>, tag: u8, value: &[u8]) {
    out.push(tag);
    let len = value.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(value);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Splits a DER SEQUENCE of OIDs back into OID contents.
    fn oids(der: &[u8]) -> Vec<Vec<u8>> {
        assert_eq!(der[0], 0x30);
        let (len, mut rest) = match der[1] {
            n if n < 0x80 => (usize::from(n), &der[2..]),
            0x81 => (usize::from(der[2]), &der[3..]),
            0x82 => (usize::from(der[2]) << 8 | usize::from(der[3]), &der[4..]),
            other => panic!("length form {other:#x}"),
        };
        assert_eq!(rest.len(), len);
        let mut out = Vec::new();
        while !rest.is_empty() {
            assert_eq!(rest[0], 0x06);
            let n = usize::from(rest[1]);
            out.push(rest[2..2 + n].to_vec());
            rest = &rest[2 + n..];
        }
        out
    }

    #[test]
    fn server_and_client_auth_then_roles() {
        let got = oids(&der(Role::DUAL, false));
        assert_eq!(got.len(), 4);
        assert_eq!(got[0], SERVER_AUTH);
        assert_eq!(got[1], CLIENT_AUTH);
        assert_eq!(Role::from_oids(got.iter().map(Vec::as_slice)), Role::DUAL);
    }

    #[test]
    fn long_form_length_for_many_roles() {
        let all = der(Role::all(), false);
        assert!(all.len() > 0x80);
        assert_eq!(all[1], 0x81);
        let got = oids(&all);
        assert_eq!(got.len(), 8);
        assert_eq!(Role::from_oids(got.iter().map(Vec::as_slice)), Role::all());
    }

    #[test]
    fn no_role_is_just_tls() {
        assert_eq!(
            oids(&der(Role::empty(), false)),
            vec![SERVER_AUTH, CLIENT_AUTH]
        );
        // anyExtendedKeyUsage (2.5.29.37.0) never appears.
        let any = [0x55, 0x1d, 0x25, 0x00];
        for role in [Role::empty(), Role::DUAL, Role::all()] {
            assert!(!oids(&der(role, false)).contains(&any.to_vec()));
        }
    }

    #[test]
    fn tlv_lengths() {
        let mut out = Vec::new();
        push_tlv(&mut out, 4, &[0; 300]);
        assert_eq!(&out[..4], &[4, 0x82, 0x01, 0x2c]);
        out.clear();
        push_tlv(&mut out, 4, &[0; 127]);
        assert_eq!(&out[..2], &[4, 127]);
    }
}
