//! What stops unauthenticated clients from spending the controller's CPU on password hashing:
//!
//! - [`HashPool`]: password hashing and verification (600,000 PBKDF2 rounds each by default) run
//!   on a few threads of their own with a short bounded queue, never on tokio's blocking pool,
//!   which the store and the engine share: a flood of logins cannot starve them. When the queue
//!   is full the request is answered 503 with `Retry-After` at once.
//! - [`LoginLimiter`]: token buckets per source address and per user name (known or not, so the
//!   limiter does not tell which users exist). Every attempt takes a token from both buckets and
//!   a login with the right password gives them back: an honest user logging in again and again
//!   is never limited, a guesser is. Over either limit: 429 with `Retry-After`, before any
//!   hashing. A source also has at most [`LoginLimits::in_flight_per_source`] logins being
//!   checked at once, so that a few flooding addresses cannot fill the pool's queue. The
//!   buckets' memory is bounded: at most [`LoginLimits::max_keys`] keys of each
//!   kind, the oldest forgotten first; user names are kept as keyed 64-bit hashes, not as text.
//!
//! Defaults: [`LoginLimits::default`]; the controller's `--login-attempts-per-user` and
//! `--login-attempts-per-source` change the rates. See `docs/api.md` (Limits).

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hash, RandomState};
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::ApiError;

/// How logins are limited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoginLimits {
    /// Attempts per [`LoginLimits::window`] for one user name (0: no limit).
    pub per_user: u32,
    /// Attempts per [`LoginLimits::window`] from one source address (an IPv6 source counts by
    /// its /64; 0: no limit).
    pub per_source: u32,
    /// The window the rates are over; a bucket refills evenly over it.
    pub window: Duration,
    /// Threads hashing passwords.
    pub workers: usize,
    /// Hashing jobs that may wait for a thread; past that, 503.
    pub queue: usize,
    /// The most user names, and the most source addresses, tracked at once.
    pub max_keys: usize,
    /// Logins from one source address being checked at once (waiting for the hashing pool or
    /// on it; 0: no limit); more: 429 with `Retry-After: 1`. A few addresses flooding logins
    /// then hold only a few places in the pool's queue, and leave room for everyone else.
    pub in_flight_per_source: usize,
}

impl LoginLimits {
    /// Failed attempts per minute for one user name: a guesser gets 14,400 guesses a day at
    /// most, while a user who mistypes a password a few times is never stopped.
    pub const DEFAULT_PER_USER: u32 = 10;
    /// Failed attempts per minute from one address: enough for a few users behind one NAT
    /// mistyping passwords, and a bound on what one address costs (30 hashes a minute, about
    /// 10 s of one core at the default 600,000 rounds).
    pub const DEFAULT_PER_SOURCE: u32 = 30;
}

impl Default for LoginLimits {
    /// [`LoginLimits::DEFAULT_PER_USER`] and [`LoginLimits::DEFAULT_PER_SOURCE`] a minute; half
    /// the cores hashing (at least one), so that the other half is always left to the store,
    /// the engine and the rest of the API; 16 waiting jobs per thread (at 0.1 to 0.3 s a hash,
    /// a login waits at most a few seconds for a thread, or is refused at once); one login in
    /// flight per source, so that the queue, served in order, takes each flooding address in
    /// turn and 16 of them are needed to fill it; 65,536 keys of each kind
    /// (a few MiB).
    fn default() -> LoginLimits {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let workers = (cores / 2).max(1);
        LoginLimits {
            per_user: LoginLimits::DEFAULT_PER_USER,
            per_source: LoginLimits::DEFAULT_PER_SOURCE,
            window: Duration::from_secs(60),
            workers,
            queue: 16 * workers,
            max_keys: 65_536,
            in_flight_per_source: 1,
        }
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// A few threads that hash passwords, fed through a bounded queue. The threads end when the
/// pool is dropped.
pub struct HashPool {
    jobs: SyncSender<Job>,
}

impl HashPool {
    /// `workers` threads (at least one) and room for `queue` waiting jobs.
    pub fn new(workers: usize, queue: usize) -> HashPool {
        let (jobs, inbox) = std::sync::mpsc::sync_channel::<Job>(queue);
        let inbox = Arc::new(Mutex::new(inbox));
        for i in 0..workers.max(1) {
            let inbox = inbox.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("api-hash-{i}"))
                .spawn(move || work(&inbox));
            if let Err(e) = spawned {
                // Fewer threads (or none: then every job waits until refused) is all we can do.
                tracing::error!(error = %e, "cannot start a password hashing thread");
            }
        }
        HashPool { jobs }
    }

    /// Runs `f` on the pool; 503 at once if the queue is full. A job whose caller has gone (the
    /// client closed the connection) by the time a thread takes it is skipped.
    pub async fn run<T, F>(&self, f: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        self.submit(f)?
            .await
            .map_err(|_| ApiError::Internal("a password hashing job was lost".into()))
    }

    /// Queues `f` (503 at once if the queue is full); its result comes on the receiver.
    pub fn submit<T, F>(&self, f: F) -> Result<tokio::sync::oneshot::Receiver<T>, ApiError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            if !tx.is_closed() {
                let _ = tx.send(f());
            }
        });
        match self.jobs.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                return Err(ApiError::Overloaded {
                    message: "too many logins are being checked: try again shortly".into(),
                    retry_after: 1,
                });
            }
            Err(TrySendError::Disconnected(_)) => {
                return Err(ApiError::Internal("no password hashing thread".into()));
            }
        }
        Ok(rx)
    }
}

fn work(inbox: &Mutex<Receiver<Job>>) {
    loop {
        let job = inbox.lock().unwrap_or_else(PoisonError::into_inner).recv();
        let Ok(job) = job else { return };
        // A panic in a job (none is expected) must not take the thread with it.
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
            tracing::error!("a password hashing job panicked");
        }
    }
}

/// The address a source is counted by: an IPv4 address (also when IPv4-mapped), or an IPv6
/// address's /64 (one host easily has a whole /64).
pub fn source_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(
                u128::from(v6) & 0xffff_ffff_ffff_ffff_0000_0000_0000_0000,
            )),
        },
    }
}

/// One token bucket: `tokens` as of `at`.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Token buckets of one kind of key, at most `max` of them, the oldest forgotten first.
struct Buckets<K> {
    capacity: u32,
    window: Duration,
    max: usize,
    map: HashMap<K, Bucket>,
    order: VecDeque<K>,
}

impl<K: Hash + Eq + Copy> Buckets<K> {
    fn new(capacity: u32, window: Duration, max: usize) -> Buckets<K> {
        Buckets {
            capacity,
            window,
            max: max.max(1),
            map: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// Tokens refilled per second.
    fn rate(&self) -> f64 {
        f64::from(self.capacity) / self.window.as_secs_f64().max(1e-3)
    }

    fn tokens(&self, key: &K, now: Instant) -> f64 {
        let full = f64::from(self.capacity);
        self.map.get(key).map_or(full, |b| {
            let refilled = now.saturating_duration_since(b.at).as_secs_f64() * self.rate();
            (b.tokens + refilled).min(full)
        })
    }

    /// How long until `key` has a token; zero if it has one now (or there is no limit).
    fn wait(&self, key: &K, now: Instant) -> Duration {
        if self.capacity == 0 {
            return Duration::ZERO;
        }
        let missing = 1.0 - self.tokens(key, now);
        if missing <= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(missing / self.rate())
        }
    }

    /// Adds `delta` tokens to `key`'s bucket (negative: takes), within 0..=capacity.
    fn add(&mut self, key: K, delta: f64, now: Instant) {
        if self.capacity == 0 {
            return;
        }
        let tokens = (self.tokens(&key, now) + delta).clamp(0.0, f64::from(self.capacity));
        if !self.map.contains_key(&key) {
            while self.map.len() >= self.max {
                match self.order.pop_front() {
                    Some(old) => {
                        self.map.remove(&old);
                    }
                    None => break,
                }
            }
            self.order.push_back(key);
        }
        self.map.insert(key, Bucket { tokens, at: now });
    }
}

struct Keys {
    users: Buckets<u64>,
    sources: Buckets<IpAddr>,
    /// Admissions alive per source (at most one entry per open connection).
    in_flight: HashMap<IpAddr, usize>,
    max_in_flight: usize,
}

/// Per-user-name and per-source login limits (see the module's documentation).
pub struct LoginLimiter {
    keys: Mutex<Keys>,
    hasher: RandomState,
    /// How far the limiter's clock is ahead of the real one, in milliseconds (tests move it).
    skew_ms: AtomicU64,
}

/// An attempt let through: its tokens are spent unless [`Admission::refund`] gives them back;
/// it counts as in flight from its source until dropped.
#[must_use = "an admission is spent when dropped; refund it when the password was right"]
pub struct Admission<'a> {
    limiter: &'a LoginLimiter,
    user: u64,
    source: Option<IpAddr>,
}

impl Drop for Admission<'_> {
    fn drop(&mut self) {
        let Some(source) = self.source else { return };
        let mut keys = self.limiter.lock();
        if let Some(n) = keys.in_flight.get_mut(&source) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                keys.in_flight.remove(&source);
            }
        }
    }
}

impl Admission<'_> {
    /// Gives the attempt's tokens back (the password was right, or nothing was hashed).
    pub fn refund(self) {
        let now = self.limiter.now();
        let mut keys = self.limiter.lock();
        keys.users.add(self.user, 1.0, now);
        if let Some(source) = self.source {
            keys.sources.add(source, 1.0, now);
        }
    }
}

impl LoginLimiter {
    /// A limiter with `limits`' rates and key bound.
    pub fn new(limits: &LoginLimits) -> LoginLimiter {
        LoginLimiter {
            keys: Mutex::new(Keys {
                users: Buckets::new(limits.per_user, limits.window, limits.max_keys),
                sources: Buckets::new(limits.per_source, limits.window, limits.max_keys),
                in_flight: HashMap::new(),
                max_in_flight: limits.in_flight_per_source,
            }),
            hasher: RandomState::new(),
            skew_ms: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Keys> {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn now(&self) -> Instant {
        Instant::now() + Duration::from_millis(self.skew_ms.load(Ordering::SeqCst))
    }

    /// Moves the limiter's clock forward by `by` (for tests: a window passes at once).
    #[cfg(any(test, feature = "testing"))]
    pub fn advance(&self, by: Duration) {
        let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.skew_ms.fetch_add(ms, Ordering::SeqCst);
    }

    /// Lets an attempt for the user named `user` (an id or a name, as the request gave it)
    /// from `source` through, taking a token from both buckets; or refuses it with 429 and how
    /// long to wait, taking nothing.
    pub fn admit(&self, source: Option<IpAddr>, user: &str) -> Result<Admission<'_>, ApiError> {
        let user = self.hasher.hash_one(user);
        let source = source.map(source_key);
        let now = self.now();
        let mut keys = self.lock();
        let mut wait = keys.users.wait(&user, now);
        if let Some(source) = &source {
            wait = wait.max(keys.sources.wait(source, now));
        }
        if !wait.is_zero() {
            return Err(ApiError::TooManyRequests {
                message: "too many login attempts: try again later".into(),
                retry_after: wait.as_secs_f64().ceil().max(1.0) as u64,
            });
        }
        if let Some(source) = source {
            let max = keys.max_in_flight;
            let in_flight = keys.in_flight.entry(source).or_insert(0);
            if max > 0 && *in_flight >= max {
                return Err(ApiError::TooManyRequests {
                    message: "too many logins at once from this address: try again shortly".into(),
                    retry_after: 1,
                });
            }
            *in_flight += 1;
            keys.sources.add(source, -1.0, now);
        }
        keys.users.add(user, -1.0, now);
        drop(keys);
        Ok(Admission {
            limiter: self,
            user,
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(per_user: u32, per_source: u32) -> LoginLimits {
        LoginLimits {
            per_user,
            per_source,
            window: Duration::from_secs(60),
            workers: 1,
            queue: 1,
            max_keys: 4,
            in_flight_per_source: 0,
        }
    }

    fn retry_after(result: Result<Admission<'_>, ApiError>) -> u64 {
        match result {
            Err(ApiError::TooManyRequests { retry_after, .. }) => retry_after,
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("admitted"),
        }
    }

    #[test]
    fn a_user_name_is_limited_whoever_asks_and_refunds_keep_honest_users_in() {
        let limiter = LoginLimiter::new(&limits(3, 0));
        for i in 0..3u8 {
            let _spent = limiter
                .admit(Some(IpAddr::from([10, 0, 0, i])), "alice")
                .unwrap();
        }
        // 60 s / 3 tokens: one back in 20 s.
        assert_eq!(retry_after(limiter.admit(None, "alice")), 20);
        limiter.admit(None, "bob").unwrap().refund();
        for _ in 0..10 {
            limiter.admit(None, "bob").unwrap().refund();
        }
        limiter.advance(Duration::from_secs(20));
        let _spent = limiter.admit(None, "alice").unwrap();
        assert!(limiter.admit(None, "alice").is_err());
    }

    #[test]
    fn a_source_is_limited_over_user_names_and_ipv6_by_its_64() {
        let limiter = LoginLimiter::new(&limits(0, 2));
        let a: IpAddr = "2001:db8::1".parse().unwrap();
        let b: IpAddr = "2001:db8::2:3".parse().unwrap();
        let _x = limiter.admit(Some(a), "x").unwrap();
        let _y = limiter.admit(Some(b), "y").unwrap();
        assert_eq!(retry_after(limiter.admit(Some(a), "z")), 30);
        let _other = limiter
            .admit(Some("2001:db8:0:1::1".parse().unwrap()), "z")
            .unwrap();
        let mapped: IpAddr = "::ffff:10.1.2.3".parse().unwrap();
        assert_eq!(source_key(mapped), IpAddr::from([10, 1, 2, 3]));
    }

    #[test]
    fn memory_is_bounded_oldest_forgotten_first() {
        let limiter = LoginLimiter::new(&limits(1, 0));
        for i in 0..100 {
            let _spent = limiter.admit(None, &format!("user-{i}")).unwrap();
        }
        assert_eq!(limiter.lock().users.map.len(), 4);
        assert_eq!(limiter.lock().users.order.len(), 4);
        // The newest are still limited, the oldest forgotten.
        assert!(limiter.admit(None, "user-99").is_err());
        let _again = limiter.admit(None, "user-0").unwrap();
    }

    #[test]
    fn a_source_has_few_logins_in_flight() {
        let limiter = LoginLimiter::new(&LoginLimits {
            in_flight_per_source: 2,
            ..limits(0, 0)
        });
        let a = Some(IpAddr::from([10, 0, 0, 1]));
        let first = limiter.admit(a, "x").unwrap();
        let second = limiter.admit(a, "y").unwrap();
        assert_eq!(retry_after(limiter.admit(a, "z")), 1);
        let _other = limiter
            .admit(Some(IpAddr::from([10, 0, 0, 2])), "z")
            .unwrap();
        first.refund();
        let _third = limiter.admit(a, "z").unwrap();
        drop(second);
        let _fourth = limiter.admit(a, "z").unwrap();
        assert!(limiter.admit(a, "z").is_err());
    }

    #[tokio::test]
    async fn a_full_pool_refuses_at_once_and_runs_again_when_free() {
        let pool = HashPool::new(1, 1);
        let (release, gate) = std::sync::mpsc::channel::<()>();
        let (started_tx, started) = tokio::sync::oneshot::channel();
        let first = pool
            .submit(move || {
                let _ = started_tx.send(());
                let _ = gate.recv();
                1
            })
            .unwrap();
        started.await.unwrap();
        // The thread is busy: one job may wait, the next is refused.
        let second = pool.submit(|| 2).unwrap();
        assert!(matches!(
            pool.submit(|| 3),
            Err(ApiError::Overloaded { retry_after: 1, .. })
        ));
        release.send(()).unwrap();
        assert_eq!(first.await.unwrap(), 1);
        assert_eq!(second.await.unwrap(), 2);
        assert_eq!(pool.run(|| 4).await.unwrap(), 4);
    }
}
