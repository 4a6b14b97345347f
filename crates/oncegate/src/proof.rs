//! The proof of one delivery, read back whole: the delivery as journaled, its recorded
//! decision and typed details, the effect it concerns with its links, gateway mode's forward
//! and attempts, and the queue item with its resolution. One struct, read in one place, which
//! every reader renders in its own medium: the API's proof route, the console's proof page and
//! `oncegate explain`.

use oncegate_core::ids::DeliveryId;
use oncegate_store::{
    DeliveryRecord, EffectRecord, ForwardAttempt, ForwardRecord, ProofRecord, QueueItem,
    StoreError, TenantFilter,
};

use crate::details::Details;
use crate::gate::Gate;

/// Everything recorded about one delivery and what became of it.
#[derive(Debug, Clone)]
pub struct DeliveryProof {
    /// The delivery as journaled (with its body while retention keeps it).
    pub delivery: DeliveryRecord,
    /// Its recorded decision; `None` for a reception journaled without one (it counts in the
    /// report's unexplained gap).
    pub decision: Option<ProofRecord>,
    /// The decision's details, typed (empty when there is no decision).
    pub details: Details,
    /// The effect the decision concerns, while it exists.
    pub effect: Option<EffectRecord>,
    /// That effect's forward (gateway mode), when it has one.
    pub forward: Option<ForwardRecord>,
    /// The forward's attempts, in order (empty without a forward).
    pub attempts: Vec<ForwardAttempt>,
    /// The queue item the decision opened, with its resolution.
    pub queue_item: Option<QueueItem>,
}

impl Gate {
    /// The proof of delivery `id` for a reader who sees `tenants`: `None` when no delivery of
    /// those tenants has this id.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use oncegate::{Gate, Reception};
    /// use oncegate::store::TenantFilter;
    ///
    /// let contract = oncegate_core::contract::parse(
    ///     "oncegate.toml",
    ///     include_str!("../../../examples/oncegate.toml"),
    /// )
    /// .unwrap();
    /// let dir = tempfile::tempdir().unwrap();
    /// let url = format!("sqlite://{}", dir.path().join("oncegate.db").display());
    /// let gate = Gate::open(contract, &url, b"a salt".to_vec()).await.unwrap();
    /// let body = br#"{"type":"refund.created","data":{"payment_id":"pay_1","request_ref":"rr-1","amount":1,"currency":"EUR"}}"#;
    /// let outcome = gate.deliver(Reception::new("acme", "payflow", "live", body.to_vec())).await.unwrap();
    /// let id = outcome.proof().delivery.clone();
    ///
    /// let proof = gate.delivery_proof(&id, &TenantFilter::All).await.unwrap().unwrap();
    /// assert_eq!(proof.decision.unwrap().action.as_str(), "process");
    /// assert!(proof.effect.is_some());
    /// let other = TenantFilter::Only(vec!["globex".into()]);
    /// assert!(gate.delivery_proof(&id, &other).await.unwrap().is_none());
    /// # });
    /// ```
    pub async fn delivery_proof(
        &self,
        id: &DeliveryId,
        tenants: &TenantFilter,
    ) -> Result<Option<DeliveryProof>, StoreError> {
        let store = self.reader();
        let delivery = match store.delivery(id).await? {
            Some(d) if tenants.allows(&d.tenant) => d,
            _ => return Ok(None),
        };
        let Some(decision) = store.proof(id).await? else {
            return Ok(Some(DeliveryProof {
                delivery,
                decision: None,
                details: Details::default(),
                effect: None,
                forward: None,
                attempts: Vec::new(),
                queue_item: None,
            }));
        };
        let details = Details::parse(&decision.details_json);
        let (effect, forward, attempts) = match &decision.effect {
            Some(e) => {
                let effect = store.effect(e).await?;
                let forward = store.forward(e).await?;
                let attempts = match &forward {
                    Some(_) => store.forward_attempts(e).await?,
                    None => Vec::new(),
                };
                (effect, forward, attempts)
            }
            None => (None, None, Vec::new()),
        };
        let queue_item = match &decision.queue_item {
            Some(q) => store.queue_item(q).await?,
            None => None,
        };
        Ok(Some(DeliveryProof {
            delivery,
            decision: Some(decision),
            details,
            effect,
            forward,
            attempts,
            queue_item,
        }))
    }
}
