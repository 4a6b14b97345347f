//! Gateway mode's forwarder: the task of the upkeep that delivers the effects of forward types
//! to the consumer's endpoint, exactly once.
//!
//! Woken as soon as a forward is enqueued (a `process` decision, here) and otherwise at the
//! next due time or the fallback poll, it claims released effects of forward types (a verifier
//! or a person found them not applied; a reversible lease expired), then starts every due
//! attempt through the store's one conditional update — so several instances may run it at
//! once — and sends the journaled body as received, signed with Standard Webhooks headers,
//! under the effect's current fencing token. A 2xx completes the effect with the answer's body;
//! anything else, or a timeout, retries after an exponential pause with jitter, the lease
//! extended over the wait; after the last attempt the forward is a dead letter. An attempt
//! found in flight past its deadline was cut by a stop: its outcome is unknown, and the lease
//! sweep hands it on (critical: verify before retry; reversible: released, claimed and sent
//! again).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use oncegate_core::contract::{Contract, Forward};
use oncegate_store::{
    ForwardEnd, ForwardNext, ForwardRecord, ForwardState, ForwardType, NewForward,
};

use crate::gate::{to_time, Gate};
use crate::trust::{self, TrustError};

mod request;

use request::{send, Sent};

/// How the forwarder runs.
#[derive(Debug, Clone, Copy)]
pub struct ForwarderSettings {
    /// Between two looks at the store when nothing wakes the forwarder and nothing falls due
    /// sooner (forwards enqueued by another instance); `None` turns the forwarder off.
    pub poll: Option<Duration>,
    /// Attempts in flight at once in this instance.
    pub concurrency: usize,
}

impl Default for ForwarderSettings {
    /// A poll every second, 16 attempts at once.
    fn default() -> Self {
        ForwarderSettings {
            poll: Some(Duration::from_secs(1)),
            concurrency: 16,
        }
    }
}

/// The forward types of a contract: what the forwarder may claim.
pub(crate) fn forward_types(contract: &Contract) -> Vec<ForwardType> {
    contract
        .providers
        .values()
        .flat_map(|p| p.types.values())
        .filter(|t| t.forward.is_some())
        .map(|t| ForwardType {
            provider: t.provider.clone(),
            event_type: t.name.clone(),
        })
        .collect()
}

/// The forward of a provider's type, when it has one.
fn forward_of<'a>(contract: &'a Contract, f: &ForwardRecord) -> Option<&'a Forward> {
    contract
        .event_type(&f.provider, f.event_type.as_deref()?)?
        .forward
        .as_ref()
}

/// The forwarder's HTTP client (the system's roots plus the upkeep's CA file).
pub(crate) fn client(ca: &[reqwest::Certificate]) -> Result<reqwest::Client, TrustError> {
    // Each attempt sets its own timeout; this one only bounds a request that set none.
    trust::client(Duration::from_secs(600), ca)
}

impl Gate {
    /// Enqueues the forward of an effect a `process` decision reserved for a forward type,
    /// and wakes the forwarder. The caller's answer waits for it: a forward is durable before
    /// the provider hears 200.
    pub(crate) async fn enqueue_forward(
        &self,
        forward: NewForward,
    ) -> Result<(), oncegate_store::StoreError> {
        self.store().forward_enqueue(&forward).await?;
        self.forward_wake().notify_one();
        Ok(())
    }
}

/// The forwarder's loop, until the upkeep is dropped.
pub(crate) async fn run_forever(gate: Gate, settings: ForwarderSettings, http: reqwest::Client) {
    let Some(poll) = settings.poll else { return };
    let types = forward_types(gate.contract());
    if types.is_empty() {
        return;
    }
    let limit = Arc::new(tokio::sync::Semaphore::new(settings.concurrency.max(1)));
    // The effects with an attempt in flight here, so one pass never sends one twice.
    let busy: Arc<std::sync::Mutex<BTreeSet<String>>> = Arc::default();
    // The attempts in flight belong to this task: when the upkeep stops, they stop with it,
    // as they would with the process (their rows then read as interrupted).
    let mut inflight = tokio::task::JoinSet::new();
    loop {
        while inflight.try_join_next().is_some() {}
        let worked = pass(&gate, &types, &http, &limit, &busy, &mut inflight).await;
        let wait = match gate.store().forward_next_due().await {
            Ok(Some(at)) => {
                let until = at - gate.now();
                if until.is_positive() {
                    Duration::try_from(until).unwrap_or(poll).min(poll)
                } else if worked {
                    // What this pass started may have left more due at once.
                    Duration::ZERO
                } else {
                    // Due, yet nothing could be started: an attempt of this instance still in
                    // flight (its end wakes the loop) or a type that left the contract. Wait
                    // for a wake-up or the poll rather than spin.
                    poll
                }
            }
            _ => poll,
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = gate.forward_wake().notified() => {}
        }
    }
}

/// One look at the store: claims released work, then starts every due attempt. True when it
/// started or settled anything.
async fn pass(
    gate: &Gate,
    types: &[ForwardType],
    http: &reqwest::Client,
    limit: &Arc<tokio::sync::Semaphore>,
    busy: &Arc<std::sync::Mutex<BTreeSet<String>>>,
    inflight: &mut tokio::task::JoinSet<()>,
) -> bool {
    let store = gate.store();
    let mut worked = false;
    // Released effects of forward types become this forwarder's, one claim at a time.
    for _ in 0..64 {
        match store
            .forward_claim(types, gate.lease_time(), gate.now())
            .await
        {
            Ok(Some(f)) => {
                tracing::info!(effect_id = %f.effect, series = f.series, "released work claimed for forwarding");
                worked = true;
            }
            Ok(None) => break,
            Err(e) => {
                tracing::debug!(error = %e, "forward claim skipped");
                break;
            }
        }
    }
    let due = match store.forwards_due(gate.now(), 256).await {
        Ok(due) => due,
        Err(e) => {
            tracing::debug!(error = %e, "forwards skipped");
            return worked;
        }
    };
    for f in due {
        match f.state {
            ForwardState::Sending => {
                if busy.lock().expect("busy lock").contains(f.effect.as_str()) {
                    continue;
                }
                worked |= interrupted(gate, &f).await;
            }
            ForwardState::Pending => {
                // A type whose forward left the contract cannot be sent: it stays pending
                // (visible in the listing) and is not counted as work, so it never spins.
                if forward_of(gate.contract(), &f).is_none() {
                    tracing::debug!(effect_id = %f.effect, provider = %f.provider, "a pending forward's type has no forward in the contract");
                    continue;
                }
                if !busy
                    .lock()
                    .expect("busy lock")
                    .insert(f.effect.as_str().to_owned())
                {
                    continue;
                }
                let Ok(permit) = limit.clone().acquire_owned().await else {
                    return worked;
                };
                worked = true;
                let (gate, http, busy) = (gate.clone(), http.clone(), busy.clone());
                inflight.spawn(async move {
                    let effect = f.effect.as_str().to_owned();
                    attempt(&gate, &http, f).await;
                    busy.lock().expect("busy lock").remove(&effect);
                    drop(permit);
                    // What this attempt left due (a retry, a claim) is looked at again.
                    gate.forward_wake().notify_one();
                });
            }
            _ => {}
        }
    }
    worked
}

/// An attempt found in flight past its deadline: its sender stopped before recording the
/// answer, so nobody knows whether the consumer acted. The effect's lease ended with it; the
/// sweep turns it into a verification (critical) or a release (reversible) now.
async fn interrupted(gate: &Gate, f: &ForwardRecord) -> bool {
    let now = gate.now();
    match gate
        .store()
        .forward_interrupt(&f.effect, f.fencing_token, now)
        .await
    {
        Ok(true) => {
            tracing::warn!(effect_id = %f.effect, delivery_id = %f.delivery, "a forward attempt was cut before its answer: its outcome is unknown");
            gate.metrics().forward.attempt(f, "unknown", None);
            if let Ok(moved) = gate.store().expire_leases(now).await {
                if !moved.is_empty() {
                    gate.wake().notify_one();
                }
            }
            true
        }
        Ok(false) => false,
        Err(e) => {
            tracing::debug!(error = %e, "interrupted forward skipped");
            false
        }
    }
}

/// One attempt of one due forward: started in the store (or not, when another instance was
/// first), sent, and its end recorded under the token it was sent with.
async fn attempt(gate: &Gate, http: &reqwest::Client, f: ForwardRecord) {
    let contract = gate.contract().clone();
    let Some(forward) = forward_of(&contract, &f) else {
        tracing::warn!(effect_id = %f.effect, provider = %f.provider, "a pending forward's type has no forward in the contract any more: left pending");
        return;
    };
    let store = gate.store();
    let started_at = gate.now();
    // The lease covers the attempt and the time to record its answer.
    let deadline = started_at + to_time(forward.timeout) + gate.lease_time();
    let started = match store
        .forward_start(&f.effect, f.fencing_token, started_at, deadline)
        .await
    {
        Ok(Some(s)) => s,
        Ok(None) => return,
        Err(e) => {
            tracing::debug!(error = %e, effect_id = %f.effect, "forward not started");
            return;
        }
    };
    let clock = Instant::now();
    let sent = match store.delivery(&started.delivery).await {
        Ok(Some(d)) => match d.payload {
            Some(body) => {
                send(
                    http,
                    forward,
                    &f,
                    &started.delivery.to_string(),
                    &d.headers_json,
                    body,
                )
                .await
            }
            None => Sent::Failed {
                status: None,
                error: "the delivery's body is no longer in the journal (retention): nothing to forward".to_owned(),
            },
        },
        Ok(None) => Sent::Failed {
            status: None,
            error: format!("the delivery {} is not in the journal", started.delivery),
        },
        Err(e) => Sent::Failed {
            status: None,
            error: format!("the journal could not be read: {e}"),
        },
    };
    let latency = clock.elapsed();
    let ended_at = gate.now();
    let (status, error, next) = match sent {
        Sent::Delivered { status, result } => {
            (Some(status), None, ForwardNext::Delivered { result })
        }
        Sent::Failed { status, error } if started.attempt >= u64::from(forward.max_attempts) => {
            let dead = format!(
                "forward dead after {} attempt{}: {error}",
                started.attempt,
                if started.attempt == 1 { "" } else { "s" }
            );
            (status, Some(error), ForwardNext::Dead { error: dead })
        }
        Sent::Failed { status, error } => {
            let pause = backoff(&f, started.attempt, forward);
            let due_at = ended_at + to_time(pause);
            let lease_until = due_at + to_time(forward.timeout) + gate.lease_time();
            (
                status,
                Some(error),
                ForwardNext::Retry {
                    due_at,
                    lease_until,
                },
            )
        }
    };
    let end = ForwardEnd {
        ended_at,
        status,
        latency: to_time(latency),
        error: error.clone(),
        next,
    };
    match store
        .forward_finish(
            &f.effect,
            f.fencing_token,
            started.series,
            started.attempt,
            &end,
        )
        .await
    {
        Ok(state) => {
            let outcome = match state {
                ForwardState::Delivered => "delivered",
                ForwardState::Pending => "retry",
                ForwardState::Dead => "dead",
                _ => "stale",
            };
            gate.metrics().forward.attempt(&f, outcome, Some(latency));
            tracing::info!(
                effect_id = %f.effect,
                delivery_id = %started.delivery,
                series = started.series,
                attempt = started.attempt,
                status = status.map(i64::from).unwrap_or(-1),
                latency_ms = latency.as_millis() as u64,
                error = error.as_deref().unwrap_or(""),
                outcome,
                "forward attempt"
            );
        }
        // The row stays `sending` until its deadline, then reads as interrupted: never lost,
        // never re-sent blindly.
        Err(e) => {
            tracing::warn!(error = %e, effect_id = %f.effect, "a forward attempt's end could not be recorded")
        }
    }
}

/// The pause after attempt `attempt` failed: the policy's first pause doubled per attempt, up
/// to its longest, with a jitter of up to half of it (derived from the effect, so effects
/// failing together spread out).
fn backoff(f: &ForwardRecord, attempt: u64, forward: &Forward) -> Duration {
    use std::hash::{Hash, Hasher};
    let exp = u32::try_from(attempt.saturating_sub(1))
        .unwrap_or(u32::MAX)
        .min(30);
    let full = forward
        .backoff_first
        .saturating_mul(1u32 << exp.min(31))
        .min(forward.backoff_max);
    let mut h = std::collections::hash_map::DefaultHasher::new();
    f.effect.as_str().hash(&mut h);
    f.series.hash(&mut h);
    attempt.hash(&mut h);
    let frac = (h.finish() % 1000) as u32;
    (full / 2 + (full / 2) * frac / 1000).max(forward.backoff_first.min(full))
}
