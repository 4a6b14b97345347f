//! Batches: one request that carries several notifications (Adyen's `notificationItems`), each
//! journaled, identified, decided and proved as a delivery of its own, through the same
//! pipeline as any other ([`Gate::deliver`]), and answered with the reply the provider expects.

use oncegate_core::json;

use crate::error::GateError;
use crate::gate::Gate;
use crate::outcome::Outcome;
use crate::reception::{Body, Reception};

/// What a batch request came to: each item's outcome, in the body's order, and the reply the
/// provider expects once every item was journaled.
#[derive(Debug)]
pub struct BatchOutcome {
    /// One outcome per item (one in all when the request was not read as a batch).
    pub items: Vec<Outcome>,
    /// The provider's expected reply (`batch.reply` in the contract); `None` when the provider
    /// declares no batch or the body was not one (then the single outcome is the answer).
    pub reply: Option<String>,
}

impl Gate {
    /// Delivers a request of a provider whose contract declares a `batch`: every item becomes
    /// a reception of its own (the request's origin and headers, the item as its body, written
    /// in the key form so that no digit of a number is lost) and goes through
    /// [`Gate::deliver`]; two refunds in one request are two deliveries, never one.
    ///
    /// A request of a provider without a batch, a body that is not JSON, or one without the
    /// declared items is delivered whole, as [`Gate::deliver`] would: refused with its reason,
    /// or kept for reconciliation, never dropped.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use oncegate::{Gate, Outcome, Reception};
    ///
    /// let contract = oncegate_core::contract::parse("adyen.toml", r#"
    /// [providers.adyen]
    /// event_type = "/eventCode"
    /// batch = { items = "/notificationItems", item = "/NotificationRequestItem", reply = "[accepted]" }
    ///
    /// [providers.adyen.types.REFUND]
    /// criticality = "critical"
    /// resource = "/originalReference"
    /// discriminants = ["/amount/value"]
    ///   [[providers.adyen.types.REFUND.strategies]]
    ///   name = "psp-event"
    ///   version = 1
    ///   level = "business_ref"
    ///   fields = ["/pspReference", "/success"]
    /// "#).unwrap();
    /// let dir = tempfile::tempdir().unwrap();
    /// let url = format!("sqlite://{}", dir.path().join("oncegate.db").display());
    /// let gate = Gate::open(contract, &url, b"salt".to_vec()).await.unwrap();
    ///
    /// let item = |psp: &str| format!(r#"{{"NotificationRequestItem":{{"eventCode":"REFUND",
    ///     "pspReference":"{psp}","originalReference":"PAY1","success":"true","amount":{{"value":1500}}}}}}"#);
    /// let body = format!(r#"{{"live":"false","notificationItems":[{},{}]}}"#, item("R1"), item("R2"));
    /// let done = gate.deliver_batch(Reception::new("acme", "adyen", "live", body.into_bytes())).await.unwrap();
    /// assert_eq!(done.reply.as_deref(), Some("[accepted]"));
    /// // Two refunds of the same amount on one payment: two effects.
    /// assert!(done.items.iter().all(|o| matches!(o, Outcome::Process(_))));
    /// # });
    /// ```
    pub async fn deliver_batch(&self, reception: Reception) -> Result<BatchOutcome, GateError> {
        let contract = self.contract().clone();
        let batch = contract
            .provider(reception.provider())
            .and_then(|p| p.batch.as_ref());
        let items = match (batch, reception.body().cut_by()) {
            (Some(batch), None) => json::parse(reception.body().bytes(), &self.limits())
                .ok()
                .and_then(|doc| batch.items_of(&doc).ok()),
            _ => None,
        };
        let (Some(batch), Some(items)) = (batch, items) else {
            return Ok(BatchOutcome {
                items: vec![self.deliver(reception).await?],
                reply: None,
            });
        };
        let mut outcomes = Vec::with_capacity(items.len());
        for item in &items {
            let body = oncegate_core::canon::to_key_form(item).into_bytes();
            let mut one = reception.clone();
            one.body = Body::whole(body);
            outcomes.push(self.deliver(one).await?);
        }
        Ok(BatchOutcome {
            items: outcomes,
            reply: Some(batch.reply.clone()),
        })
    }
}
