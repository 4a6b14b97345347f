//! The request body's deadline: a body that has not fully arrived `body_timeout` after its
//! head fails with [`BodyTimedOut`], which the routes answer `408 body_timeout`.
//!
//! Written by hand because tower-http's `RequestBodyTimeoutLayer` bounds the wait for *each*
//! frame, so a client sending one byte every second never trips it; this one bounds the whole
//! body.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::BoxError;
use hyper::body::{Frame, SizeHint};

/// The error a body past its deadline fails with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the request body was not received within {}", humanize(*.0))]
pub(crate) struct BodyTimedOut(pub Duration);

/// "5s", "300ms": the deadline as the flags spell it.
pub(crate) fn humanize(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// A body that fails once its deadline passed.
pub(crate) struct DeadlineBody {
    inner: Body,
    deadline: tokio::time::Instant,
    /// Armed only once the body has to wait for its sender: a body that has arrived whole by
    /// the time it is read (nearly every delivery's) never registers a timer.
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    after: Duration,
}

impl DeadlineBody {
    pub fn new(inner: Body, after: Duration) -> DeadlineBody {
        DeadlineBody {
            inner,
            deadline: tokio::time::Instant::now() + after,
            sleep: None,
            after,
        }
    }

    fn timed_out(&self) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Poll::Ready(Some(Err(BodyTimedOut(self.after).into())))
    }
}

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        // The clock is read first, so a body that keeps trickling is still cut.
        if tokio::time::Instant::now() >= self.deadline {
            return self.timed_out();
        }
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => Poll::Ready(frame.map(|r| r.map_err(BoxError::from))),
            Poll::Pending => {
                let deadline = this.deadline;
                let sleep = this
                    .sleep
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                if sleep.as_mut().poll(cx).is_ready() {
                    return self.timed_out();
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The deadline that failed `e` (somewhere in its chain of causes), if one did.
pub(crate) fn timed_out(e: &(dyn std::error::Error + 'static)) -> Option<BodyTimedOut> {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(t) = err.downcast_ref::<BodyTimedOut>() {
            return Some(*t);
        }
        next = err.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    /// A body whose sender never sends (`trickles: false`), or sends a byte whenever asked,
    /// every other time after a pause.
    struct Sender {
        trickles: bool,
        turn: bool,
    }

    impl HttpBody for Sender {
        type Data = Bytes;
        type Error = BoxError;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            if !self.trickles {
                return Poll::Pending;
            }
            self.turn = !self.turn;
            if self.turn {
                return Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"x")))));
            }
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    /// The deadline a sender's body (trickling, or silent) failed at, under a 50 ms one.
    async fn failed_at(trickles: bool) -> Option<BodyTimedOut> {
        let sender = Sender {
            trickles,
            turn: false,
        };
        let body = DeadlineBody::new(Body::new(sender), Duration::from_millis(50));
        let err = Body::new(body).collect().await.unwrap_err();
        timed_out(&err)
    }

    #[tokio::test]
    async fn a_body_that_keeps_trickling_fails_at_its_deadline() {
        assert_eq!(
            failed_at(true).await,
            Some(BodyTimedOut(Duration::from_millis(50)))
        );
    }

    #[tokio::test]
    async fn a_body_within_its_deadline_arrives_whole() {
        let body = DeadlineBody::new(Body::from("{\"id\":1}"), Duration::from_secs(5));
        let bytes = Body::new(body).collect().await.unwrap().to_bytes();
        assert_eq!(&bytes[..], b"{\"id\":1}");
    }

    #[tokio::test]
    async fn a_body_that_never_ends_fails_at_its_deadline() {
        assert_eq!(
            failed_at(false).await,
            Some(BodyTimedOut(Duration::from_millis(50)))
        );
        assert_eq!(
            BodyTimedOut(Duration::from_millis(300)).to_string(),
            "the request body was not received within 300ms"
        );
    }
}
