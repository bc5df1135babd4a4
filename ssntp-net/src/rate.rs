//! Read budgets: how fast a server reads each peer ([`ReadRate`]), chosen by the peer's role
//! ([`ReadRates`]). A peer that sends faster than its budget is read more slowly (TCP pushes back
//! on it); nothing it sent is dropped and nothing closes. This keeps one flooding peer from
//! taking the readers' CPU, and the application's, from the others.
//!
//! How the defaults were chosen (measured, `docs/benchmarks.md`, "Read budgets"): an honest
//! agent's heaviest traffic is STATS while its node fills (every instance listed, one STATS per
//! `--change-report-gap`), about 1.8 MB/s on a node with 1,000 instances; an agent's default
//! budget is several times that, with a burst that takes a node's whole restart at once. A frame
//! costs the reader about as much as 512 bytes of payload (the per-frame and per-byte times of the
//! typed path), so each frame is charged that much besides its bytes: a flood of small frames
//! meets the budget as early as a flood of large ones. A controller is trusted and read as fast
//! as it sends.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use ssntp::Role;

/// A session's read budget: a token bucket over the bytes read, each frame charged
/// [`ReadRate::frame_cost`] bytes besides its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadRate {
    /// Bytes per second, sustained.
    pub bytes_per_sec: u64,
    /// Bytes that may be read at once after a quiet spell.
    pub burst: u64,
    /// What each frame costs besides its bytes (a frame's handling costs more than its size).
    pub frame_cost: u64,
}

impl ReadRate {
    /// The default charge per frame: the reader's time for one frame is about its time for
    /// 512 bytes of payload.
    pub const FRAME_COST: u64 = 512;

    /// A compute or network node: 16 MiB/s sustained, bursts of 64 MiB.
    pub const NODE: ReadRate = ReadRate {
        bytes_per_sec: 16 << 20,
        burst: 64 << 20,
        frame_cost: ReadRate::FRAME_COST,
    };

    /// A CNCI (one tenant's network concentrator, inside a VM on the tenant's network): 1 MiB/s
    /// sustained, bursts of 8 MiB.
    pub const CNCI: ReadRate = ReadRate {
        bytes_per_sec: 1 << 20,
        burst: 8 << 20,
        frame_cost: ReadRate::FRAME_COST,
    };

    /// How many frames of `frame_bytes` each this budget reads per second, sustained.
    pub fn frames_per_sec(&self, frame_bytes: u64) -> f64 {
        self.bytes_per_sec as f64 / (frame_bytes + self.frame_cost).max(1) as f64
    }
}

impl Default for ReadRate {
    /// [`ReadRate::NODE`].
    fn default() -> ReadRate {
        ReadRate::NODE
    }
}

impl fmt::Display for ReadRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}/{}",
            self.bytes_per_sec, self.burst, self.frame_cost
        )
    }
}

/// A read budget as written on a command line: `RATE/BURST/FRAME` in bytes (`16M/64M/512`; the
/// suffixes K, M and G are powers of 1,024), or `RATE` alone (the burst four seconds of it, the
/// default frame charge).
impl FromStr for ReadRate {
    type Err = RateParseError;

    fn from_str(s: &str) -> Result<ReadRate, RateParseError> {
        let mut parts = s.split('/');
        let bytes_per_sec = size(parts.next().unwrap_or_default())?;
        if bytes_per_sec == 0 {
            return Err(RateParseError::Zero);
        }
        let burst = match parts.next() {
            Some(b) => size(b)?,
            None => bytes_per_sec.saturating_mul(4),
        };
        let frame_cost = match parts.next() {
            Some(c) => size(c)?,
            None => ReadRate::FRAME_COST,
        };
        if parts.next().is_some() {
            return Err(RateParseError::Form(s.to_string()));
        }
        Ok(ReadRate {
            bytes_per_sec,
            burst,
            frame_cost,
        })
    }
}

/// A size in bytes with an optional K, M or G (powers of 1,024).
fn size(s: &str) -> Result<u64, RateParseError> {
    let s = s.trim();
    let (digits, shift) = match s.char_indices().last() {
        Some((i, 'K' | 'k')) => (&s[..i], 10),
        Some((i, 'M' | 'm')) => (&s[..i], 20),
        Some((i, 'G' | 'g')) => (&s[..i], 30),
        _ => (s, 0),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| RateParseError::Size(s.to_string()))?;
    n.checked_mul(1 << shift)
        .ok_or_else(|| RateParseError::Size(s.to_string()))
}

/// A read budget or a role's budget that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RateParseError {
    /// Not `RATE[/BURST[/FRAME]]`.
    #[error("{0:?}: expected RATE[/BURST[/FRAME]] in bytes (K, M, G: powers of 1,024), or off")]
    Form(String),
    /// A size that is not a number of bytes.
    #[error("{0:?} is not a size in bytes (digits, then K, M or G)")]
    Size(String),
    /// A rate of nothing (use `off` for no budget).
    #[error("a read rate of 0 would never read: give a rate, or off for no budget")]
    Zero,
    /// Not `ROLE=BUDGET`.
    #[error(
        "{0:?}: expected ROLE=RATE[/BURST[/FRAME]] or ROLE=off (roles: agent, netagent, cnciagent, controller)"
    )]
    Role(String),
}

/// The read budget of each role a peer may connect with (`None`: read as fast as it sends).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadRates {
    /// Controllers (default: none).
    pub controller: Option<ReadRate>,
    /// Compute nodes (default [`ReadRate::NODE`]).
    pub agent: Option<ReadRate>,
    /// Network nodes (default [`ReadRate::NODE`]).
    pub netagent: Option<ReadRate>,
    /// CNCIs (default [`ReadRate::CNCI`]).
    pub cnciagent: Option<ReadRate>,
    /// Any other role (default [`ReadRate::CNCI`]: the smallest).
    pub other: Option<ReadRate>,
}

impl Default for ReadRates {
    fn default() -> ReadRates {
        ReadRates {
            controller: None,
            agent: Some(ReadRate::NODE),
            netagent: Some(ReadRate::NODE),
            cnciagent: Some(ReadRate::CNCI),
            other: Some(ReadRate::CNCI),
        }
    }
}

impl ReadRates {
    /// No budget for anyone.
    pub const UNLIMITED: ReadRates = ReadRates {
        controller: None,
        agent: None,
        netagent: None,
        cnciagent: None,
        other: None,
    };

    /// The budget of a session claiming `role`: with several roles, the most generous of theirs
    /// (a dual-role node is read as its busier role needs); none if any of them has none.
    pub fn for_role(&self, role: Role) -> Option<ReadRate> {
        let mut chosen: Option<ReadRate> = None;
        let mut known = Role::empty();
        for (r, rate) in [
            (Role::CONTROLLER, self.controller),
            (Role::AGENT, self.agent),
            (Role::NETAGENT, self.netagent),
            (Role::CNCIAGENT, self.cnciagent),
        ] {
            known |= r;
            if role.intersects(r) {
                chosen = most_generous(chosen, rate)?;
            }
        }
        if !role.difference(known).is_empty() || role.is_empty() {
            chosen = most_generous(chosen, self.other)?;
        }
        chosen
    }

    /// Sets one role's budget from `ROLE=RATE[/BURST[/FRAME]]` or `ROLE=off`.
    pub fn set(&mut self, spec: &str) -> Result<(), RateParseError> {
        let (role, budget) = spec
            .split_once('=')
            .ok_or_else(|| RateParseError::Role(spec.to_string()))?;
        let budget = match budget.trim() {
            "off" | "none" => None,
            b => Some(b.parse()?),
        };
        let slot = match role.trim() {
            "agent" => &mut self.agent,
            "netagent" => &mut self.netagent,
            "cnciagent" => &mut self.cnciagent,
            "controller" => &mut self.controller,
            _ => return Err(RateParseError::Role(spec.to_string())),
        };
        *slot = budget;
        Ok(())
    }
}

/// Of two budgets (the first `None` when none is chosen yet), the larger; `None` out means
/// unlimited (the caller's `?` returns it at once).
fn most_generous(chosen: Option<ReadRate>, next: Option<ReadRate>) -> Option<Option<ReadRate>> {
    let next = next?;
    Some(Some(match chosen {
        None => next,
        Some(c) => ReadRate {
            bytes_per_sec: c.bytes_per_sec.max(next.bytes_per_sec),
            burst: c.burst.max(next.burst),
            frame_cost: c.frame_cost.min(next.frame_cost),
        },
    }))
}

/// The token bucket of a [`ReadRate`].
#[derive(Debug)]
pub(crate) struct Bucket {
    rate: ReadRate,
    tokens: f64,
    last: tokio::time::Instant,
}

impl Bucket {
    pub(crate) fn new(rate: ReadRate, now: tokio::time::Instant) -> Bucket {
        Bucket {
            rate,
            tokens: rate.burst as f64,
            last: now,
        }
    }

    /// Charges `bytes` read in `frames` frames; when the bucket is overdrawn, the instant reading
    /// may resume.
    pub(crate) fn spend(
        &mut self,
        bytes: u64,
        frames: u64,
        now: tokio::time::Instant,
    ) -> Option<tokio::time::Instant> {
        let cost = bytes.saturating_add(frames.saturating_mul(self.rate.frame_cost));
        let per_sec = self.rate.bytes_per_sec.max(1) as f64;
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * per_sec).min(self.rate.burst as f64) - cost as f64;
        (self.tokens < 0.0).then(|| now + Duration::from_secs_f64(-self.tokens / per_sec))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_read_budget_refills_and_pauses_an_overdrawn_peer() {
        let rate = ReadRate {
            bytes_per_sec: 1000,
            burst: 2000,
            frame_cost: 100,
        };
        let t0 = tokio::time::Instant::now();
        let mut b = Bucket::new(rate, t0);
        assert_eq!(b.spend(1800, 2, t0), None, "the burst is there at once");
        let resume = b.spend(400, 1, t0).expect("overdrawn");
        assert_eq!(resume - t0, Duration::from_millis(500));
        // A second later the debt is paid and 500 bytes are back; never more than the burst.
        assert_eq!(b.spend(500, 0, t0 + Duration::from_secs(1)), None);
        assert_eq!(b.spend(2000, 0, t0 + Duration::from_secs(100)), None);
        assert!(b.spend(0, 1, t0 + Duration::from_secs(100)).is_some());
    }

    #[test]
    fn a_peer_gets_its_roles_budget_and_the_most_generous_of_several() {
        let rates = ReadRates::default();
        assert_eq!(rates.for_role(Role::CONTROLLER), None);
        assert_eq!(rates.for_role(Role::AGENT), Some(ReadRate::NODE));
        assert_eq!(rates.for_role(Role::CNCIAGENT), Some(ReadRate::CNCI));
        assert_eq!(rates.for_role(Role::SERVER), Some(ReadRate::CNCI));
        assert_eq!(rates.for_role(Role::empty()), Some(ReadRate::CNCI));
        assert_eq!(
            rates.for_role(Role::CNCIAGENT | Role::AGENT),
            Some(ReadRate::NODE)
        );
        assert_eq!(rates.for_role(Role::CONTROLLER | Role::CNCIAGENT), None);
        let mut r = rates;
        r.set("agent=1M/2M/64").unwrap();
        r.set("netagent=4M").unwrap();
        let dual = r.for_role(Role::DUAL).unwrap();
        assert_eq!(
            dual,
            ReadRate {
                bytes_per_sec: 4 << 20,
                burst: 16 << 20,
                frame_cost: 64
            }
        );
        r.set("netagent=off").unwrap();
        assert_eq!(r.for_role(Role::DUAL), None);
        assert_eq!(ReadRates::UNLIMITED.for_role(Role::AGENT), None);
    }

    #[test]
    fn budgets_are_read_from_the_command_line_form_and_bad_ones_say_why() {
        assert_eq!("16M/64M/512".parse::<ReadRate>().unwrap(), ReadRate::NODE);
        assert_eq!(
            "1k".parse::<ReadRate>().unwrap(),
            ReadRate {
                bytes_per_sec: 1024,
                burst: 4096,
                frame_cost: 512
            }
        );
        assert_eq!("0".parse::<ReadRate>(), Err(RateParseError::Zero));
        assert!(matches!(
            "x".parse::<ReadRate>(),
            Err(RateParseError::Size(_))
        ));
        assert!(matches!(
            "1/2/3/4".parse::<ReadRate>(),
            Err(RateParseError::Form(_))
        ));
        assert!(matches!(
            "99999999999G".parse::<ReadRate>(),
            Err(RateParseError::Size(_))
        ));
        let mut r = ReadRates::default();
        assert!(matches!(r.set("agent"), Err(RateParseError::Role(_))));
        assert!(matches!(r.set("wizard=1M"), Err(RateParseError::Role(_))));
        assert_eq!(r, ReadRates::default(), "nothing changed by a refused spec");
        assert_eq!(
            ReadRate::NODE.to_string().parse::<ReadRate>().unwrap(),
            ReadRate::NODE
        );
    }
}
