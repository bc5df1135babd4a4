//! One established session on a byte stream: a writer task that writes the frames queued for it
//! together (`send.rs`), and the session loop that reads, applies the receiving rules, keeps the
//! session alive and hands messages to a dispatcher. Shared by the client and the server.

use bytes::{Buf, Bytes, BytesMut};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use ssntp::codec::{Decoded, Decoder};
use ssntp::frame::Frame;
use ssntp::frame::HEADER_LEN;
use ssntp::session::{Head, Message, Now, Received, Session, Tick, Viewed};
use ssntp::view::Frames;

use crate::rate::{Bucket, ReadRate};

mod send;

pub use send::{Outbox, SendError};

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
    /// half of them free. A quiet session's buffer is 4 KiB. A client's session, and on a
    /// server a session with a read budget, use this one.
    pub read_buffer: usize,
    /// On a server, the read buffer's size instead of [`ConnConfig::read_buffer`] for a session
    /// with no read budget while it sends much (default 64 KiB): with the default budgets a
    /// controller's (or a dual-role session's that includes the controller role), and any
    /// role's whose budget is lifted (`ReadRates`). The frames of one read reach the
    /// application together, and each delivery may wake it: fewer, larger reads cost a peer
    /// that sends at full speed less per frame. With the default budgets only the few sessions
    /// trusted to send that fast take it; nodes keep the smaller.
    pub unbudgeted_read_buffer: usize,
}

impl Default for ConnConfig {
    fn default() -> ConnConfig {
        ConnConfig {
            queue_frames: 65_536,
            queue_bytes: 8 << 20,
            write_buffer: 64 << 10,
            read_buffer: 16 << 10,
            unbudgeted_read_buffer: 64 << 10,
        }
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

    /// Takes the frames of one read that passed every rule, as views of the read's bytes (a
    /// session run with [`Mode::Views`]); `false` ends the session. By default each becomes a
    /// message for [`Dispatch::dispatch`].
    fn dispatch_views(&mut self, session: &Session, frames: Frames) -> bool {
        // A frame that passed the rules decodes: `to_message` fails for none of these.
        frames
            .iter()
            .filter_map(|frame| frame.to_message().ok())
            .all(|message| self.dispatch(session, message))
    }

    /// Delivers what [`Dispatch::dispatch`] held, once per read; `false` ends the session.
    fn flush(&mut self, session: &Session) -> impl Future<Output = bool> + Send;
}

/// How a session's reader hands on the frames it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// The reader decodes each payload and dispatches each message itself.
    Inline,
    /// A second task decodes and dispatches (see [`Sink::Staged`]).
    Staged,
    /// The reader applies every rule to the frames in place and dispatches each read's frames
    /// as one [`Frames`]: views of the read's bytes, no message per frame.
    Views,
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
    let close = CancellationToken::new();
    let opened_at = now().instant;
    let clock = Arc::new(Stamp::new(opened_at));
    // The handshake's frame was received just now.
    let received = Arc::new(Stamp::new(opened_at));
    let outbox = send::start_writer(w, max_frame, config, &close, &clock, tracker);
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
    /// when given, is the peer's read budget; `mode` says how the frames read are handed on.
    #[allow(clippy::too_many_arguments)]
    pub fn run<D: Dispatch>(
        self,
        session: Session,
        leftover: BytesMut,
        read_buffer: usize,
        rate: Option<ReadRate>,
        dispatch: D,
        mode: Mode,
        tracker: &tokio_util::task::TaskTracker,
    ) -> tokio::task::JoinHandle<Ended> {
        let sink = if mode == Mode::Views {
            Sink::Views(dispatch)
        } else if mode == Mode::Staged {
            let (to, from) = tokio::sync::mpsc::channel(1);
            let (spare_to, spare) = tokio::sync::mpsc::channel(2);
            let stage = tracker.spawn(decode_loop(
                session.clone(),
                dispatch,
                self.outbox.clone(),
                self.close.clone(),
                (from, spare_to),
            ));
            Sink::Staged {
                heads: Vec::new(),
                to,
                spare,
                stage,
            }
        } else {
            Sink::Inline(dispatch)
        };
        let reader = ReadLoop {
            session,
            outbox: self.outbox,
            close: self.close,
            clock: self.clock,
            received: self.received,
            sink,
            bucket: rate.map(|r| Bucket::new(r, tokio::time::Instant::now())),
            frames: 0,
        };
        tracker.spawn(reader.run(self.reader, leftover, read_buffer))
    }
}

/// Where a session's reader takes the frames that passed the rules needing no decoding.
enum Sink<D> {
    /// The reader decodes each payload and dispatches each message itself.
    Inline(D),
    /// The reader applies every rule in place and dispatches each read's frames as views.
    Views(D),
    /// What the rules without decoding made of each read's frames goes, all together, to a
    /// task of the session's own ([`decode_loop`]) that decodes and dispatches them, and
    /// answers the refused ones, in order, while the reader reads on: a session that sends at
    /// full speed has its reading (TLS included) on one core and its decoding and routing on
    /// another. Costs a task and a hand-over per read, and up to two more reads' frames held (one
    /// waiting in the channel, one being decoded). Bounded: the reader waits for the channel
    /// (one read's frames) as it waits for the application, heartbeating meanwhile.
    Staged {
        /// What the rules without decoding made of the frames of the read under way, in order:
        /// the frames that passed them, and the refusals (answered by the second task, so that
        /// every reply keeps the order of the frames it answers).
        heads: Vec<Head>,
        to: tokio::sync::mpsc::Sender<Vec<Head>>,
        /// The vectors the second task has emptied, for the next reads of a busy session: a
        /// read of small frames fills one of over 128 KiB, which glibc would map and unmap each
        /// time. A quiet read lets them go.
        spare: tokio::sync::mpsc::Receiver<Vec<Head>>,
        stage: tokio::task::JoinHandle<()>,
    },
}

/// A staged session's second task: decodes the frames of each read and dispatches their
/// messages in order, answering refusals in the same order, then flushes the dispatcher, as an
/// inline reader does. Once `close` is cancelled it delivers nothing more. A dispatcher that
/// ends the session, or a refusal that closes it, cancels `close` (the reader then ends too),
/// after flushing what was dispatched before it.
async fn decode_loop<D: Dispatch>(
    session: Session,
    mut dispatch: D,
    outbox: Outbox,
    close: CancellationToken,
    (mut from, spare): (
        tokio::sync::mpsc::Receiver<Vec<Head>>,
        tokio::sync::mpsc::Sender<Vec<Head>>,
    ),
) {
    while let Some(mut heads) = from.recv().await {
        if close.is_cancelled() {
            return;
        }
        let mut ended = None;
        for head in heads.drain(..) {
            let received = match head {
                Head::Done(received) => *received,
                Head::Undecoded(frame) => session.decode(frame),
            };
            ended = match received {
                Received::Message(m) => (!dispatch.dispatch(&session, m)).then_some(Ended::Local),
                other => settle(&session, &outbox, other),
            };
            if ended.is_some() {
                break;
            }
        }
        // Emptied, it goes back to the reader (or is dropped if two are there already).
        let _ = spare.try_send(heads);
        let delivered = tokio::select! {
            biased;
            _ = close.cancelled() => false,
            d = dispatch.flush(&session) => d,
        };
        if !delivered || ended.is_some() {
            close.cancel();
            return;
        }
    }
}

/// What a received frame that is not a message does: nothing (a HEARTBEAT), its refusal's
/// reply sent (and the session's end when the refusal closes it), or the server's close.
fn settle(session: &Session, outbox: &Outbox, received: Received) -> Option<Ended> {
    match received {
        Received::Message(_) | Received::Heartbeat => None,
        Received::Rejected { violation, reply } => {
            tracing::debug!(peer = %session.peer_uuid(), %violation, "frame refused");
            if let Some(reply) = reply {
                // A peer that does not read its errors loses them, not our memory.
                let _ = outbox.send(&reply);
            }
            violation
                .closes_session()
                .then(|| Ended::Violation(violation.to_string()))
        }
        Received::PeerClosed { aborted, reason } => Some(Ended::ServerClosed { aborted, reason }),
    }
}

struct ReadLoop<D> {
    session: Session,
    outbox: Outbox,
    close: CancellationToken,
    clock: Arc<Stamp>,
    /// The session's last receive, published for the application (the server's registry).
    received: Arc<Stamp>,
    sink: Sink<D>,
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
        // A staged session's last frames are dispatched before it is reported ended.
        if let Sink::Staged { to, stage, .. } = self.sink {
            drop(to);
            let _ = stage.await;
        }
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
        let ended = match self.sink {
            Sink::Views(_) => self.drain_views(decoder, buf, copy),
            _ => self.drain_frames(decoder, buf, copy),
        };
        // Every frame shows the peer alive, a HEARTBEAT included (which goes no further).
        self.received.record(self.session.last_received());
        // A slow application holds this peer back (backpressure), but never past a close, and
        // the session still heartbeats meanwhile (PROTOCOL.md §5 rule 5): the peer must not take
        // a busy process for a dead one. Its silence is not timed here: its frames wait unread.
        let mut beaten: Option<Instant> = None;
        let delivered = {
            let (sink, session) = (&mut self.sink, &self.session);
            let flush = async move {
                match sink {
                    Sink::Inline(dispatch) | Sink::Views(dispatch) => dispatch.flush(session).await,
                    Sink::Staged { heads, .. } if heads.is_empty() => true,
                    Sink::Staged {
                        heads, to, spare, ..
                    } => {
                        let next = if heads.len() >= BUSY_HEADS {
                            spare
                                .try_recv()
                                .unwrap_or_else(|_| Vec::with_capacity(heads.len()))
                        } else {
                            // A quiet session keeps no room.
                            while spare.try_recv().is_ok() {}
                            Vec::new()
                        };
                        to.send(std::mem::replace(heads, next)).await.is_ok()
                    }
                }
            };
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
                    let ended = Some(Ended::Violation(violation.to_string()));
                    let refused = Received::Rejected { violation, reply };
                    match &mut self.sink {
                        // Answered after the frames before it, by the task that answers those.
                        Sink::Staged { heads, .. } => heads.push(Head::Done(Box::new(refused))),
                        Sink::Inline(_) | Sink::Views(_) => {
                            settle(&self.session, &self.outbox, refused);
                        }
                    }
                    return ended;
                }
            };
            self.frames += 1;
            let received = match &mut self.sink {
                // Refusals too, so that every reply goes out in the order of the frames.
                Sink::Staged { heads, .. } => {
                    heads.push(self.session.handle_head(now, raw));
                    continue;
                }
                Sink::Inline(_) | Sink::Views(_) => self.session.handle_raw(now, raw),
            };
            let ended = match (received, &mut self.sink) {
                (Received::Message(m), Sink::Inline(dispatch)) => {
                    (!dispatch.dispatch(&self.session, m)).then_some(Ended::Local)
                }
                (other, _) => settle(&self.session, &self.outbox, other),
            };
            if ended.is_some() {
                return ended;
            }
        }
    }

    /// Handles every whole frame in `buf` for a session run with [`Mode::Views`]: the bytes of
    /// the whole frames read are taken off the buffer at once (copied, for a quiet session, as
    /// [`ReadLoop::drain`] says, when they fit its room), every rule is applied to each frame
    /// where it lies, refusals are answered at once, and the frames that passed go to the
    /// dispatcher together, as one [`Frames`]. A framing error after them is answered after
    /// they are dispatched.
    fn drain_views(&mut self, decoder: &Decoder, buf: &mut BytesMut, copy: bool) -> Option<Ended> {
        let now = now();
        // The whole frames at the front of the buffer, and a framing error after them.
        let (mut used, mut count, mut framing) = (0, 0, None);
        loop {
            match decoder.decode_slice(&buf[used..]) {
                Ok(Some(frame)) => {
                    used += frame.used;
                    count += 1;
                }
                Ok(None) => break,
                Err(e) => {
                    framing = Some(e);
                    break;
                }
            }
        }
        let mut ended = None;
        if count > 0 {
            // A quiet session's frames are copied out, unless their bytes are more than its
            // whole room (a large frame, completed by a small read): shared, as a large body
            // is on the path of messages.
            let read = if copy && used <= QUIET {
                let read = Bytes::copy_from_slice(&buf[..used]);
                buf.advance(used);
                read
            } else {
                buf.split_to(used).freeze()
            };
            self.frames += count;
            let mut entries = Vec::with_capacity(count as usize);
            let mut at = 0;
            // Found whole above: each decodes again.
            while let Ok(Some(frame)) = decoder.decode_slice(&read[at..]) {
                let body_at = at + HEADER_LEN;
                at += frame.used;
                match self
                    .session
                    .handle_view(now, &frame.header, frame.body, body_at)
                {
                    Viewed::Passed(entry) => entries.push(entry),
                    Viewed::Done(received) => {
                        ended = settle(&self.session, &self.outbox, received);
                        if ended.is_some() {
                            break;
                        }
                    }
                }
            }
            if let (Sink::Views(dispatch), false) = (&mut self.sink, entries.is_empty()) {
                // The entries lie in `read`: they were made from it.
                let frames = Frames::new(read, entries);
                debug_assert!(frames.is_some(), "an index entry outside its read");
                let frames = frames.unwrap_or_default();
                if !dispatch.dispatch_views(&self.session, frames) {
                    return Some(Ended::Local);
                }
            }
        }
        if ended.is_some() {
            return ended;
        }
        let Some(error) = framing else {
            decoder.reserve_rest(buf);
            return None;
        };
        let (violation, reply) = self.session.handle_framing_error(error);
        let ended = Some(Ended::Violation(violation.to_string()));
        settle(
            &self.session,
            &self.outbox,
            Received::Rejected { violation, reply },
        );
        ended
    }
}

/// The frames in a read from which a staged session counts as busy: it reuses the vectors
/// its second task has emptied; a quieter read lets them go.
const BUSY_HEADS: usize = 64;

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
