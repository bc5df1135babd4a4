//! The relay request: a client that reaches its servers through a TCP relay
//! ([`crate::ClientConfig::via`]) names the server it wants in one line before TLS begins, so
//! that one relay serves a client with several servers (a CNCI holds a session with every
//! scheduler). The relay connects only to the servers it was given, then passes the bytes both
//! ways untouched: TLS runs end to end and still checks the server's name.
//!
//! The line is `SSNTP-RELAY <host:port>\n`, at most [`MAX_LINE`] bytes.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

/// What the line starts with.
pub const PREFIX: &str = "SSNTP-RELAY ";

/// The longest line a relay reads (the newline included).
pub const MAX_LINE: usize = 512;

/// How long a relay waits for the line.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a relay refused a connection.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// The line did not come in time, or the connection ended first.
    #[error("no relay request: {0}")]
    Read(String),
    /// The line is not a relay request.
    #[error("not a relay request")]
    Malformed,
    /// The server named is not one this relay serves.
    #[error("{0:?} is not a server this relay serves")]
    NotServed(String),
}

/// The line asking a relay for `server`.
pub fn request(server: &str) -> Vec<u8> {
    format!("{PREFIX}{server}\n").into_bytes()
}

/// Reads a relay request from `stream` (byte by byte: nothing after the line is consumed)
/// within [`READ_TIMEOUT`]: the server it names, if `served` has it.
pub async fn read_request<R: AsyncRead + Unpin>(
    stream: &mut R,
    served: &[String],
) -> Result<String, RelayError> {
    let read = async {
        let mut line = Vec::with_capacity(64);
        loop {
            let byte = stream
                .read_u8()
                .await
                .map_err(|e| RelayError::Read(e.to_string()))?;
            if byte == b'\n' {
                return Ok(line);
            }
            if line.len() + 1 >= MAX_LINE {
                return Err(RelayError::Malformed);
            }
            line.push(byte);
        }
    };
    let line = tokio::time::timeout(READ_TIMEOUT, read)
        .await
        .map_err(|_| RelayError::Read("timed out".into()))??;
    let server = std::str::from_utf8(&line)
        .ok()
        .and_then(|l| l.strip_prefix(PREFIX))
        .ok_or(RelayError::Malformed)?;
    if served.iter().any(|s| s == server) {
        Ok(server.to_string())
    } else {
        Err(RelayError::NotServed(server.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_request_names_a_served_server_and_nothing_after_it_is_read() {
        let served = vec!["a:1".to_string(), "b:2".to_string()];
        let mut bytes = request("b:2");
        bytes.extend_from_slice(b"tls");
        let mut r = &bytes[..];
        assert_eq!(read_request(&mut r, &served).await.unwrap(), "b:2");
        assert_eq!(r, b"tls");
        let mut r = &request("c:3")[..];
        assert!(matches!(
            read_request(&mut r, &served).await,
            Err(RelayError::NotServed(s)) if s == "c:3"
        ));
        let mut r = &b"GET / HTTP/1.1\n"[..];
        assert!(matches!(
            read_request(&mut r, &served).await,
            Err(RelayError::Malformed)
        ));
        let long = vec![b'x'; MAX_LINE * 2];
        let mut r = &long[..];
        assert!(matches!(
            read_request(&mut r, &served).await,
            Err(RelayError::Malformed)
        ));
        let mut r = &b"SSNTP-RELAY a:1"[..];
        assert!(matches!(
            read_request(&mut r, &served).await,
            Err(RelayError::Read(_))
        ));
    }
}
