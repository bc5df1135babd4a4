//! Handshakes off the sessions' threads: the server runs every new connection's TLS and
//! CONNECT exchange on a thread of its own (a single-threaded runtime, at a lower CPU priority
//! when asked), then hands the established stream back to the runtime that serves sessions.
//!
//! A TLS handshake costs far more CPU than a session's frame (key exchange, the client's
//! certificate chain and signature), and anyone who can open a TCP connection can start one.
//! On the sessions' own runtime a reconnect storm would take its threads from the established
//! sessions; on this thread, niced, established sessions win whenever both want the CPU, and
//! handshakes get all of it otherwise.
//!
//! A stream moves between runtimes as a std socket: [`Rehomed`] is the transport under TLS whose
//! tokio socket can be taken out ([`Rehomed::detach`], deregistering it from this runtime's
//! reactor) and put back ([`Rehomed::attach`], registering it with the current one), while the
//! TLS state stays in the `TlsStream` around it.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

/// A transport whose socket can leave one runtime and join another.
#[derive(Debug)]
pub struct Rehomed(Option<TcpStream>);

fn gone() -> io::Error {
    io::Error::new(
        io::ErrorKind::NotConnected,
        "the socket is moving between runtimes",
    )
}

impl Rehomed {
    /// Wraps a socket of the current runtime.
    pub fn new(tcp: TcpStream) -> Rehomed {
        Rehomed(Some(tcp))
    }

    /// The socket as a std socket, out of this runtime (the transport is empty until
    /// [`Rehomed::attach`]).
    pub fn detach(&mut self) -> io::Result<std::net::TcpStream> {
        self.0.take().ok_or_else(gone)?.into_std()
    }

    /// Puts a socket back, registered with the current runtime.
    pub fn attach(&mut self, tcp: std::net::TcpStream) -> io::Result<()> {
        self.0 = Some(TcpStream::from_std(tcp)?);
        Ok(())
    }

    /// The socket, if it is here.
    pub fn get(&self) -> Option<&TcpStream> {
        self.0.as_ref()
    }
}

impl AsyncRead for Rehomed {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.0.as_mut() {
            Some(s) => Pin::new(s).poll_read(cx, buf),
            None => Poll::Ready(Err(gone())),
        }
    }
}

impl AsyncWrite for Rehomed {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.0.as_mut() {
            Some(s) => Pin::new(s).poll_write(cx, buf),
            None => Poll::Ready(Err(gone())),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.0.as_mut() {
            Some(s) => Pin::new(s).poll_flush(cx),
            None => Poll::Ready(Err(gone())),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.0.as_mut() {
            Some(s) => Pin::new(s).poll_shutdown(cx),
            None => Poll::Ready(Err(gone())),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.0.as_mut() {
            Some(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            None => Poll::Ready(Err(gone())),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.0.as_ref().is_some_and(|s| s.is_write_vectored())
    }
}

type Job = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A thread that runs handshakes (any future, really) on a runtime of its own.
#[derive(Debug, Clone)]
pub struct Handshaker {
    jobs: mpsc::UnboundedSender<Job>,
}

/// How the handshake thread runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandshakerConfig {
    /// The thread's nice value (0: as the rest of the process; up to 19: yields the CPU to the
    /// sessions' threads whenever they want it). Default 10.
    pub nice: i32,
}

impl Default for HandshakerConfig {
    fn default() -> HandshakerConfig {
        HandshakerConfig { nice: 10 }
    }
}

impl Handshaker {
    /// Starts the thread. It ends when every [`Handshaker`] clone is dropped (jobs still
    /// running are dropped with its runtime).
    pub fn start(config: HandshakerConfig) -> io::Result<Handshaker> {
        let (jobs, mut rx) = mpsc::unbounded_channel::<Job>();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::Builder::new()
            .name("ssntp-handshakes".into())
            .spawn(move || {
                if config.nice != 0
                    && let Err(e) = support::thread::nice_this_thread(config.nice)
                {
                    tracing::warn!(error = %e, nice = config.nice, "handshake thread: nice not set");
                }
                rt.block_on(async move {
                    while let Some(job) = rx.recv().await {
                        tokio::spawn(job);
                    }
                });
            })?;
        Ok(Handshaker { jobs })
    }

    /// Runs `job` on the handshake thread; its output, or `None` if the thread is gone.
    pub async fn run<T, F>(&self, job: F) -> Option<T>
    where
        T: Send + 'static,
        F: Future<Output = T> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let wrapped: Job = Box::pin(async move {
            let _ = tx.send(job.await);
        });
        self.jobs.send(wrapped).ok()?;
        rx.await.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_stream_moves_to_the_handshake_thread_and_back() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = tokio::spawn(async move {
            let mut c = TcpStream::connect(addr).await.unwrap();
            c.write_all(b"ping").await.unwrap();
            let mut buf = [0u8; 4];
            c.read_exact(&mut buf).await.unwrap();
            c.write_all(b"more").await.unwrap();
            buf
        });
        let (tcp, _) = listener.accept().await.unwrap();
        let mut here = Rehomed::new(tcp);
        let std = here.detach().unwrap();
        assert!(here.get().is_none());
        let mut probe = [0u8; 1];
        assert!(
            here.read(&mut probe).await.is_err(),
            "an empty transport fails"
        );
        let h = Handshaker::start(HandshakerConfig::default()).unwrap();
        let main_thread = std::thread::current().id();
        let (std, thread) = h
            .run(async move {
                let mut there = Rehomed(None);
                there.attach(std).unwrap();
                let mut buf = [0u8; 4];
                there.read_exact(&mut buf).await.unwrap();
                assert_eq!(&buf, b"ping");
                there.write_all(b"pong").await.unwrap();
                (there.detach().unwrap(), std::thread::current().id())
            })
            .await
            .unwrap();
        assert_ne!(thread, main_thread, "the job ran on the handshake thread");
        here.attach(std).unwrap();
        let mut buf = [0u8; 4];
        here.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"more");
        assert_eq!(&client.await.unwrap(), b"pong");
        drop(h);
    }
}
