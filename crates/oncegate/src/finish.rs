//! Work that runs to its end even when its caller stops waiting for it: a delivery's stages
//! are never cut between its journal entry and what follows its proof.
//!
//! Written here rather than taken from a crate: what is wanted is neither a task of its own
//! (`tokio::spawn`, which every delivery paid for with a task to allocate, schedule and wake
//! across threads) nor a plain future (which a caller that hangs up cuts wherever it is), but
//! the work run in the caller's task, and handed to a task of its own only by a caller that
//! leaves before its end.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll};

/// The work panicked; the panic's message went to the panic hook (stderr).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Panicked;

/// Runs `work` in the caller's task. If the caller drops it before its end (a client that
/// hung up, a request timeout), the rest of it is spawned on the current runtime and runs to
/// its end there. A panic of `work` is the caller's `Err(Panicked)`, as a spawned task's is
/// its join handle's error.
pub(crate) fn to_the_end<F>(work: F) -> ToTheEnd<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    ToTheEnd {
        work: Some(Box::pin(work)),
    }
}

/// See [`to_the_end`].
pub(crate) struct ToTheEnd<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    /// `None` once the work ended (or panicked).
    work: Option<Pin<Box<F>>>,
}

impl<F> Future for ToTheEnd<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    type Output = Result<F::Output, Panicked>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let work = self
            .work
            .as_mut()
            .expect("a finished work is not polled again");
        match catch_unwind(AssertUnwindSafe(|| work.as_mut().poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(output)) => {
                self.work = None;
                Poll::Ready(Ok(output))
            }
            Err(_) => {
                self.work = None;
                Poll::Ready(Err(Panicked))
            }
        }
    }
}

impl<F> Drop for ToTheEnd<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn drop(&mut self) {
        let Some(work) = self.work.take() else {
            return;
        };
        // Outside a runtime (a runtime already gone) there is nothing left to run it on, as a
        // spawned task would have been dropped with its runtime.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                work.await;
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::sync::oneshot;

    use super::*;

    #[tokio::test]
    async fn the_work_runs_in_the_callers_task_and_answers_it() {
        let (caller, ran_in) = tokio::spawn(async {
            let ran_in = to_the_end(async { tokio::task::id() }).await;
            (tokio::task::id(), ran_in)
        })
        .await
        .unwrap();
        assert_eq!(ran_in, Ok(caller));
    }

    #[tokio::test]
    async fn a_caller_that_leaves_does_not_cut_the_work() {
        let (go, wait) = oneshot::channel::<()>();
        let (ended, end) = oneshot::channel();
        let work = to_the_end(async move {
            wait.await.expect("the test sends");
            ended.send("ended").expect("the test waits");
        });
        // Polled once (it waits for `go`), then dropped: its caller gave up.
        let gave_up = tokio::time::timeout(Duration::ZERO, work).await;
        assert!(gave_up.is_err(), "the work was still waiting");
        go.send(()).expect("the work is still there to hear it");
        let end = tokio::time::timeout(Duration::from_secs(10), end)
            .await
            .expect("the work ended on its own");
        assert_eq!(end, Ok("ended"));
    }

    #[tokio::test]
    async fn a_panic_is_the_callers_error() {
        let work = to_the_end(async {
            if std::hint::black_box(true) {
                panic!("inside the work");
            }
        });
        assert_eq!(work.await, Err(Panicked));
    }
}
