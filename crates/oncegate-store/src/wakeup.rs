//! Cross-instance hints that the queue has new items: on PostgreSQL a `NOTIFY` after an item
//! is queued, and a `LISTEN`ing connection per instance that wakes its reconciler.
//!
//! A hint only. Nothing depends on it arriving: a notification sent while a listener is
//! reconnecting is lost, and engines without LISTEN/NOTIFY (CockroachDB) refuse both
//! statements; the reconciler's poll still finds every item, just later. So sending never
//! fails a decision, and the listener retries quietly with a growing pause.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_postgres::{AsyncMessage, NoTls};

/// The channel the hints travel on.
pub(crate) const CHANNEL: &str = "oncegate_queue";

/// Sends the hint (after the item's commit). A failure is ignored: the reconciler's poll
/// finds the item anyway.
pub(crate) async fn notify(client: &tokio_postgres::Client) {
    let _ = client.batch_execute(&format!("NOTIFY {CHANNEL}")).await;
}

/// Listens on its own connection (outside the pool) until the task is aborted, waking `wake`
/// on every hint. Reconnects after a failure, pausing 1 s, then 2 s… up to 30 s.
pub(crate) fn listen(
    config: tokio_postgres::Config,
    wake: Arc<Notify>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut pause = Duration::from_secs(1);
        loop {
            // A failed connection is retried after the pause; the poll still runs meanwhile.
            if let Ok((client, mut connection)) = config.connect(NoTls).await {
                {
                    // The connection must be polled for the LISTEN to be answered, and for
                    // the notifications to arrive: one future does both.
                    let statement = format!("LISTEN {CHANNEL}");
                    let listen = client.batch_execute(&statement);
                    tokio::pin!(listen);
                    let mut listening = false;
                    loop {
                        let message = futures_util::future::poll_fn(|cx| {
                            if !listening {
                                if let std::task::Poll::Ready(r) = listen.as_mut().poll(cx) {
                                    listening = true;
                                    if r.is_err() {
                                        return std::task::Poll::Ready(None);
                                    }
                                    // A hint may have been missed while not listening.
                                    wake.notify_one();
                                }
                            }
                            connection.poll_message(cx)
                        })
                        .await;
                        match message {
                            Some(Ok(AsyncMessage::Notification(_))) => {
                                pause = Duration::from_secs(1);
                                wake.notify_one();
                            }
                            Some(Ok(_)) => {}
                            Some(Err(_)) | None => break,
                        }
                    }
                }
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(30));
        }
    })
}
