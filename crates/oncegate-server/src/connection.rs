//! `serve`'s connections: the accept loop, HTTP/1.1 through hyper, a deadline on the request
//! head and on the wait between kept-alive requests, and the graceful stop.
//!
//! Written by hand rather than with `axum::serve` because that one has no deadline at all on
//! reading a request head, so a client trickling its head one byte at a time holds its
//! connection for as long as it likes. hyper's own `header_read_timeout` does not fit either:
//! its clock starts when the connection becomes ready for a request, so it also bounds the wait
//! of an idle kept-alive connection, and the two bounds could not be set apart. Here each
//! connection is in one phase at a time, watched by a small timer:
//!
//! * `Head(since)` — a new connection, or the first byte of a next request arrived: the head
//!   must be complete within `header`;
//! * `Busy` — the head is read and the router has the request (its body and its answer are
//!   bounded by the body deadline and the request timeout, see `app`);
//! * `Idle(since)` — the answer is sent: the next request must start within `idle`.
//!
//! A connection past its deadline in `Head` or `Idle` has no request in flight, so it is simply
//! dropped (the socket closes); a `Busy` one is never cut here.
//!
//! A phase change wakes nobody: it is written into the connection's `PhaseCell`, and the
//! watchdog reads it when its timer fires (see `watchdog`). A request makes three changes; a
//! channel that woke the watchdog at each made the connection's task run three more times per
//! request, polling hyper's connection again each time.

use std::convert::Infallible;
use std::pin::{pin, Pin};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::Router;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;

/// The connection deadlines (the body's is applied per request, in `app`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadlines {
    pub header: Duration,
    pub idle: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Head(Instant),
    Busy,
    Idle(Instant),
}

/// A connection's current phase, written by the socket, the service and the answers, read by
/// the watchdog.
struct PhaseCell(Mutex<Phase>);

impl PhaseCell {
    fn new(phase: Phase) -> PhaseCell {
        PhaseCell(Mutex::new(phase))
    }

    fn get(&self) -> Phase {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn set(&self, phase: Phase) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = phase;
    }

    /// An idle connection's next request has begun: its head is now on the clock.
    fn head_begun(&self) {
        let mut phase = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Phase::Idle(_) = *phase {
            *phase = Phase::Head(Instant::now());
        }
    }
}

/// Accepts connections until `shutdown` resolves, then waits for the open ones to finish
/// (idle ones close at once, busy ones after their answer).
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    deadlines: Deadlines,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    // Dropping `stop_rx` tells every connection to stop; each connection holds a `done_rx`
    // clone, so `done_tx.closed()` resolves when the last one is gone.
    let (stop_tx, stop_rx) = watch::channel(());
    tokio::spawn(async move {
        shutdown.await;
        drop(stop_rx);
    });
    let (done_tx, done_rx) = watch::channel(());
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
            () = stop_tx.closed() => break,
        };
        let stop = stop_tx.clone();
        let done = done_rx.clone();
        let app = app.clone();
        tokio::spawn(async move {
            connection(stream, app, deadlines, stop).await;
            drop(done);
        });
    }
    drop(listener);
    drop(done_rx);
    done_tx.closed().await;
}

/// What `axum::serve` does too: a failed accept of one connection is skipped; anything else
/// (out of file descriptors) is logged and retried after a second, since connections closing
/// may free what is missing.
async fn accept_failed(e: std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "accepting a connection failed");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

async fn connection(stream: TcpStream, app: Router, deadlines: Deadlines, stop: watch::Sender<()>) {
    let phase = Arc::new(PhaseCell::new(Phase::Head(Instant::now())));
    let io = TokioIo::new(Watched {
        inner: stream,
        phase: phase.clone(),
    });
    let service = {
        let phase = phase.clone();
        hyper::service::service_fn(move |request: Request<Incoming>| {
            phase.set(Phase::Busy);
            let mut app = app.clone();
            let phase = phase.clone();
            async move {
                let response =
                    tower_service::Service::call(&mut app, request.map(Body::new)).await?;
                Ok::<_, Infallible>(response.map(|body| Answer { body, phase }))
            }
        })
    };
    let conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        // The watchdog below bounds the head (see the module's header); hyper's own bound,
        // which would also cut idle connections at the head's deadline, stays off.
        .header_read_timeout(None)
        .serve_connection(io, service);
    let mut conn = pin!(conn);
    let mut watchdog = pin!(watchdog(&phase, deadlines));
    let mut stopping = pin!(stop.closed());
    let mut stopped = false;
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                break;
            }
            why = &mut watchdog => {
                tracing::debug!(deadline = why, "connection closed at its deadline");
                break;
            }
            () = &mut stopping, if !stopped => {
                stopped = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// Resolves when the connection passed the deadline of its phase, with the deadline's name.
///
/// Nothing wakes the watchdog but its one timer. It never sleeps longer than `step`, the
/// shorter of the two deadlines, past its last look, so a phase begun meanwhile is seen before
/// its own deadline (every deadline is at least `step` after its phase began); the timer is
/// then moved to that deadline. On a busy connection, and between requests sent back to back,
/// the timer fires once per `step` at most, whatever the number of requests.
async fn watchdog(phase: &PhaseCell, deadlines: Deadlines) -> &'static str {
    let step = deadlines.header.min(deadlines.idle);
    let mut timer = pin!(tokio::time::sleep(step));
    loop {
        timer.as_mut().await;
        let now = Instant::now();
        let deadline = match phase.get() {
            Phase::Head(since) => Some((since + deadlines.header, "header")),
            Phase::Idle(since) => Some((since + deadlines.idle, "idle")),
            // A busy connection is bounded by the request timeout instead (`app`).
            Phase::Busy => None,
        };
        match deadline {
            Some((until, name)) if until <= now => return name,
            Some((until, _)) => timer.as_mut().reset(until.min(now + step)),
            None => timer.as_mut().reset(now + step),
        }
    }
}

/// The socket, noticing the first byte of a next request on an idle connection.
struct Watched {
    inner: TcpStream,
    phase: Arc<PhaseCell>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(result, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.phase.head_begun();
        }
        result
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// An answer's body; hyper drops it once it is sent, which makes the connection idle.
struct Answer {
    body: Body,
    phase: Arc<PhaseCell>,
}

impl Drop for Answer {
    fn drop(&mut self) {
        self.phase.set(Phase::Idle(Instant::now()));
    }
}

impl HttpBody for Answer {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
