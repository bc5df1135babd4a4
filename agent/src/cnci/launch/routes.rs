//! The route channel: how a CNCI tells its own network node which public (floating) addresses
//! it holds, so that the node routes each of them to it (`F/32 dev cn<12 hex>`: the node then
//! ARPs for F on the CNCI's veth, the CNCI answers and DNATs it to its instance).
//!
//! Every CNCI gets a listener of its own, in its namespace, next to its relay: a process CNCI's
//! on the namespace's loopback (an ephemeral port, `cumulo-cnci --route-via 127.0.0.1:<port>`),
//! a VM CNCI's on the relay's link-local address, [`ROUTE_PORT`] (`CUMULO_CNCI_ROUTE_VIA` in
//! its user data). The CNCI is known by the listener a connection came in on: it never names
//! itself.
//!
//! The protocol, one command a line (ASCII, at most [`MAX_LINE`] bytes with the newline):
//!
//! - `add A.B.C.D` — route A.B.C.D to this CNCI; `del A.B.C.D` — remove that route (only if it
//!   points at this CNCI's link; a route that is not there is fine);
//! - each is answered by one line: `ok`, or `refused <why>`.
//!
//! An address is taken only if it is IPv4 and inside the node's floating range (`--floating-range`),
//! neither the range's network nor broadcast address nor its first host (the gateway), and no
//! route to it exists on another link (another CNCI's, or anything the operator routed). A line
//! too long or a connection idle for [`IDLE`] closes the connection; at most
//! [`MAX_CONNECTIONS`] connections a CNCI at once (more are closed at once), and at most
//! [`MAX_COMMANDS`] commands a connection. Changes go through the `ip` binary, one at a time on
//! the node, and are logged.

use ipnet::Ipv4Net;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// A VM CNCI's route listener's port (on the relay's address, 169.254.0.1).
pub const ROUTE_PORT: u16 = 8444;
/// The longest line, with its newline.
pub const MAX_LINE: usize = 64;
/// How long a connection may stay silent.
pub const IDLE: Duration = Duration::from_secs(30);
/// Connections a CNCI may hold at once.
pub const MAX_CONNECTIONS: usize = 4;
/// Commands one connection may send.
pub const MAX_COMMANDS: usize = 4096;

/// One command of a CNCI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteCommand {
    /// Route the address to the CNCI.
    Add(Ipv4Addr),
    /// Remove its route to the CNCI.
    Del(Ipv4Addr),
}

/// Why a command is refused (the `<why>` of `refused <why>`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteRefusal {
    /// Longer than [`MAX_LINE`].
    #[error("line too long")]
    TooLong,
    /// Not `add ADDR` or `del ADDR`.
    #[error("not add/del ADDRESS")]
    Malformed,
    /// Not an IPv4 address.
    #[error("not an IPv4 address")]
    NotIpv4,
    /// Outside the floating range.
    #[error("{0} is outside the floating range {1}")]
    OutsideRange(Ipv4Addr, Ipv4Net),
    /// The range's network, broadcast or gateway address.
    #[error("{0} is the floating range's {1} address")]
    Reserved(Ipv4Addr, &'static str),
    /// Routed elsewhere (another CNCI's link or anything else).
    #[error("{0} is routed to {1}, not to this CNCI")]
    HeldElsewhere(Ipv4Addr, String),
    /// The kernel refused.
    #[error("the route was not changed: {0}")]
    Kernel(String),
}

/// Parses one line (without or with its `\n`).
pub fn parse(line: &[u8]) -> Result<RouteCommand, RouteRefusal> {
    if line.len() > MAX_LINE {
        return Err(RouteRefusal::TooLong);
    }
    let text = std::str::from_utf8(line).map_err(|_| RouteRefusal::Malformed)?;
    let text = text.strip_suffix('\n').unwrap_or(text);
    let text = text.strip_suffix('\r').unwrap_or(text);
    let (verb, arg) = text.split_once(' ').ok_or(RouteRefusal::Malformed)?;
    let addr: Ipv4Addr = arg.parse().map_err(|_| RouteRefusal::NotIpv4)?;
    match verb {
        "add" => Ok(RouteCommand::Add(addr)),
        "del" => Ok(RouteCommand::Del(addr)),
        _ => Err(RouteRefusal::Malformed),
    }
}

/// Whether `addr` is one the range hands out: inside it, and not its network, broadcast or
/// first host (the gateway).
pub fn check_floating(range: Ipv4Net, addr: Ipv4Addr) -> Result<(), RouteRefusal> {
    let range = range.trunc();
    if !range.contains(&addr) {
        return Err(RouteRefusal::OutsideRange(addr, range));
    }
    if range.prefix_len() < 31 {
        if addr == range.network() {
            return Err(RouteRefusal::Reserved(addr, "network"));
        }
        if addr == range.broadcast() {
            return Err(RouteRefusal::Reserved(addr, "broadcast"));
        }
        if u32::from(addr) == u32::from(range.network()) + 1 {
            return Err(RouteRefusal::Reserved(addr, "gateway"));
        }
    }
    Ok(())
}

/// What to do in the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteChange {
    /// `ip route replace F/32 dev <link>`.
    Replace,
    /// `ip route del F/32 dev <link>`.
    Delete,
    /// Already so.
    Nothing,
}

/// What `cmd` from the CNCI whose link is `link` does, given the link the node routes the
/// address to now (`None`: no route of its own).
pub fn decide(
    range: Ipv4Net,
    link: &str,
    cmd: RouteCommand,
    routed_to: Option<&str>,
) -> Result<RouteChange, RouteRefusal> {
    match cmd {
        RouteCommand::Add(a) => {
            check_floating(range, a)?;
            match routed_to {
                None => Ok(RouteChange::Replace),
                Some(l) if l == link => Ok(RouteChange::Nothing),
                Some(other) => Err(RouteRefusal::HeldElsewhere(a, other.to_string())),
            }
        }
        // Only what points at this CNCI goes; anything else is not its business (and not
        // told: a route elsewhere is simply left).
        RouteCommand::Del(_) => match routed_to {
            Some(l) if l == link => Ok(RouteChange::Delete),
            _ => Ok(RouteChange::Nothing),
        },
    }
}

/// The link of the node's own route to exactly `addr/32` in the main table, from `ip -o route
/// show exact` output.
pub fn parse_route_dev(out: &str) -> Option<String> {
    let line = out.lines().find(|l| !l.trim().is_empty())?;
    let mut words = line.split_whitespace();
    while let Some(w) = words.next() {
        if w == "dev" {
            return words.next().map(str::to_string);
        }
    }
    // A route without a link (blackhole, unreachable...): held, by nobody's link.
    Some(line.split_whitespace().next().unwrap_or("?").to_string())
}

/// What one CNCI's listener needs.
#[derive(Clone)]
pub struct RouteContext {
    /// The CNCI.
    pub cnci: Uuid,
    /// The node's end of its veth pair (`cn<12 hex>`).
    pub link: String,
    /// The node's floating range.
    pub range: Ipv4Net,
    /// Serializes route changes on the node (two CNCIs claiming one address).
    pub lock: Arc<tokio::sync::Mutex<()>>,
}

async fn ip_out(args: &[&str]) -> Result<String, String> {
    let out = tokio::process::Command::new("ip")
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Carries out one command in the kernel.
pub async fn apply(ctx: &RouteContext, cmd: RouteCommand) -> Result<RouteChange, RouteRefusal> {
    let addr = match cmd {
        RouteCommand::Add(a) | RouteCommand::Del(a) => a,
    };
    let dst = format!("{addr}/32");
    let _held = ctx.lock.lock().await;
    let shown = ip_out(&["-4", "-o", "route", "show", "exact", &dst, "table", "main"])
        .await
        .map_err(RouteRefusal::Kernel)?;
    let change = decide(
        ctx.range,
        &ctx.link,
        cmd,
        parse_route_dev(&shown).as_deref(),
    )?;
    let done = match change {
        RouteChange::Replace => ip_out(&["route", "replace", &dst, "dev", &ctx.link]).await,
        RouteChange::Delete => ip_out(&["route", "del", &dst, "dev", &ctx.link]).await,
        RouteChange::Nothing => return Ok(change),
    };
    done.map_err(RouteRefusal::Kernel)?;
    tracing::info!(cnci = %ctx.cnci, link = %ctx.link, public_ip = %addr, ?change, "floating IP route changed");
    Ok(change)
}

/// Serves `listener` (one CNCI's) until `stop`.
pub fn serve(listener: std::net::TcpListener, ctx: RouteContext, stop: CancellationToken) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        tracing::warn!(cnci = %ctx.cnci, "route listener not served");
        return;
    };
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                _ = stop.cancelled() => break,
                a = listener.accept() => a,
            };
            let Ok((conn, _)) = accepted else {
                continue;
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                tracing::warn!(cnci = %ctx.cnci, "route channel: too many connections, one closed");
                continue;
            };
            let ctx = ctx.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                tokio::select! {
                    _ = stop.cancelled() => {}
                    r = session(conn, &ctx) => if let Err(e) = r {
                        tracing::debug!(cnci = %ctx.cnci, error = %e, "route channel closed");
                    },
                }
                drop(slot);
            });
        }
    });
}

/// One connection: commands until EOF, a bad line, [`IDLE`] or [`MAX_COMMANDS`].
async fn session(conn: tokio::net::TcpStream, ctx: &RouteContext) -> std::io::Result<()> {
    let (r, mut w) = conn.into_split();
    let mut r = BufReader::new(r).take(0);
    for _ in 0..MAX_COMMANDS {
        let mut line = Vec::new();
        // One byte past the limit tells a line too long from one just long enough.
        r.set_limit(MAX_LINE as u64 + 1);
        let n = match tokio::time::timeout(IDLE, r.read_until(b'\n', &mut line)).await {
            Ok(n) => n?,
            Err(_) => return Ok(()),
        };
        if n == 0 {
            return Ok(());
        }
        let unterminated = !line.ends_with(b"\n");
        let answer = if unterminated && line.len() > MAX_LINE {
            Err(RouteRefusal::TooLong)
        } else if unterminated {
            // EOF in the middle of a line.
            return Ok(());
        } else {
            match parse(&line) {
                Ok(cmd) => apply(ctx, cmd).await.map(|_| ()),
                Err(e) => Err(e),
            }
        };
        let text = match &answer {
            Ok(()) => "ok\n".to_string(),
            Err(e) => {
                tracing::warn!(cnci = %ctx.cnci, refused = %e, "route channel: refused");
                format!("refused {e}\n")
            }
        };
        w.write_all(text.as_bytes()).await?;
        if answer == Err(RouteRefusal::TooLong) {
            return Ok(());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range() -> Ipv4Net {
        "192.168.233.0/24".parse().unwrap()
    }

    #[test]
    fn lines_parse_or_are_refused() {
        let a = Ipv4Addr::new(192, 168, 233, 5);
        assert_eq!(parse(b"add 192.168.233.5\n"), Ok(RouteCommand::Add(a)));
        assert_eq!(parse(b"del 192.168.233.5\r\n"), Ok(RouteCommand::Del(a)));
        assert_eq!(parse(b"del 192.168.233.5"), Ok(RouteCommand::Del(a)));
        assert_eq!(parse(b"add\n"), Err(RouteRefusal::Malformed));
        assert_eq!(parse(b"put 192.168.233.5\n"), Err(RouteRefusal::Malformed));
        assert_eq!(parse(b"add  192.168.233.5\n"), Err(RouteRefusal::NotIpv4));
        assert_eq!(parse(b"add fe80::1\n"), Err(RouteRefusal::NotIpv4));
        assert_eq!(parse(b"add 1.2.3.4/32\n"), Err(RouteRefusal::NotIpv4));
        assert_eq!(parse(b"add \xff\n"), Err(RouteRefusal::Malformed));
        let long = format!("add {}\n", "1".repeat(MAX_LINE));
        assert_eq!(parse(long.as_bytes()), Err(RouteRefusal::TooLong));
    }

    #[test]
    fn only_handed_out_addresses_of_the_range_are_taken() {
        let r = range();
        assert_eq!(check_floating(r, Ipv4Addr::new(192, 168, 233, 2)), Ok(()));
        assert_eq!(check_floating(r, Ipv4Addr::new(192, 168, 233, 254)), Ok(()));
        for (last, what) in [(0, "network"), (255, "broadcast"), (1, "gateway")] {
            let a = Ipv4Addr::new(192, 168, 233, last);
            assert_eq!(check_floating(r, a), Err(RouteRefusal::Reserved(a, what)));
        }
        let out = Ipv4Addr::new(10, 0, 0, 5);
        assert_eq!(
            check_floating(r, out),
            Err(RouteRefusal::OutsideRange(out, r))
        );
        // A range given with host bits counts as its network.
        let sloppy: Ipv4Net = "192.168.233.77/24".parse().unwrap();
        assert!(check_floating(sloppy, Ipv4Addr::new(192, 168, 233, 1)).is_err());
    }

    #[test]
    fn another_links_address_is_refused_and_only_ones_own_route_is_deleted() {
        let r = range();
        let a = Ipv4Addr::new(192, 168, 233, 9);
        let me = "cn0123456789ab";
        assert_eq!(
            decide(r, me, RouteCommand::Add(a), None),
            Ok(RouteChange::Replace)
        );
        assert_eq!(
            decide(r, me, RouteCommand::Add(a), Some(me)),
            Ok(RouteChange::Nothing)
        );
        assert_eq!(
            decide(r, me, RouteCommand::Add(a), Some("cnffffffffffff")),
            Err(RouteRefusal::HeldElsewhere(a, "cnffffffffffff".into()))
        );
        assert_eq!(
            decide(r, me, RouteCommand::Del(a), Some("cnffffffffffff")),
            Ok(RouteChange::Nothing)
        );
        assert_eq!(
            decide(r, me, RouteCommand::Del(a), Some(me)),
            Ok(RouteChange::Delete)
        );
        assert_eq!(
            decide(r, me, RouteCommand::Del(a), None),
            Ok(RouteChange::Nothing)
        );
        // The gateway is refused even when free.
        let gw = Ipv4Addr::new(192, 168, 233, 1);
        assert!(decide(r, me, RouteCommand::Add(gw), None).is_err());
    }

    /// A served listener on loopback: lines refused before any route is looked at (so the
    /// host's routes are never read or touched), a line too long closes the connection, and
    /// connections past the bound are closed at once.
    #[tokio::test]
    async fn bad_lines_are_answered_and_connections_bounded() {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let at = l.local_addr().unwrap();
        let stop = CancellationToken::new();
        let ctx = RouteContext {
            cnci: Uuid::from_u128(7),
            link: "cn000000000007".into(),
            range: range(),
            lock: Arc::default(),
        };
        serve(l, ctx, stop.clone());
        let connect =
            || async { BufReader::new(tokio::net::TcpStream::connect(at).await.unwrap()) };
        let mut c = connect().await;
        let mut answer = String::new();
        for (line, want) in [
            ("hello\n", "refused not add/del ADDRESS\n"),
            ("add fe80::1\n", "refused not an IPv4 address\n"),
        ] {
            c.get_mut().write_all(line.as_bytes()).await.unwrap();
            answer.clear();
            c.read_line(&mut answer).await.unwrap();
            assert_eq!(answer, want);
        }
        // Held: three more fill the bound; the next is closed without an answer.
        let mut held = Vec::new();
        for _ in 1..MAX_CONNECTIONS {
            let mut h = connect().await;
            h.get_mut().write_all(b"x\n").await.unwrap();
            answer.clear();
            h.read_line(&mut answer).await.unwrap();
            assert!(answer.starts_with("refused"), "{answer}");
            held.push(h);
        }
        let mut over = connect().await;
        let _ = over.get_mut().write_all(b"x\n").await;
        answer.clear();
        assert_eq!(over.read_line(&mut answer).await.unwrap_or(0), 0);
        let long = format!("add {}\n", "9".repeat(2 * MAX_LINE));
        c.get_mut().write_all(long.as_bytes()).await.unwrap();
        answer.clear();
        c.read_line(&mut answer).await.unwrap();
        assert_eq!(answer, "refused line too long\n");
        answer.clear();
        assert_eq!(
            c.read_line(&mut answer).await.unwrap_or(0),
            0,
            "closed after it"
        );
        stop.cancel();
    }

    #[test]
    fn the_routes_link_is_read_from_ip_output() {
        assert_eq!(
            parse_route_dev("192.168.233.5 dev cn0123456789ab scope link \n").as_deref(),
            Some("cn0123456789ab")
        );
        assert_eq!(parse_route_dev("\n"), None);
        assert_eq!(parse_route_dev("").as_deref(), None);
        assert_eq!(
            parse_route_dev("blackhole 192.168.233.5 \n").as_deref(),
            Some("blackhole")
        );
    }
}
