//! The reconciler: settles open `reconcile` queue items by asking each type's authority, and
//! sweeps recently seen resources for operations no local effect accounts for.
//!
//! For each open item whose type has an authority it fetches the operations of the item's
//! resource, lists the local effects of that resource, and lets the pure matcher
//! (`oncegate_core::reconcile`) decide:
//!
//! * an operation with the delivery's discriminants is matched to no local effect → the item
//!   is resolved `distinct` and the delivery released as a new effect carrying that
//!   operation's reference;
//! * every such operation is already matched → resolved `duplicate`, linked;
//! * no authority, an error, or nothing to match → the item stays open with the attempt and
//!   its error recorded, visible in the queue listing, the report and a metric.
//!
//! How a later retry of a released operation is recognized: a provider without ids resends a
//! body identical to the first refund's, so no key can tell the two retries apart, and the
//! released effect is not put in the unique index (its key belongs to the first effect). The
//! retry lands in the queue like the original did, and the reconciler resolves it `duplicate`:
//! the released effect carries its authoritative reference, so matching pairs that operation
//! with it by reference and the other with the first effect by discriminants — every operation
//! is accounted for, and nothing is released twice.
//!
//! Resolutions are recorded with `by: "reconciler"` and the evidence: the URL asked, the
//! operations the authority listed (discriminants in their stored, masked form), the local
//! effects they were matched against, and the verdict.

use std::collections::BTreeMap;
use std::time::Duration;

use oncegate_core::contract::{Contract, EventType};
use oncegate_core::ids::{DeliveryId, EffectId, QueueItemId};
use oncegate_core::json::{self, Limits, Value};
use oncegate_core::reconcile::{self, AuthorityOperation, LocalEffect, Verdict};
use oncegate_store::{
    EffectRecord, EffectState, MissingOperation, QueueItem, ReconcileAttempt, Resolution,
    ResolutionOutcome, ResourceScope, Store, StoreError,
};
use time::OffsetDateTime;

mod sweep;
mod unknown;

use crate::evidence;
pub use crate::evidence::Evidence;

pub(crate) use crate::metrics::ReconcileMetrics;

use crate::authority::{AuthorityClient, AuthorityPolicy, UrlContext};
use crate::gate::Gate;
use crate::trust::TrustError;

/// Who the resolutions are recorded as.
pub const RECONCILER: &str = "reconciler";

/// Who resolutions settled by the consumer's verification API are recorded as.
pub const VERIFIER: &str = "verifier";

/// Open items settled per run at most; the rest wait for the next run.
const ITEMS_PER_RUN: u32 = 200;

/// How long a pass woken by a queued item waits for the items queued with it.
const WAKE_GATHER: Duration = Duration::from_millis(50);

/// How the reconciler runs inside `serve`.
///
/// It is event-driven: a run starts as soon as an item is queued in this process (a
/// quarantine, a reconcile, an expired critical lease). `every` is the fallback poll, which
/// also picks up items queued by other instances sharing the store. An item whose attempt was
/// inconclusive or failed waits `retry_base · 2^(attempts−1)`, capped at `retry_cap`, with a
/// jitter of up to half that, before it is attempted again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReconcilerSettings {
    /// Between two runs over the open items when nothing wakes the worker; `None` turns the
    /// worker off.
    pub every: Option<Duration>,
    /// The wait after a first inconclusive or failed attempt.
    pub retry_base: Duration,
    /// The longest wait between two attempts of one item.
    pub retry_cap: Duration,
    /// Between two invisible-losses sweeps (only types whose authority sets `sweep_window`).
    pub sweep_every: Duration,
    /// How the authorities are asked (timeout, retries, circuit).
    pub authority: AuthorityPolicy,
}

impl Default for ReconcilerSettings {
    fn default() -> Self {
        ReconcilerSettings {
            every: Some(Duration::from_secs(30)),
            retry_base: Duration::from_secs(5),
            retry_cap: Duration::from_secs(600),
            sweep_every: Duration::from_secs(600),
            authority: AuthorityPolicy::default(),
        }
    }
}

/// Why a run could not go through its items at all (one item's trouble never stops a run).
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // each variant's message says what it holds
pub enum ReconcileError {
    #[error("the store is unavailable: {0}")]
    Store(#[from] StoreError),
    #[error(transparent)]
    Trust(#[from] TrustError),
}

/// What a run did with one queue item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemReport {
    /// The queue item.
    pub item: QueueItemId,
    /// Its delivery.
    pub delivery: DeliveryId,
    /// `distinct`, `duplicate`, or `open` (left for a later attempt or a person).
    pub verdict: &'static str,
    /// The authority's reference of the operation the item was matched to.
    pub authoritative_ref: Option<String>,
    /// The effect released (distinct) or linked (duplicate).
    pub effect: Option<EffectId>,
    /// One plain sentence: what the authority answered, or why the item stays open.
    pub summary: String,
}

/// What a sweep found for one resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepReport {
    /// The resource swept.
    pub scope: ResourceScope,
    /// References of authority operations with no local effect.
    pub missing: Vec<String>,
    /// Set when the authority could not be asked.
    pub error: Option<String>,
}

/// The outcome of one run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunReport {
    /// What the run did with each open item.
    pub items: Vec<ItemReport>,
    /// What the invisible-losses sweep found.
    pub sweep: Vec<SweepReport>,
}

/// Everything one run needs.
struct Run<'a> {
    contract: &'a Contract,
    store: &'a Store,
    salt: &'a [u8],
    now: OffsetDateTime,
    client: &'a AuthorityClient,
    metrics: Option<&'a ReconcileMetrics>,
    /// `None` attempts every open item (`oncegate reconcile --once`, an operator's explicit run).
    retry: Option<(Duration, Duration)>,
    /// Attempts only the items never attempted (a pass woken by queued items).
    fresh_only: bool,
    /// Items this run already settled along with another (all the items waiting on one
    /// effect whose outcome the consumer verified), skipped when their turn comes.
    settled: std::sync::Mutex<std::collections::HashSet<QueueItemId>>,
    /// The attempts that left items open, recorded together once the pass went through its
    /// items (see `items`).
    attempts: std::sync::Mutex<Vec<(QueueItemId, ReconcileAttempt)>>,
}

impl<'a> Run<'a> {
    /// A run at the gate's time; `worker` is the retry backoff of the service's worker, which
    /// also counts its attempts in the gate's metrics (`None`: an explicit run, every item).
    fn new(
        gate: &'a Gate,
        client: &'a AuthorityClient,
        worker: Option<(Duration, Duration)>,
    ) -> Run<'a> {
        Run {
            contract: gate.contract(),
            store: gate.store().as_ref(),
            salt: gate.salt(),
            now: gate.now(),
            client,
            metrics: worker.map(|_| &gate.metrics().reconcile),
            retry: worker,
            fresh_only: false,
            settled: Default::default(),
            attempts: Default::default(),
        }
    }
}

/// One reconciliation pass over the open items, then the invisible-losses sweep, with the
/// gate's contract, store, salt and clock: what `oncegate reconcile --once` runs. Every CA
/// file the authorities need (`ca_file` for all, each authority's own) is read first.
pub async fn reconcile_once(
    gate: &Gate,
    policy: AuthorityPolicy,
    ca_file: Option<&std::path::Path>,
) -> Result<RunReport, ReconcileError> {
    let client = AuthorityClient::new(policy, gate.contract(), ca_file)?;
    // An explicit run attempts every open item and counts nothing (the worker counts).
    let run = Run::new(gate, &client, None);
    let items = run.items().await?;
    let sweep = run.sweep().await?;
    Ok(RunReport { items, sweep })
}

/// The worker `serve` runs: a pass every `every`, a sweep every `sweep_every`. Several
/// instances may run it at once: resolving an item twice is refused by the store, so the
/// second instance's attempt on an item just settled is a harmless conflict.
pub(crate) async fn run_forever(gate: Gate, settings: ReconcilerSettings, client: AuthorityClient) {
    let Some(every) = settings.every else { return };
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_sweep: Option<std::time::Instant> = None;
    loop {
        // Whichever comes first: an item queued in this process, or the fallback poll (items
        // queued by another instance, items whose retry became due).
        let woken = tokio::select! {
            _ = tick.tick() => false,
            _ = gate.wake().notified() => {
                // The items queued in the same moment make one pass, not one pass each.
                tokio::time::sleep(WAKE_GATHER).await;
                true
            }
        };
        // A pass woken by queued items attempts those, the items never attempted; the items
        // waiting for a retry are the fallback poll's. Under a burst of collisions the wakes
        // come every `WAKE_GATHER`, and each pass read again, to the list's limit, the items
        // attempted before whose retry was not due yet.
        let run = Run {
            fresh_only: woken,
            ..Run::new(
                &gate,
                &client,
                Some((settings.retry_base, settings.retry_cap)),
            )
        };
        if let Err(e) = run.items().await {
            tracing::debug!(error = %e, "reconciliation skipped");
            continue;
        }
        if last_sweep.is_none_or(|at| at.elapsed() >= settings.sweep_every) {
            last_sweep = Some(std::time::Instant::now());
            if let Err(e) = run.sweep().await {
                tracing::debug!(error = %e, "invisible-losses sweep skipped");
            }
        }
    }
}

fn local_effects(effects: &[EffectRecord]) -> Vec<LocalEffect> {
    effects
        .iter()
        .map(|e| LocalEffect {
            id: e.id.clone(),
            authoritative_ref: e.authoritative_ref.clone(),
            discriminants: e.discriminants.clone(),
        })
        .collect()
}

fn operations(ops: &[AuthorityOperation]) -> Vec<evidence::Operation> {
    ops.iter()
        .map(|o| evidence::Operation {
            reference: o.reference.clone(),
            discriminants: o.discriminants.clone(),
        })
        .collect()
}

impl Run<'_> {
    fn count(&self, outcome: &str) {
        if let Some(m) = self.metrics {
            m.attempt(outcome);
        }
    }

    /// Whether an item's next attempt is due: never attempted, or its backoff has passed.
    fn due(&self, item: &QueueItem) -> bool {
        let (Some((base, cap)), Some(last)) = (self.retry, item.last_attempt_at) else {
            return true;
        };
        last + crate::gate::to_time(retry_delay(&item.id, item.reconcile_attempts, base, cap))
            <= self.now
    }

    /// One pass over the open items that are due. What the pass needs of the store beyond
    /// each item's own settlement is read and written once for all its items: the states of
    /// the effects the items wait on, in one read first, and the attempts that left items
    /// open, in one write last. Under a burst of collisions a pass holds dozens of items; one
    /// read and one write of their own each would cost the database a transaction per item.
    async fn items(&self) -> Result<Vec<ItemReport>, ReconcileError> {
        // No item attempted within the shortest backoff is due: those are left in the index.
        // A fresh-only pass reads the items never attempted (no attempt is at or before 0).
        let attempted_by = if self.fresh_only {
            Some(OffsetDateTime::UNIX_EPOCH)
        } else {
            self.retry
                .map(|(base, cap)| self.now - crate::gate::to_time(shortest_retry_delay(base, cap)))
        };
        let items: Vec<QueueItem> = self
            .store
            .open_reconcile_items(ITEMS_PER_RUN, attempted_by)
            .await?
            .into_iter()
            .filter(|i| self.due(i))
            .collect();
        let waited_on: std::collections::BTreeSet<EffectId> = items
            .iter()
            .filter_map(|i| i.existing_effect.clone())
            .collect();
        let waited_on: Vec<EffectId> = waited_on.into_iter().collect();
        let states = self.store.effect_states(&waited_on, self.now).await?;
        let mut out = Vec::with_capacity(items.len());
        for item in &items {
            if self
                .settled
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&item.id)
            {
                continue;
            }
            match self.item(item, &states).await {
                Ok(report) => out.push(report),
                // Another instance settled it meanwhile.
                Err(StoreError::Conflict(_)) => {}
                Err(e) if e.is_unavailable() => return Err(e.into()),
                Err(e) => {
                    tracing::warn!(queue_item = %item.id, error = %e, "reconciliation of an item failed");
                }
            }
        }
        let attempts =
            std::mem::take(&mut *self.attempts.lock().unwrap_or_else(|p| p.into_inner()));
        let recorded = self.store.record_reconcile_attempts(&attempts).await?;
        // An item resolved meanwhile (by another instance, a person, or this pass along with
        // another item) took no attempt: it is not reported open.
        let resolved: std::collections::HashSet<&QueueItemId> = attempts
            .iter()
            .zip(&recorded)
            .filter(|(_, recorded)| !**recorded)
            .map(|((id, _), _)| id)
            .collect();
        out.retain(|r| !(r.verdict == "open" && resolved.contains(&r.item)));
        Ok(out)
    }

    /// Leaves the item open; its attempt is recorded with the pass's others (see `items`).
    fn keep_open(
        &self,
        item: &QueueItem,
        outcome: &str,
        why: String,
        evidence: Option<Evidence>,
    ) -> ItemReport {
        self.count(outcome);
        // Recorded every time, also when nothing changed: the attempt time is what sends the
        // item to the back of the next run's list.
        self.attempts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((
                item.id.clone(),
                ReconcileAttempt {
                    at: self.now,
                    error: why.clone(),
                    evidence: evidence.map(|e| e.to_json()),
                },
            ));
        ItemReport {
            item: item.id.clone(),
            delivery: item.delivery.clone(),
            verdict: "open",
            authoritative_ref: None,
            effect: None,
            summary: why,
        }
    }

    async fn item(
        &self,
        item: &QueueItem,
        states: &BTreeMap<EffectId, EffectState>,
    ) -> Result<ItemReport, StoreError> {
        let t = item
            .event_type
            .as_deref()
            .and_then(|name| self.contract.event_type(&item.provider, name));
        if let Some(report) = self.unknown_outcome(item, t, states).await? {
            return Ok(report);
        }
        let Some((t, authority)) = t.and_then(|t| t.authority.as_ref().map(|a| (t, a))) else {
            // A person resolves it. The attempt is recorded all the same (the item was looked
            // at, for an unknown outcome of its effect): it sends the item to the back of the
            // list under the retry backoff. Left unrecorded, such items stayed first in every
            // pass, each re-read with its effect on every wake-up, and past a pass's worth of
            // them no other item was ever reached.
            return Ok(self.keep_open(
                item,
                "no_authority",
                "the type has no authority to ask: a person resolves it".to_owned(),
                None,
            ));
        };
        // The payload gives the resource (for items queued before it was stored) and any
        // `{/json/pointer}` hole of the URL.
        let payload = self
            .store
            .delivery(&item.delivery)
            .await?
            .and_then(|d| d.payload)
            .and_then(|body| json::parse(&body, &Limits::default()).ok());
        // A sensitive resource is stored keyed-hashed: the URL needs its clear value (from the
        // payload), the local effects are listed under the stored form.
        let sensitive = t.resource.as_ref().is_some_and(|p| t.is_sensitive(p));
        let clear = resource_of(t, payload.as_ref());
        let url_resource = if sensitive {
            clear
        } else {
            item.resource.clone().or(clear)
        };
        let stored = item.resource.clone().or_else(|| {
            if sensitive {
                None
            } else {
                url_resource.clone()
            }
        });
        let (Some(url_resource), Some(resource)) = (url_resource, stored) else {
            return Ok(self.keep_open(
                    item,
                    "error",
                    "the delivery's resource is unknown (its payload may have been purged): a person resolves it".to_owned(),
                    None,
                ));
        };
        let ctx = UrlContext {
            tenant: &item.tenant,
            provider: &item.provider,
            env: &item.env,
            resource: Some(&url_resource),
            payload: payload.as_ref(),
        };
        let answer = match self.client.operations(t, authority, &ctx, self.salt).await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(queue_item = %item.id, delivery_id = %item.delivery, error = %e, "the authority could not be asked; the item stays open");
                return Ok(self.keep_open(item, "error", e.to_string(), None));
            }
        };
        let scope = ResourceScope {
            tenant: item.tenant.clone(),
            provider: item.provider.clone(),
            env: item.env.clone(),
            event_type: t.name.clone(),
            resource,
        };
        let effects = self.store.resource_effects(&scope).await?;
        let locals = local_effects(&effects);
        // A delivery queued against an effect whose outcome is unknown asks whether that very
        // effect happened: it may only be confirmed, never released a second time.
        let verifying = item.existing_effect.as_ref().filter(|id| {
            effects.iter().any(|e| {
                &e.id == *id
                    && (e.state == EffectState::Unknown
                        || (e.state == EffectState::Reserved
                            && e.lease_until.is_some_and(|u| u <= self.now)))
            })
        });
        if verifying.is_some() {
            // It became unknown between the two reads: the authority must not settle it.
            return Ok(self.keep_open(
                item,
                "no_verifier",
                "the effect's outcome became unknown: only the consumer can say whether it ran"
                    .to_owned(),
                None,
            ));
        }
        let declared = reconcile::declared(authority);
        let verdict = reconcile::verdict(
            &declared,
            &answer.operations,
            &locals,
            &item.discriminants,
            item.existing_effect.as_ref(),
            verifying,
        );
        let mut evidence = Evidence {
            // The clear URL would show a sensitive resource: the template stands in for it.
            asked: Some(if sensitive {
                authority.url.clone()
            } else {
                answer.url.clone()
            }),
            at: Some(self.now.unix_timestamp()),
            operations: Some(operations(&answer.operations)),
            local_effects: Some(
                effects
                    .iter()
                    .map(|e| evidence::LocalEffect {
                        effect: e.id.as_str().to_owned(),
                        authoritative_ref: e.authoritative_ref.clone(),
                        state: e.state.as_str().to_owned(),
                    })
                    .collect(),
            ),
            verifying: Some(verifying.map(|e| e.as_str().to_owned())),
            ..Evidence::default()
        };
        let (outcome, reference, note) = match &verdict {
            Verdict::Inconclusive { why } => {
                evidence.verdict = Some("inconclusive".to_owned());
                return Ok(self.keep_open(item, "inconclusive", why.clone(), Some(evidence)));
            }
            Verdict::Release { authoritative_ref } => (
                ResolutionOutcome::Distinct,
                authoritative_ref.clone(),
                format!(
                    "the authority lists operation {authoritative_ref} with these discriminants and no local effect matches it"
                ),
            ),
            Verdict::Duplicate {
                effect,
                authoritative_ref,
            } => (
                ResolutionOutcome::Duplicate,
                authoritative_ref.clone(),
                format!(
                    "every operation the authority lists with these discriminants is already applied (this one is {authoritative_ref}, effect {effect})"
                ),
            ),
        };
        evidence.verdict = Some(outcome.as_str().to_owned());
        evidence.authoritative_ref = Some(reference.clone());
        let resolved = self
            .store
            .resolve_with_evidence(
                &item.id,
                Resolution {
                    outcome,
                    authoritative_ref: Some(reference.clone()),
                    note: note.clone(),
                    by: RECONCILER.to_owned(),
                    at: self.now,
                },
                &evidence.to_json(),
            )
            .await?;
        self.count(outcome.as_str());
        if let Some(m) = self.metrics {
            m.settled("service", item, self.now);
        }
        tracing::info!(queue_item = %item.id, delivery_id = %item.delivery, outcome = outcome.as_str(), authoritative_ref = %reference, "reconciled against the authority");
        Ok(ItemReport {
            item: item.id.clone(),
            delivery: item.delivery.clone(),
            verdict: outcome.as_str(),
            authoritative_ref: Some(reference),
            effect: resolved.resolution.and_then(|r| r.effect),
            summary: note,
        })
    }
}

/// The wait before attempt `attempts + 1` of an item: exponential from `base`, capped at `cap`,
/// with a jitter of up to half of it, derived from the item's id so that items queued together
/// spread out while one item's schedule stays the same across instances.
/// The least `retry_delay` waits, whatever the item and its attempts: half the first wait.
fn shortest_retry_delay(base: Duration, cap: Duration) -> Duration {
    base.min(cap) / 2
}

fn retry_delay(item: &QueueItemId, attempts: u64, base: Duration, cap: Duration) -> Duration {
    use std::hash::{Hash, Hasher};
    let exp = u32::try_from(attempts.saturating_sub(1))
        .unwrap_or(u32::MAX)
        .min(20);
    let full = base.saturating_mul(1u32 << exp).min(cap);
    // `DefaultHasher::new()` has fixed keys: the same item gets the same jitter everywhere.
    let mut h = std::collections::hash_map::DefaultHasher::new();
    item.as_str().hash(&mut h);
    attempts.hash(&mut h);
    let frac = (h.finish() % 1000) as u32;
    full / 2 + (full / 2) * frac / 1000
}

/// The clear resource of a delivery from its payload (for the authority's URL only).
fn resource_of(t: &EventType, payload: Option<&Value>) -> Option<String> {
    let pointer = t.resource.as_ref()?;
    match pointer.get(payload?)? {
        Value::String(s) if !s.trim().is_empty() => Some(s.clone()),
        v @ Value::Number(_) => Some(oncegate_core::canon::to_key_form(v)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_exponentially_with_jitter_up_to_the_cap() {
        let id = QueueItemId::from_u128(42);
        let (base, cap) = (Duration::from_secs(5), Duration::from_secs(600));
        let mut last = Duration::ZERO;
        for attempts in 1..=12u64 {
            let d = retry_delay(&id, attempts, base, cap);
            let full = (base * 2u32.pow((attempts - 1) as u32)).min(cap);
            assert!(
                d >= full / 2 && d <= full,
                "attempt {attempts}: {d:?} of {full:?}"
            );
            assert_eq!(d, retry_delay(&id, attempts, base, cap), "stable");
            if full < cap {
                assert!(d > last / 2, "grows");
            }
            last = d;
        }
        assert!(retry_delay(&id, 30, base, cap) <= cap);
        let other = QueueItemId::from_u128(43);
        assert!(
            (1..=8).any(|n| retry_delay(&id, n, base, cap) != retry_delay(&other, n, base, cap)),
            "two items spread out"
        );
    }

    /// The pass skips, in the index, the items attempted within the shortest wait: none of
    /// them can be due, whatever its id, attempts, base and cap.
    #[test]
    fn no_wait_is_shorter_than_the_shortest() {
        for (base, cap) in [(5, 600), (1, 1), (600, 5), (7, 7_000)] {
            let (base, cap) = (Duration::from_millis(base), Duration::from_millis(cap));
            let shortest = shortest_retry_delay(base, cap);
            let mut seen = Duration::MAX;
            for n in 0..2_000u128 {
                for attempts in 0..25 {
                    let d = retry_delay(&QueueItemId::from_u128(n), attempts, base, cap);
                    assert!(d >= shortest, "{d:?} < {shortest:?} ({base:?}, {cap:?})");
                    seen = seen.min(d);
                }
            }
            assert!(
                seen < shortest + shortest / 50,
                "the bound is tight: {seen:?}"
            );
        }
    }
}
