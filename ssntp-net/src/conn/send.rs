//! The sending side of a session: senders encode their frames into one queue, bounded in frames
//! and in bytes, and the session's writer takes all of it at a time and writes it.

use bytes::{Bytes, BytesMut};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use ssntp::frame::{EncodeError, Frame};

use super::{ConnConfig, Stamp};

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

impl Queue {
    /// The queue of a writer that is gone: it takes nothing more.
    fn closed() -> Queue {
        Queue {
            closed: true,
            ..Queue::default()
        }
    }
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
    fn try_queue<'f>(&self, item: Queued<'f>, len: usize) -> Result<(), (SendError, Queued<'f>)> {
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
        *self.0.lock() = Queue::closed();
        self.0.freed.notify_waiters();
    }
}

/// A frame on its way into a writer's queue.
#[derive(Debug)]
enum Queued<'f> {
    /// Encoded already: once for many recipients (a forward, a broadcast), or a traced frame.
    Encoded(Bytes),
    /// An untraced frame, encoded by its sender straight into the queue's buffer: no buffer
    /// of its own is allocated for it, nor is the frame copied or cloned.
    Frame(&'f Frame),
}

impl<'f> Queued<'f> {
    /// Queues `frame`: as it is when untraced (its length known without encoding it), encoded
    /// now when traced.
    fn frame(frame: &'f Frame, max_frame: u32) -> Result<(Queued<'f>, usize), EncodeError> {
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

    /// Queues `frame`; never waits.
    pub fn send(&self, frame: &Frame) -> Result<(), SendError> {
        let (item, len) = Queued::frame(frame, self.max_frame)?;
        self.pipe.try_queue(item, len).map_err(|(e, _)| e)
    }

    /// Queues `frame`, taking it; never waits.
    pub fn send_frame(&self, frame: Frame) -> Result<(), SendError> {
        self.send(&frame)
    }

    /// Queues an already encoded frame (one encoding shared by many recipients); never waits.
    pub fn send_encoded(&self, bytes: Bytes) -> Result<(), SendError> {
        let len = bytes.len();
        self.pipe
            .try_queue(Queued::Encoded(bytes), len)
            .map_err(|(e, _)| e)
    }

    /// Queues `frame`, waiting while the queue is full (backpressure). Senders waiting are all
    /// woken when the writer frees room and take it in no set order; a frame sent without
    /// waiting meanwhile may take it first.
    pub async fn send_wait(&self, frame: &Frame) -> Result<(), SendError> {
        let (mut item, len) = Queued::frame(frame, self.max_frame)?;
        // Room now (the common case): queued as `send` does, without the waiting machinery.
        let mut waited = false;
        loop {
            // Asked for before the attempt: room freed between the two is not missed.
            let freed = self.pipe.freed.notified();
            tokio::pin!(freed);
            if waited {
                freed.as_mut().enable();
            }
            match self.pipe.try_queue(item, len) {
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
    let rest = { std::mem::replace(&mut *pipe.lock(), Queue::closed()) };
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

/// Starts the writer of a session on `w`, and returns the session's outbox.
pub(super) fn start_writer<W: AsyncWrite + Send + Unpin + 'static>(
    w: W,
    max_frame: u32,
    config: ConnConfig,
    close: &CancellationToken,
    clock: &Arc<Stamp>,
    tracker: &tokio_util::task::TaskTracker,
) -> Outbox {
    let pipe = Arc::new(Pipe::new(config.queue_frames, config.queue_bytes));
    tracker.spawn(write_loop(
        w,
        pipe.clone(),
        close.clone(),
        clock.clone(),
        config.write_buffer,
    ));
    Outbox {
        pipe,
        max_frame,
        close: close.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Opened, open};
    use super::*;
    use ssntp::Payload;
    use ssntp::codec::{Decoded, Decoder};
    use std::future::Future;
    use std::task::Poll;
    use tokio::io::AsyncReadExt;
    use uuid::Uuid;

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
        let item = encoded;
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
            q.parts.clear();
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
        let item = encoded;
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

    /// A frame with an `n`-byte reason, queued encoded, and its length.
    fn encoded(n: usize) -> (Queued<'static>, usize) {
        let bytes = frame_of(n).to_bytes(1 << 20).unwrap();
        let len = bytes.len();
        (Queued::Encoded(bytes), len)
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
}
