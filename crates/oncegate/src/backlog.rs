//! The small backlog of receptions that were journaled but whose decision the store could not
//! record (it went away between the two writes). They were answered as unavailable, so the
//! provider retries; once the store is back their proof is recorded as a rejection, so the
//! report never shows them as an unexplained gap.

use std::sync::Mutex;

use oncegate_core::ids::DeliveryId;
use oncegate_core::matrix::{self, Rejection, Situation};
use oncegate_store::{DecideRequest, Store, StoreError};
use time::OffsetDateTime;

use crate::details::Details;
use crate::metrics::Metrics;

/// At most this many undecided receptions are remembered; past it the oldest are dropped (and
/// logged), because an outage long enough to fill it is visible in the report anyway.
const BACKLOG_LIMIT: usize = 10_000;

/// A reception journaled without a decision.
#[derive(Debug, Clone)]
pub(crate) struct Undecided {
    pub delivery: DeliveryId,
    pub event_type: Option<String>,
}

#[derive(Debug, Default)]
pub(crate) struct Backlog(Mutex<Vec<Undecided>>);

impl Backlog {
    pub fn remember(&self, u: Undecided) {
        let mut backlog = self.0.lock().expect("backlog lock");
        if backlog.len() >= BACKLOG_LIMIT {
            let dropped = backlog.remove(0);
            tracing::error!(delivery_id = %dropped.delivery, "undecided backlog full; this reception stays without a proof");
        }
        backlog.push(u);
    }

    /// Records the decisions `store` missed, as rejections (each counted in `metrics`).
    /// Returns how many still wait.
    pub async fn settle(
        &self,
        store: &Store,
        metrics: &Metrics,
        now: OffsetDateTime,
        lease: time::Duration,
    ) -> usize {
        let pending: Vec<Undecided> = std::mem::take(&mut *self.0.lock().expect("backlog lock"));
        if pending.is_empty() {
            return 0;
        }
        let mut still = Vec::new();
        for u in pending {
            let rejection = Rejection {
                code: "store_unavailable".to_owned(),
                message: "the store was unavailable when this delivery arrived; it was answered 503 so the provider retries".to_owned(),
            };
            let decision = matrix::decide(&Situation::Rejected(rejection));
            let matrix = move |_: &oncegate_store::PriorView| decision.clone();
            let request = DecideRequest {
                delivery: u.delivery.clone(),
                event_type: u.event_type.clone(),
                key: None,
                lease,
                details_json: Details::rejected("store_unavailable").to_json(),
                now,
                resource: None,
                critical: true,
            };
            match store.decide(request, &matrix).await {
                Ok(_) => {
                    metrics.rejected("store_unavailable");
                    tracing::info!(delivery_id = %u.delivery, "recorded the decision missed while the store was down");
                }
                // Already decided: the first attempt did commit after all.
                Err(StoreError::Conflict(_)) | Err(StoreError::NotFound { .. }) => {}
                Err(_) => still.push(u),
            }
        }
        let n = still.len();
        if n > 0 {
            let mut backlog = self.0.lock().expect("backlog lock");
            still.append(&mut backlog);
            *backlog = still;
        }
        n
    }
}
