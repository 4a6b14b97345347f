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
    sleep: Pin<Box<tokio::time::Sleep>>,
    after: Duration,
}

impl DeadlineBody {
    pub fn new(inner: Body, after: Duration) -> DeadlineBody {
        DeadlineBody {
            inner,
            sleep: Box::pin(tokio::time::sleep(after)),
            after,
        }
    }
}

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        // The deadline is looked at first, so a body that keeps trickling is still cut.
        if self.sleep.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(BodyTimedOut(self.after).into())));
        }
        Pin::new(&mut self.inner)
            .poll_frame(cx)
            .map(|f| f.map(|r| r.map_err(BoxError::from)))
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

    /// A body whose sender never sends.
    struct Silent;

    impl HttpBody for Silent {
        type Data = Bytes;
        type Error = BoxError;
        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
            Poll::Pending
        }
    }

    #[tokio::test]
    async fn a_body_that_never_ends_fails_at_its_deadline() {
        let body = DeadlineBody::new(Body::new(Silent), Duration::from_millis(50));
        let err = Body::new(body).collect().await.unwrap_err();
        assert_eq!(
            timed_out(&err),
            Some(BodyTimedOut(Duration::from_millis(50)))
        );
        assert_eq!(
            BodyTimedOut(Duration::from_millis(300)).to_string(),
            "the request body was not received within 300ms"
        );
    }
}
