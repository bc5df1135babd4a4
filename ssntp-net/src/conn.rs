//! One established session on a byte stream: a writer task that coalesces queued frames into few
//! writes, and the session loop that reads, applies the receiving rules, keeps the session alive
//! and hands messages to a dispatcher. Shared by the client and the server.

use bytes::{Bytes, BytesMut};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use ssntp::codec::{Decoded, Decoder};
use ssntp::frame::{EncodeError, Frame};
use ssntp::session::{Message, Now, Received, Session, Tick};

use crate::rate::{Bucket, ReadRate};

/// Limits of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnConfig {
    /// Frames queued for a peer before senders get [`SendError::Busy`] (default 65,536).
    pub queue_frames: usize,
    /// Bytes queued for a peer before senders get [`SendError::Busy`] (default 8 MiB); a frame
    /// is always taken by an empty queue, whatever its size.
    pub queue_bytes: usize,
    /// The write buffer a session keeps between writes (it has two, the queue's and the
    /// writer's, which take turns); one that a burst grew past this is let go after its write
    /// (default 64 KiB). Frames queued while a write is under way go out together in the next,
    /// whatever their size (within `queue_bytes`).
    pub write_buffer: usize,
    /// The read buffer's size while the peer sends much (default 16 KiB, a TLS record): room is
    /// made for this many bytes, counting the start of a frame already read, with at least
    /// half of them free. A quiet session's buffer is 4 KiB.
    pub read_buffer: usize,
}

impl Default for ConnConfig {
    fn default() -> ConnConfig {
        ConnConfig {
            queue_frames: 65_536,
            queue_bytes: 8 << 20,
            write_buffer: 64 << 10,
            read_buffer: 16 << 10,
        }
    }
}

/// Why a frame was not queued for a peer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The peer's outbound queue is full: it is not reading fast enough.
    #[error("the peer's queue is full")]
    Busy,
    /// The session is closed (or was never open).
    #[error("not connected")]
    NotConnected,
    /// The frame cannot be encoded within the size limit.
    #[error("{0}")]
    Encode(#[from] EncodeError),
}

/// What senders have queued for one writer, which it takes whole: their frames encoded one
/// after another into one buffer, except large ones encoded already for many recipients (kept
/// as they are, shared, between the parts of the buffer before and after them).
#[derive(Debug, Default)]
struct Queue {
    /// The frames queued before the last shared one, in order.
    parts: Vec<Bytes>,
    /// The frames queued after them, encoded one after another.
    buf: BytesMut,
    /// The bytes `parts` and `buf` hold.
    len: usize,
    /// How many frames they hold.
    frames: usize,
    /// The bytes the writer took and is writing: they still count against the bound.
    writing: usize,
    /// The writer found nothing to take and waits: the next frame queued wakes it.
    idle: bool,
    /// The writer is gone, or closing: nothing more is taken.
    closed: bool,
}

/// The queue between a session's senders and its writer, bounded in frames and in bytes.
#[derive(Debug)]
struct Pipe {
    queue: std::sync::Mutex<Queue>,
    max_frames: usize,
    max_bytes: usize,
    /// Wakes the writer (once per wait: see [`Queue::idle`]).
    ready: Notify,
    /// Wakes senders waiting for room.
    freed: Notify,
}

impl Pipe {
    fn new(max_frames: usize, max_bytes: usize) -> Pipe {
        Pipe {
            queue: std::sync::Mutex::default(),
            max_frames: max_frames.max(1),
            max_bytes,
            ready: Notify::new(),
            freed: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Encodes `item` (`len` bytes on the wire) into the queue if it has room for it, in frames
    /// and in bytes (an empty queue, with nothing being written, takes any frame); gives it
    /// back with the reason when it has not. Wakes the writer if it waits.
    fn try_queue(&self, item: Queued, len: usize) -> Result<(), (SendError, Queued)> {
        let mut q = self.lock();
        if q.closed {
            return Err((SendError::NotConnected, item));
        }
        let empty = q.frames == 0 && q.writing == 0;
        let fits = q.frames < self.max_frames && q.len + q.writing + len <= self.max_bytes;
        if !empty && !fits {
            return Err((SendError::Busy, item));
        }
        item.queue_into(&mut q);
        q.len += len;
        q.frames += 1;
        let wake = std::mem::take(&mut q.idle);
        drop(q);
        if wake {
            self.ready.notify_one();
        }
        Ok(())
    }

    fn is_closed(&self) -> bool {
        self.lock().closed
    }
}

/// Closes the pipe when the writer ends, however it ends: senders get
/// [`SendError::NotConnected`], and those waiting for room are woken to see it.
struct Closer(Arc<Pipe>);

impl Drop for Closer {
    fn drop(&mut self) {
        let mut q = self.0.lock();
        *q = Queue {
            closed: true,
            ..Queue::default()
        };
        drop(q);
        self.0.freed.notify_waiters();
    }
}

/// A frame on its way into a writer's queue.
#[derive(Debug)]
enum Queued {
    /// Encoded already: once for many recipients (a forward, a broadcast), or a traced frame.
    Encoded(Bytes),
    /// An untraced frame, encoded by the writer straight into its write buffer: the sender
    /// allocates no buffer of its own for it.
    Frame(Frame),
}

impl Queued {
    /// Queues `frame`: as it is when untraced (its length known without encoding it), encoded
    /// now when traced.
    fn frame(frame: Frame, max_frame: u32) -> Result<(Queued, usize), EncodeError> {
        Ok(match frame.untraced_len(max_frame)? {
            Some(len) => (Queued::Frame(frame), len),
            None => {
                let bytes = frame.to_bytes(max_frame)?;
                let len = bytes.len();
                (Queued::Encoded(bytes), len)
            }
        })
    }

    /// Appends the item to the queue: into its buffer, or as a part of its own when it is a
    /// large buffer encoded for many recipients (copied into each of their queues, it would
    /// take their memory many times over).
    fn queue_into(self, q: &mut Queue) {
        match self {
            Queued::Encoded(bytes) if bytes.len() >= SHARED => {
                if !q.buf.is_empty() {
                    // The buffer itself, not a split of it: what is left of a split would keep
                    // the whole allocation, however large a burst made it.
                    let before = std::mem::take(&mut q.buf).freeze();
                    q.parts.push(before);
                }
                q.parts.push(bytes);
            }
            Queued::Encoded(bytes) => q.buf.extend_from_slice(&bytes),
            // Cannot fail: the length was checked against the session's largest body when the
            // frame was queued, and an untraced frame has no trace to encode.
            Queued::Frame(frame) => {
                let _ = frame.encode(&mut q.buf, u32::MAX);
            }
        }
    }
}

/// The size from which a frame encoded for many recipients is queued as it is, shared, rather
/// than copied into each recipient's queue.
const SHARED: usize = 4096;

/// The sending side of one session: a queue to its writer, bounded in frames and in bytes.
/// Cheap to clone.
#[derive(Debug, Clone)]
pub struct Outbox {
    pipe: Arc<Pipe>,
    max_frame: u32,
    close: CancellationToken,
}

impl Outbox {
    /// An outbox whose writer is gone (unit tests of what holds outboxes).
    #[cfg(test)]
    pub(crate) fn detached() -> Outbox {
        let pipe = Pipe::new(1, 1024);
        pipe.lock().closed = true;
        Outbox {
            pipe: Arc::new(pipe),
            max_frame: 1024,
            close: CancellationToken::new(),
        }
    }

    /// Queues `frame`; never waits. (The frame is cloned, which shares its payload: the
    /// writer encodes it.)
    pub fn send(&self, frame: &Frame) -> Result<(), SendError> {
        self.send_frame(frame.clone())
    }

    /// Queues `frame`, taking it; never waits.
    pub fn send_frame(&self, frame: Frame) -> Result<(), SendError> {
        let (item, len) = Queued::frame(frame, self.max_frame)?;
        self.try_queue(item, len).map_err(|(e, _)| e)
    }

    /// Queues an already encoded frame (one encoding shared by many recipients); never waits.
    pub fn send_encoded(&self, bytes: Bytes) -> Result<(), SendError> {
        let len = bytes.len();
        self.try_queue(Queued::Encoded(bytes), len)
            .map_err(|(e, _)| e)
    }

    fn try_queue(&self, item: Queued, len: usize) -> Result<(), (SendError, Queued)> {
        self.pipe.try_queue(item, len)
    }

    /// Queues `frame`, waiting while the queue is full (backpressure). Senders waiting are all
    /// woken when the writer frees room and take it in no set order; a frame sent without
    /// waiting meanwhile may take it first.
    pub async fn send_wait(&self, frame: &Frame) -> Result<(), SendError> {
        let (mut item, len) = Queued::frame(frame.clone(), self.max_frame)?;
        // Room now (the common case): queued as `send` does, without the waiting machinery.
        let mut waited = false;
        loop {
            // Asked for before the attempt: room freed between the two is not missed.
            let freed = self.pipe.freed.notified();
            tokio::pin!(freed);
            if waited {
                freed.as_mut().enable();
            }
            match self.try_queue(item, len) {
                Ok(()) => {
                    if !waited {
                        // As tokio's own channels do: a sender that never has to wait still
                        // yields now and then (its task's cooperative budget), so that a loop
                        // of sends cannot keep the other tasks of its thread (its own writer
                        // among them) from running.
                        tokio::task::consume_budget().await;
                    }
                    return Ok(());
                }
                Err((SendError::Busy, back)) => item = back,
                Err((e, _)) => return Err(e),
            }
            if !waited {
                // Full: try again with the wake-up asked for first.
                waited = true;
                continue;
            }
            tokio::select! {
                _ = freed => {}
                _ = self.close.cancelled() => return Err(SendError::NotConnected),
            }
        }
    }

    /// The largest body this session sends.
    pub fn max_frame(&self) -> u32 {
        self.max_frame
    }

    /// Asks the session to close: queued frames are written first, then TLS is shut down.
    pub fn close(&self) {
        self.close.cancel();
    }

    /// Whether the session has been asked to close (or has closed).
    pub fn is_closed(&self) -> bool {
        self.close.is_cancelled() || self.pipe.is_closed()
    }
}

/// Messages gathered for the application during one read, handed over as one vector. A vector
/// handed over is sized from the one before it, so that a busy session does not grow each batch
/// from nothing (moving every message at each doubling); an idle session holds no room at all,
/// as the room is taken only when the next message comes.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    messages: Vec<Message>,
    /// The size of the last batch handed over.
    last: usize,
}

impl Batch {
    /// The most messages a new batch makes room for in advance.
    const MAX_ROOM: usize = 4096;

    pub(crate) fn push(&mut self, message: Message) {
        if self.messages.capacity() == 0 {
            // Half again as many as last time: reads vary, and a batch that outgrows its room
            // moves every message it holds.
            let room = self.last + self.last / 2;
            self.messages.reserve(room.clamp(1, Self::MAX_ROOM));
        }
        self.messages.push(message);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// The messages gathered, leaving the batch empty (and holding no memory).
    pub(crate) fn take(&mut self) -> Vec<Message> {
        self.last = self.messages.len();
        std::mem::take(&mut self.messages)
    }
}

/// Where a session's messages go. The loop awaits it: a slow dispatcher slows this peer only.
pub(crate) trait Dispatch: Send + 'static {
    /// Takes one message (it may hold it until [`Dispatch::flush`]); `false` ends the session.
    fn dispatch(&mut self, session: &Session, message: Message) -> bool;

    /// Delivers what [`Dispatch::dispatch`] held, once per read; `false` ends the session.
    fn flush(&mut self, session: &Session) -> impl Future<Output = bool> + Send;
}

/// How a session ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Closed on our side (close requested or shutdown).
    Local,
    /// The peer closed the stream, or reading failed.
    PeerGone(String),
    /// A framing violation or the idle timeout.
    Violation(String),
    /// The server sent CONNECTION_ABORTED (`aborted`) or CONNECTION_FAILURE.
    ServerClosed {
        /// Do not reconnect.
        aborted: bool,
        /// The server's reason.
        reason: String,
    },
}

/// An instant one task records and others read, as milliseconds of monotonic time since a
/// fixed start (never going back): the writer's last write, the reader's last frame received.
#[derive(Debug)]
pub(crate) struct Stamp {
    epoch: Instant,
    last_ms: AtomicU64,
}

impl Stamp {
    pub(crate) fn new(epoch: Instant) -> Stamp {
        Stamp {
            epoch,
            last_ms: AtomicU64::new(0),
        }
    }

    fn record(&self, now: Instant) {
        let ms = now.saturating_duration_since(self.epoch).as_millis() as u64;
        self.last_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// The instant recorded last (the start, before anything was recorded).
    pub(crate) fn last(&self) -> Instant {
        self.epoch + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }
}

/// The current time, monotonic (tokio's clock, virtual in tests) and wall clock.
pub(crate) fn now() -> Now {
    let unix_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    Now {
        instant: tokio::time::Instant::now().into_std(),
        unix_ns,
    }
}

/// Writes queued frames, all that is queued at a time (senders encode their frames into the
/// queue's buffer, which the writer takes whole, so frames queued while a write is under way go
/// out together in the next); on close, writes what is left and shuts the stream down.
async fn write_loop<W: AsyncWrite + Unpin>(
    mut w: W,
    pipe: Arc<Pipe>,
    close: CancellationToken,
    clock: Arc<Stamp>,
    keep: usize,
) {
    let closer = Closer(pipe.clone());
    // Swapped with the queue's at each take: the two take turns, so a busy session allocates
    // none. Grown on demand: an idle session holds little.
    let mut buf = BytesMut::new();
    let mut parts = Vec::new();
    loop {
        let taken = {
            let mut q = pipe.lock();
            if q.frames == 0 {
                q.idle = true;
                None
            } else {
                std::mem::swap(&mut q.buf, &mut buf);
                std::mem::swap(&mut q.parts, &mut parts);
                q.writing = std::mem::take(&mut q.len);
                let frames = std::mem::take(&mut q.frames);
                Some(frames >= pipe.max_frames)
            }
        };
        match taken {
            // The frames taken no longer count: senders waiting for a place go on at once.
            Some(true) => pipe.freed.notify_waiters(),
            Some(false) => {}
            None => {
                tokio::select! {
                    biased;
                    _ = pipe.ready.notified() => continue,
                    _ = close.cancelled() => break,
                }
            }
        }
        // A peer that stops reading blocks this write; a close must not wait for it.
        let written = tokio::select! {
            biased;
            r = async {
                for part in parts.drain(..) {
                    w.write_all(&part).await?;
                }
                w.write_all(&buf).await?;
                w.flush().await
            } => r.is_ok(),
            _ = close.cancelled() => {
                // Senders hear of the close at once, not after the shutdown.
                drop(closer);
                let _ = tokio::time::timeout(CLOSE_GRACE, w.shutdown()).await;
                return;
            }
        };
        if !written {
            close.cancel();
            return;
        }
        pipe.lock().writing = 0;
        pipe.freed.notify_waiters();
        buf.clear();
        if buf.capacity() > keep {
            // A burst's buffer is not kept for good.
            buf = BytesMut::new();
        }
        if parts.capacity() > KEPT_PARTS {
            parts = Vec::new();
        }
        clock.record(tokio::time::Instant::now().into_std());
    }
    // Closing: what was queued before the close still goes out, then close_notify and FIN,
    // within a grace period.
    let rest = {
        let mut q = pipe.lock();
        let closed = Queue {
            closed: true,
            ..Queue::default()
        };
        std::mem::replace(&mut *q, closed)
    };
    let _ = tokio::time::timeout(CLOSE_GRACE, async {
        for part in &rest.parts {
            w.write_all(part).await?;
        }
        w.write_all(&rest.buf).await?;
        w.flush().await?;
        w.shutdown().await
    })
    .await;
}

/// The most shared parts (see [`Queue::parts`]) a writer's list keeps room for between writes.
const KEPT_PARTS: usize = 64;

/// How long a closing session may take to write what it still has queued.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// A session whose writer runs and whose reader has not started yet: the owner can register
/// the outbox (and report the session) before the first message is dispatched.
pub(crate) struct Opened<R> {
    reader: R,
    outbox: Outbox,
    close: CancellationToken,
    clock: Arc<Stamp>,
    received: Arc<Stamp>,
}

/// Splits `stream`, starts its writer, and returns the outbox with the reader still idle.
pub(crate) fn open<S>(
    stream: S,
    max_frame: u32,
    config: ConnConfig,
    tracker: &tokio_util::task::TaskTracker,
) -> Opened<tokio::io::ReadHalf<S>>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (r, w) = tokio::io::split(stream);
    let pipe = Arc::new(Pipe::new(config.queue_frames, config.queue_bytes));
    let close = CancellationToken::new();
    let opened_at = now().instant;
    let clock = Arc::new(Stamp::new(opened_at));
    // The handshake's frame was received just now.
    let received = Arc::new(Stamp::new(opened_at));
    let outbox = Outbox {
        pipe: pipe.clone(),
        max_frame,
        close: close.clone(),
    };
    tracker.spawn(write_loop(
        w,
        pipe,
        close.clone(),
        clock.clone(),
        config.write_buffer,
    ));
    Opened {
        reader: r,
        outbox,
        close,
        clock,
        received,
    }
}

impl<R: AsyncRead + Unpin + Send + 'static> Opened<R> {
    /// The session's outbox.
    pub fn outbox(&self) -> &Outbox {
        &self.outbox
    }

    /// When the session last received a frame, any frame (recorded by the reader once per read,
    /// before the frames read are handed on).
    pub fn received(&self) -> Arc<Stamp> {
        self.received.clone()
    }

    /// Starts the session loop; `leftover` holds bytes read past the handshake frame; `rate`,
    /// when given, is the peer's read budget.
    pub fn run<D: Dispatch>(
        self,
        session: Session,
        leftover: BytesMut,
        read_buffer: usize,
        rate: Option<ReadRate>,
        dispatch: D,
        tracker: &tokio_util::task::TaskTracker,
    ) -> tokio::task::JoinHandle<Ended> {
        let reader = ReadLoop {
            session,
            outbox: self.outbox,
            close: self.close,
            clock: self.clock,
            received: self.received,
            dispatch,
            bucket: rate.map(|r| Bucket::new(r, tokio::time::Instant::now())),
            frames: 0,
        };
        tracker.spawn(reader.run(self.reader, leftover, read_buffer))
    }
}

struct ReadLoop<D> {
    session: Session,
    outbox: Outbox,
    close: CancellationToken,
    clock: Arc<Stamp>,
    /// The session's last receive, published for the application (the server's registry).
    received: Arc<Stamp>,
    dispatch: D,
    /// The peer's read budget, if it has one.
    bucket: Option<Bucket>,
    /// Frames handled since the budget was last charged.
    frames: u64,
}

impl<D: Dispatch> ReadLoop<D> {
    async fn run<R: AsyncRead + Unpin>(mut self, mut r: R, mut buf: BytesMut, cap: usize) -> Ended {
        let decoder = Decoder::new(self.session.config().max_frame);
        // Small until traffic comes: a quiet session keeps 4 KiB, one whose reads fill the buffer
        // grows to `cap`.
        let mut room = QUIET;
        // Whether the last read was small (a quiet session): its frames are copied out.
        let mut quiet = true;
        // While the peer is over its read budget: when reading resumes.
        let mut paused: Option<tokio::time::Instant> = None;
        let ended = loop {
            // Frames already buffered first (the handshake may have read past its frame).
            if let Some(ended) = self.drain(&decoder, &mut buf, quiet).await {
                break ended;
            }
            make_room(&mut buf, room);
            let deadline = tokio::time::Instant::from_std(self.session.deadline());
            let resume = paused.unwrap_or(deadline);
            tokio::select! {
                biased;
                _ = self.close.cancelled() => break Ended::Local,
                _ = tokio::time::sleep_until(resume), if paused.is_some() => paused = None,
                read = r.read_buf(&mut buf), if paused.is_none() => match read {
                    Ok(0) => break Ended::PeerGone("the peer closed the connection".into()),
                    Ok(n) => {
                        quiet = n < QUIET / 2;
                        room = if quiet { QUIET } else { cap.max(QUIET) };
                        if let Some(bucket) = &mut self.bucket {
                            let frames = std::mem::take(&mut self.frames);
                            paused = bucket.spend(n as u64, frames, tokio::time::Instant::now());
                        }
                    }
                    Err(e) => break Ended::PeerGone(e.to_string()),
                },
                _ = tokio::time::sleep_until(deadline) => {
                    self.session.on_write(self.clock.last());
                    match self.session.poll(now().instant) {
                        Some(Tick::Heartbeat(f)) => { let _ = self.outbox.send(&f); }
                        Some(Tick::Idle(f)) => {
                            if let Some(f) = f {
                                let _ = self.outbox.send(&f);
                            }
                            break Ended::Violation("idle timeout".into());
                        }
                        None => {}
                    }
                }
            }
        };
        // Whatever the reason, the writer flushes what is queued and closes the stream.
        self.close.cancel();
        ended
    }

    /// Handles every whole frame in `buf`, then flushes the dispatcher; `Some` when the session
    /// must end. With `copy` (a quiet session), each small frame's bytes (up to [`COPIED`]) are
    /// copied out of the buffer:
    /// the application may hold a frame for a while, and a frame sharing the buffer keeps the
    /// buffer from being taken back in place, so that each session's next room would be a new
    /// buffer (all the sessions that started together doing that together, leaving the heap full
    /// of holes). A busy session's frames share its buffer.
    async fn drain(&mut self, decoder: &Decoder, buf: &mut BytesMut, copy: bool) -> Option<Ended> {
        let ended = self.drain_frames(decoder, buf, copy);
        // Every frame shows the peer alive, a HEARTBEAT included (which goes no further).
        self.received.record(self.session.last_received());
        // A slow application holds this peer back (backpressure), but never past a close, and
        // the session still heartbeats meanwhile (PROTOCOL.md §5 rule 5): the peer must not take
        // a busy process for a dead one. Its silence is not timed here: its frames wait unread.
        let mut beaten: Option<Instant> = None;
        let delivered = {
            let flush = self.dispatch.flush(&self.session);
            tokio::pin!(flush);
            // Most flushes are done at once: no timer for those. A session that is ending (an
            // ERROR queued, the peer's close read) sends no heartbeat after it.
            let first = std::future::poll_fn(|cx| Poll::Ready(flush.as_mut().poll(cx))).await;
            match first {
                Poll::Ready(d) => d,
                Poll::Pending if ended.is_some() => tokio::select! {
                    d = &mut flush => d,
                    _ = self.close.cancelled() => false,
                },
                Poll::Pending => loop {
                    // The writer's last write, or the last heartbeat tried here (queued or not,
                    // it counts, as `Session::poll`'s does: none is tried again at once).
                    let last = self.clock.last();
                    let written = beaten.map_or(last, |b| b.max(last));
                    let due = tokio::time::Instant::from_std(self.session.heartbeat_due(written));
                    tokio::select! {
                        biased;
                        d = &mut flush => break d,
                        _ = self.close.cancelled() => break false,
                        _ = tokio::time::sleep_until(due) => {
                            let _ = self.outbox.send(&self.session.heartbeat());
                            beaten = Some(now().instant);
                        }
                    }
                },
            }
        };
        if let Some(at) = beaten {
            self.session.on_write(at);
        }
        if !delivered {
            return Some(Ended::Local);
        }
        ended
    }

    fn drain_frames(&mut self, decoder: &Decoder, buf: &mut BytesMut, copy: bool) -> Option<Ended> {
        // One clock reading per read: frames that arrived together share it.
        let now = now();
        loop {
            let raw = match decoder.decode(buf) {
                Ok(Decoded::Frame(mut raw)) => {
                    if copy && raw.body.len() <= COPIED {
                        raw.body = Bytes::copy_from_slice(&raw.body);
                    }
                    raw
                }
                Ok(Decoded::NeedMore(_)) => return None,
                Err(e) => {
                    let (violation, reply) = self.session.handle_framing_error(e);
                    if let Some(reply) = reply {
                        let _ = self.outbox.send(&reply);
                    }
                    return Some(Ended::Violation(violation.to_string()));
                }
            };
            self.frames += 1;
            match self.session.handle_raw(now, raw) {
                Received::Message(m) => {
                    if !self.dispatch.dispatch(&self.session, m) {
                        return Some(Ended::Local);
                    }
                }
                Received::Heartbeat => {}
                Received::Rejected { violation, reply } => {
                    tracing::debug!(peer = %self.session.peer_uuid(), %violation, "frame refused");
                    if let Some(reply) = reply {
                        // A peer that does not read its errors loses them, not our memory.
                        let _ = self.outbox.send(&reply);
                    }
                    if violation.closes_session() {
                        return Some(Ended::Violation(violation.to_string()));
                    }
                }
                Received::PeerClosed { aborted, reason } => {
                    return Some(Ended::ServerClosed { aborted, reason });
                }
            }
        }
    }
}

/// A quiet session's read buffer: the size of its room, and the read under half of which a
/// session counts as quiet.
const QUIET: usize = 4096;

/// The largest frame body a quiet session copies out of its read buffer. A larger one keeps
/// sharing the buffer: copying it would cost more than the buffer the next room allocates.
const COPIED: usize = QUIET / 2;

/// Makes room in a session's read buffer for the next read, once the frames read are handed on,
/// when less than half of `room` is left: `room` in all, counting the start of a frame it holds
/// (so that a buffer of `room` bytes takes it), and never less than half of it free. The space
/// read is taken back in place when no frame read from it is still held (see
/// [`ReadLoop::drain`]) and the start of a frame it holds is no longer than what was read
/// before it (the `bytes` crate's rule for moving it to the front); otherwise the buffer grows,
/// so a quiet session whose frames exceed 1 KiB may grow its buffer once, to 8 KiB. (Room asked
/// for right after a read, with the bytes read still in the buffer, grew every buffer to twice
/// its size for good.)
fn make_room(buf: &mut BytesMut, room: usize) {
    if buf.capacity() - buf.len() < room / 2 {
        buf.reserve(room.saturating_sub(buf.len()).max(room / 2));
    }
}

/// Why the first frame of a handshake did not arrive.
#[derive(Debug)]
pub(crate) enum FirstFrame {
    /// It arrived.
    Frame(ssntp::frame::RawFrame),
    /// The stream cannot be framed.
    Framing(ssntp::codec::FrameError),
    /// The deadline passed.
    Timeout,
    /// The stream closed or failed.
    Io(String),
}

/// Reads one frame (for the handshake) before `deadline`; bytes read past it stay in `buf`.
pub(crate) async fn read_first<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut BytesMut,
    decoder: &Decoder,
    deadline: Instant,
) -> FirstFrame {
    let deadline = tokio::time::Instant::from_std(deadline);
    loop {
        match decoder.decode(buf) {
            Ok(Decoded::Frame(raw)) => return FirstFrame::Frame(raw),
            Ok(Decoded::NeedMore(n)) => buf.reserve(n.min(64 << 10)),
            Err(e) => return FirstFrame::Framing(e),
        }
        tokio::select! {
            read = r.read_buf(buf) => match read {
                Ok(0) => return FirstFrame::Io("the peer closed the connection".into()),
                Ok(_) => {}
                Err(e) => return FirstFrame::Io(e.to_string()),
            },
            _ = tokio::time::sleep_until(deadline) => return FirstFrame::Timeout,
        }
    }
}

/// Writes one frame now (handshake replies), bounded by `deadline`.
pub(crate) async fn write_now<W: AsyncWrite + Unpin>(
    w: &mut W,
    frame: &Frame,
    max_frame: u32,
    deadline: Instant,
) -> Result<(), String> {
    let bytes = frame.to_bytes(max_frame).map_err(|e| e.to_string())?;
    let write = async {
        w.write_all(&bytes).await?;
        w.flush().await
    };
    match tokio::time::timeout_at(tokio::time::Instant::from_std(deadline), write).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("write timed out".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ssntp::Payload;
    use uuid::Uuid;

    fn message() -> Message {
        let frame = Frame::new(Uuid::nil(), &Payload::Heartbeat);
        Message {
            frame,
            payload: Payload::Heartbeat,
        }
    }

    fn frame_of(n: usize) -> Frame {
        let payload = Payload::ProtocolViolation(ssntp::payload::Reason::new("x".repeat(n)));
        Frame::new(Uuid::nil(), &payload)
    }

    /// A session opened on an in-memory stream (its reader not started: the writer runs on its
    /// own).
    type Piped = Opened<tokio::io::ReadHalf<tokio::io::DuplexStream>>;

    /// A session's writer on one end of an in-memory stream of `room` bytes: the session and
    /// the other end.
    fn piped(config: ConnConfig, room: usize) -> (Piped, tokio::io::DuplexStream) {
        let (ours, theirs) = tokio::io::duplex(room);
        let tracker = tokio_util::task::TaskTracker::new();
        (open(ours, 1 << 20, config, &tracker), theirs)
    }

    /// [`piped`] with a queue of `frames` frames at most, and the session's outbox.
    fn queue_of(frames: usize, room: usize) -> (Piped, tokio::io::DuplexStream, Outbox) {
        let config = ConnConfig {
            queue_frames: frames,
            ..ConnConfig::default()
        };
        let (opened, theirs) = piped(config, room);
        let outbox = opened.outbox().clone();
        (opened, theirs, outbox)
    }

    /// Reads `n` whole frames off `stream` and returns their payloads' lengths.
    async fn read_frames(stream: &mut tokio::io::DuplexStream, n: usize) -> Vec<usize> {
        let decoder = Decoder::default();
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        while out.len() < n {
            match decoder.decode(&mut buf).unwrap() {
                Decoded::Frame(raw) => out.push(raw.body.len()),
                Decoded::NeedMore(_) => {
                    assert!(stream.read_buf(&mut buf).await.unwrap() > 0, "stream ended");
                }
            }
        }
        out
    }

    #[test]
    fn the_queue_is_bounded_in_frames_and_bytes_and_an_empty_one_takes_any_frame() {
        let pipe = Pipe::new(3, 1000);
        let item = |n| Queued::frame(frame_of(n), 1 << 20).unwrap();
        // Whether a small frame is refused as Busy (taken if not).
        let small_refused = || {
            let (small, len) = item(10);
            match pipe.try_queue(small, len) {
                Ok(()) => false,
                Err((e, _)) => e == SendError::Busy,
            }
        };
        let (big, len) = item(5000);
        // Over the byte bound, but the queue is empty: taken.
        assert!(pipe.try_queue(big, len).is_ok());
        assert!(small_refused());
        // The writer takes the queue: its bytes still count until written.
        {
            let mut q = pipe.lock();
            q.buf.clear();
            q.writing = std::mem::take(&mut q.len);
            q.frames = 0;
        }
        assert!(small_refused());
        pipe.lock().writing = 0;
        // Three frames at most.
        for _ in 0..3 {
            assert!(!small_refused());
        }
        assert!(small_refused());
        assert_eq!(pipe.lock().frames, 3);
        // Closed: refused as such.
        let closed = Arc::new(Pipe::new(3, 1000));
        drop(Closer(closed.clone()));
        let (small, len) = item(10);
        assert!(matches!(
            closed.try_queue(small, len),
            Err((SendError::NotConnected, _))
        ));
        assert!(Outbox::detached().send(&frame_of(1)).is_err());
    }

    #[test]
    fn a_large_frame_encoded_for_many_is_queued_shared_between_the_others() {
        let pipe = Pipe::new(10_000, 4 << 20);
        let item = |n| Queued::frame(frame_of(n), 1 << 20).unwrap();
        // A burst grows the buffer well past what a session keeps.
        let mut burst = 0;
        for _ in 0..1000 {
            let (a, len) = item(1000);
            pipe.try_queue(a, len).unwrap();
            burst += len;
        }
        let big = frame_of(10_000).to_bytes(1 << 20).unwrap();
        pipe.try_queue(Queued::Encoded(big.clone()), big.len())
            .unwrap();
        // The burst's buffer went whole into the parts: the queue keeps nothing of it.
        assert_eq!(pipe.lock().buf.capacity(), 0);
        let small = frame_of(10).to_bytes(1 << 20).unwrap();
        pipe.try_queue(Queued::Encoded(small.clone()), small.len())
            .unwrap();
        let q = pipe.lock();
        assert_eq!(q.parts.len(), 2);
        assert_eq!(q.parts[0].len(), burst);
        // The very buffer, not a copy.
        assert_eq!(q.parts[1].as_ptr(), big.as_ptr());
        assert_eq!(&q.buf[..], &small[..]);
        assert!(q.buf.capacity() < 4096);
        assert_eq!(q.len, burst + big.len() + small.len());
        assert_eq!(q.frames, 1002);
    }

    /// Yields until `done` holds (the writer runs meanwhile); fails after 10 s.
    async fn until(mut done: impl FnMut() -> bool) {
        tokio::time::timeout(Duration::from_secs(10), async {
            while !done() {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the condition held within 10 s");
    }

    /// Polls `fut` once.
    async fn poll_once<F: Future + Unpin>(fut: &mut F) -> Poll<F::Output> {
        std::future::poll_fn(|cx| Poll::Ready(std::pin::Pin::new(&mut *fut).poll(cx))).await
    }

    #[tokio::test]
    async fn frames_go_out_in_order_whole_and_the_writer_wakes_for_each_burst() {
        let (opened, mut theirs) = piped(ConnConfig::default(), 1 << 20);
        let outbox = opened.outbox().clone();
        // Every tenth frame a large one encoded for many, queued shared; an empty one is taken
        // too and writes nothing.
        let size = |i: usize, round: usize| match i % 10 {
            5 => 4096 + (i * 37 + round) % 3000,
            _ => 10 + (i * 37 + round) % 300,
        };
        for round in 0..3 {
            let sizes: Vec<usize> = (0..50).map(|i| size(i, round)).collect();
            for (i, &n) in sizes.iter().enumerate() {
                if i % 10 == 5 {
                    let bytes = frame_of(n).to_bytes(1 << 20).unwrap();
                    assert!(bytes.len() >= SHARED);
                    outbox.send_encoded(bytes).unwrap();
                } else {
                    outbox.send_frame(frame_of(n)).unwrap();
                }
                if i == 20 {
                    outbox.send_encoded(Bytes::new()).unwrap();
                }
            }
            let lens = read_frames(&mut theirs, sizes.len()).await;
            let want: Vec<usize> = sizes.iter().map(|&n| frame_of(n).payload.len()).collect();
            assert_eq!(lens, want, "round {round}");
        }
        opened.close.cancel();
        // Closed: the stream ends, and nothing more is taken.
        let mut rest = Vec::new();
        theirs.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        until(|| outbox.pipe.is_closed()).await;
        assert_eq!(outbox.send_frame(frame_of(1)), Err(SendError::NotConnected));
    }

    #[tokio::test]
    async fn an_empty_item_does_not_jam_the_queue() {
        let (_opened, mut theirs, outbox) = queue_of(1, 1 << 20);
        outbox.send_encoded(Bytes::new()).unwrap();
        // Taken by the writer like any other, though it writes nothing.
        until(|| outbox.pipe.lock().frames == 0).await;
        outbox.send_frame(frame_of(10)).unwrap();
        assert_eq!(read_frames(&mut theirs, 1).await.len(), 1);
    }

    #[tokio::test]
    async fn a_sender_waiting_for_a_place_goes_on_when_the_writer_takes_the_queue() {
        // The peer does not read: the writer's first write blocks.
        let (_opened, _theirs, outbox) = queue_of(2, 64);
        outbox.send_frame(frame_of(500)).unwrap();
        outbox.send_frame(frame_of(500)).unwrap();
        // Two frames queued: the third waits for a place.
        let third = frame_of(500);
        let mut waiting = Box::pin(outbox.send_wait(&third));
        assert!(poll_once(&mut waiting).await.is_pending());
        // The writer takes both (and blocks writing them): the place is free, the bytes fit.
        until(|| outbox.pipe.lock().writing > 0).await;
        assert!(matches!(poll_once(&mut waiting).await, Poll::Ready(Ok(()))));
    }

    #[tokio::test]
    async fn a_sender_waits_for_room_and_goes_on_when_the_peer_reads() {
        let config = ConnConfig {
            queue_frames: 4,
            queue_bytes: 4096,
            ..ConnConfig::default()
        };
        // A stream of 1 KiB: the writer blocks while the peer does not read.
        let (opened, mut theirs) = piped(config, 1024);
        let outbox = opened.outbox().clone();
        let size = |i: usize| 100 + i * 7 % 200;
        let sending = outbox.clone();
        let sender = tokio::spawn(async move {
            for i in 0..200 {
                sending.send_wait(&frame_of(size(i))).await.unwrap();
            }
        });
        // The writer blocked on a write and the queue full: the sender waits.
        until(|| {
            let q = outbox.pipe.lock();
            q.writing > 0 && (q.frames == 4 || q.len + q.writing + 300 > 4096)
        })
        .await;
        {
            let q = outbox.pipe.lock();
            assert!(q.frames <= 4 && q.len + q.writing <= 4096);
        }
        assert!(!sender.is_finished());
        // The peer reads: every frame arrives, in order.
        let lens = read_frames(&mut theirs, 200).await;
        let want: Vec<usize> = (0..200).map(|i| frame_of(size(i)).payload.len()).collect();
        assert_eq!(lens, want);
        sender.await.unwrap();
    }

    #[tokio::test]
    async fn a_sender_waiting_for_room_hears_of_the_close() {
        let (opened, _theirs, outbox) = queue_of(1, 64);
        outbox.send_frame(frame_of(500)).unwrap();
        // The writer takes it and blocks on the write; one more fills the queue.
        until(|| outbox.pipe.lock().writing > 0).await;
        outbox.send_frame(frame_of(500)).unwrap();
        let third = frame_of(500);
        let mut waiting = Box::pin(outbox.send_wait(&third));
        assert!(poll_once(&mut waiting).await.is_pending());
        opened.close.cancel();
        assert_eq!(waiting.await, Err(SendError::NotConnected));
        // The writer gives up its blocked write; senders are refused as not connected.
        until(|| outbox.pipe.is_closed()).await;
        assert_eq!(outbox.send_frame(frame_of(1)), Err(SendError::NotConnected));
    }

    #[test]
    fn a_quiet_read_buffer_keeps_its_size() {
        // The read loop's order: frames handed on, room made, then a read.
        const FRAME: usize = 300;
        let mut buf = BytesMut::with_capacity(QUIET);
        let base = buf.as_ptr() as usize;
        for i in 0..1000 {
            make_room(&mut buf, QUIET);
            // Never moved nor grown: the space read is reclaimed in place.
            let at = buf.as_ptr() as usize;
            assert!(
                at >= base && at + buf.capacity() <= base + QUIET,
                "read {i}"
            );
            let free = buf.capacity() - buf.len();
            assert!(free >= QUIET / 2);
            // A read: the rest of one frame and the start of the next.
            let n = (FRAME - 50 + i * 37 % 100).min(free);
            buf.extend_from_slice(&[0; 400][..n]);
            // A quiet session's frames are copied out (the application may hold the copies).
            while buf.len() >= FRAME {
                drop(buf.split_to(FRAME));
            }
        }
        // A frame larger than the room still gets room to be read whole.
        buf.extend_from_slice(&[0; 3000]);
        make_room(&mut buf, QUIET);
        assert!(buf.capacity() - buf.len() >= QUIET / 2);
    }

    #[test]
    fn a_quiet_read_buffer_of_larger_frames_grows_once_at_most() {
        const FRAME: usize = 1500;
        let mut buf = BytesMut::with_capacity(QUIET);
        for i in 0..1000 {
            make_room(&mut buf, QUIET);
            assert!(buf.capacity() <= 2 * QUIET, "read {i}: {}", buf.capacity());
            assert!(buf.capacity() - buf.len() >= QUIET / 2);
            // Small reads: a part of a frame at a time.
            let n = (700 + i * 37 % 300).min(buf.capacity() - buf.len());
            buf.extend_from_slice(&[0; 1000][..n]);
            while buf.len() >= FRAME {
                drop(buf.split_to(FRAME));
            }
        }
    }

    #[test]
    fn a_batch_is_sized_from_the_last_and_an_idle_one_holds_nothing() {
        let mut batch = Batch::default();
        assert!(batch.is_empty());
        for _ in 0..100 {
            batch.push(message());
        }
        let first = batch.take();
        assert_eq!(first.len(), 100);
        // Handed over: nothing held until the next message.
        assert!(batch.is_empty());
        assert_eq!(batch.messages.capacity(), 0);
        batch.push(message());
        assert!(batch.messages.capacity() >= 100);
        assert_eq!(batch.take().len(), 1);
        // A small batch makes the next one small again.
        batch.push(message());
        assert!(batch.messages.capacity() < 100);
    }
}
