//! One forward's attempts: the conditional start under the effect's token (with the lease that
//! covers the attempt), the recorded end (completed, retried later, dead letter, or a stale
//! answer that changes nothing), the interruption of an attempt cut by a stop, the re-send of
//! a dead letter, and the attempt log the proof reads.

use oncegate_core::ids::{DeliveryId, EffectId};
use time::{Duration, OffsetDateTime};

use super::{read, ForwardRecord, ForwardState, Result};
use crate::codes::{duration_ms, from_ms, ms};
use crate::effect;
use crate::error::StoreError;
use crate::plan;
use crate::sql::{int, opt_int, opt_text, text, Tx};

/// An attempt just started: what the sender needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardStart {
    /// Which attempt series (1 for the first; each re-send or takeover starts the next).
    pub series: u64,
    /// The attempt number within its series, from 1.
    pub attempt: u64,
    /// The delivery whose journaled body is sent.
    pub delivery: DeliveryId,
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForwardNext {
    /// A 2xx: the effect completes with this result (JSON text).
    Delivered {
        /// The destination's answer body as the effect's result.
        result: String,
    },
    /// Retry at `due_at`; the effect's lease is extended to `lease_until` to cover the wait.
    Retry {
        /// When the next attempt is due.
        due_at: OffsetDateTime,
        /// The effect's lease, covering the wait.
        lease_until: OffsetDateTime,
    },
    /// No attempt left: the effect fails for good with `error` and the forward is a dead
    /// letter.
    Dead {
        /// The effect's permanent failure.
        error: String,
    },
}

/// What one ended attempt records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardEnd {
    /// When it ended (`None` while in flight).
    pub ended_at: OffsetDateTime,
    /// The HTTP status, when one came back.
    pub status: Option<u16>,
    /// How long the destination took to answer (or to time out).
    pub latency: Duration,
    /// Why it failed (a status, a timeout, a refused connection), when it did.
    pub error: Option<String>,
    /// What follows.
    pub next: ForwardNext,
}

/// One attempt of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardAttempt {
    /// The effect forwarded.
    pub effect: EffectId,
    /// Which attempt series (1 for the first; each re-send or takeover starts the next).
    pub series: u64,
    /// The attempt number within its series, from 1.
    pub attempt: u64,
    /// The delivery whose journaled body is sent.
    pub delivery: DeliveryId,
    /// The effect's fencing token the attempts are sent under.
    pub fencing_token: u64,
    /// When it started.
    pub started_at: OffsetDateTime,
    /// When it ended (`None` while in flight).
    pub ended_at: Option<OffsetDateTime>,
    /// The HTTP status, when one came back.
    pub status: Option<u16>,
    /// How long it took, in milliseconds.
    pub latency_ms: Option<u64>,
    /// `delivered`, `retry`, `dead`, `unknown` (cut by a crash), `stale` (the effect had moved
    /// on when the answer came); `None` while in flight.
    pub outcome: Option<String>,
    /// Why it failed, when it did.
    pub error: Option<String>,
}

/// A pending forward's start, found by primary key alone (see `sql`).
pub(crate) const START: &str = "UPDATE forwards SET state = 'sending', attempts = attempts + 1, deadline = $3, updated_at = $4 \
     WHERE effect_id = $1 AND fencing_token = $2 \
     AND (CASE WHEN state = 'pending' AND due_at <= $4 THEN TRUE ELSE FALSE END) \
     RETURNING series, attempts, delivery_id";

/// Starts the next attempt of a due, pending forward held under `token`, and extends the
/// effect's lease to `deadline` in the same transaction. `None` when the row is not (or no
/// longer) due and pending under that token: another instance started it, or it moved on. When
/// the effect itself has moved on (a newer token, or no longer reserved), the forward is marked
/// `superseded` and `None` comes back.
pub(crate) async fn start<T: Tx + Send>(
    tx: &mut T,
    effect: &EffectId,
    token: u64,
    now: OffsetDateTime,
    deadline: OffsetDateTime,
) -> Result<Option<ForwardStart>> {
    let now_ms = ms(now);
    let rows = tx
        .query(
            START,
            &[
                text(effect.as_str()),
                int(token as i64),
                int(ms(deadline)),
                int(now_ms),
            ],
        )
        .await?;
    let Some(row) = rows.first() else {
        return Ok(None);
    };
    let series = row.int(0)?;
    let attempt = row.int(1)?;
    let delivery = row.text(2)?;
    let lease = deadline - now;
    if let Err(e) = effect::heartbeat(tx, effect, token, lease, now).await {
        match e {
            StoreError::StaleToken { .. } | StoreError::LeaseLost { .. } => {
                tx.exec(
                    "UPDATE forwards SET state = 'superseded', deadline = NULL, last_error = $3, updated_at = $4 \
                     WHERE effect_id = $1 AND fencing_token = $2",
                    &[
                        text(effect.as_str()),
                        int(token as i64),
                        text(e.to_string()),
                        int(now_ms),
                    ],
                )
                .await?;
                return Ok(None);
            }
            other => return Err(other),
        }
    }
    tx.exec(
        "INSERT INTO forward_attempts (effect_id, series, attempt, delivery_id, fencing_token, started_at) \
         VALUES ($1, $2, $3, $4, $5, $6)",
        &[
            text(effect.as_str()),
            int(series),
            int(attempt),
            text(delivery.as_str()),
            int(token as i64),
            int(now_ms),
        ],
    )
    .await?;
    Ok(Some(ForwardStart {
        series: series as u64,
        attempt: attempt as u64,
        delivery: plan::parse_delivery_id(&delivery)?,
    }))
}

/// A sending forward's end, found by primary key alone (see `sql`).
pub(crate) const FINISH: &str = "UPDATE forwards SET state = $4, due_at = COALESCE($5, due_at), deadline = NULL, last_status = $6, \
     last_error = $7, updated_at = $8 \
     WHERE effect_id = $1 AND fencing_token = $2 AND series = $3 \
     AND (CASE WHEN state = 'sending' THEN TRUE ELSE FALSE END)";

/// Records how an attempt ended and what follows, under the token it was sent with: the
/// effect completed (a 2xx), its lease extended over the wait for the next attempt, or failed
/// for good (a dead letter). An answer arriving after the effect moved on is logged as
/// `stale` and changes nothing else. Returns the forward's state after it.
pub(crate) async fn finish<T: Tx + Send>(
    tx: &mut T,
    effect: &EffectId,
    token: u64,
    series: u64,
    attempt: u64,
    end: &ForwardEnd,
) -> Result<ForwardState> {
    let now = end.ended_at;
    let now_ms = ms(now);
    let held = match &end.next {
        ForwardNext::Delivered { result } => effect::complete(tx, effect, token, result, now).await,
        ForwardNext::Retry { lease_until, .. } => {
            effect::heartbeat(tx, effect, token, *lease_until - now, now)
                .await
                .map(drop)
        }
        ForwardNext::Dead { error } => effect::fail(tx, effect, token, false, error, now).await,
    };
    let (outcome, state, due, error) = match (&held, &end.next) {
        (Err(StoreError::StaleToken { .. } | StoreError::LeaseLost { .. }), _) => (
            "stale",
            ForwardState::Superseded,
            None,
            held.as_ref().err().map(ToString::to_string),
        ),
        (Err(_), _) => return Err(held.expect_err("an error")),
        (Ok(()), ForwardNext::Delivered { .. }) => (
            "delivered",
            ForwardState::Delivered,
            None,
            end.error.clone(),
        ),
        (Ok(()), ForwardNext::Retry { due_at, .. }) => (
            "retry",
            ForwardState::Pending,
            Some(*due_at),
            end.error.clone(),
        ),
        (Ok(()), ForwardNext::Dead { .. }) => ("dead", ForwardState::Dead, None, end.error.clone()),
    };
    tx.exec(
        "UPDATE forward_attempts SET ended_at = $4, status = $5, latency_ms = $6, outcome = $7, error = $8 \
         WHERE effect_id = $1 AND series = $2 AND attempt = $3",
        &[
            text(effect.as_str()),
            int(series as i64),
            int(attempt as i64),
            int(now_ms),
            opt_int(end.status.map(i64::from)),
            int(duration_ms(end.latency)),
            text(outcome),
            opt_text(error.as_deref()),
        ],
    )
    .await?;
    let due_ms = due.map(ms);
    tx.exec(
        FINISH,
        &[
            text(effect.as_str()),
            int(token as i64),
            int(series as i64),
            text(state.as_str()),
            opt_int(due_ms),
            opt_int(end.status.map(i64::from)),
            opt_text(error.as_deref()),
            int(now_ms),
        ],
    )
    .await?;
    Ok(state)
}

/// The reason an interrupted attempt carries.
pub const INTERRUPTED: &str = "the attempt was cut before its answer was recorded: its outcome is unknown, so it is never re-sent blindly";

/// A sending forward past its deadline marked interrupted, found by primary key alone (see `sql`).
pub(crate) const INTERRUPT: &str =
    "UPDATE forwards SET state = 'interrupted', last_error = $4, updated_at = $3 \
     WHERE effect_id = $1 AND fencing_token = $2 \
     AND (CASE WHEN state = 'sending' AND deadline <= $3 THEN TRUE ELSE FALSE END) \
     RETURNING series, attempts";

/// Marks an attempt in flight past its deadline (its sender stopped) as `interrupted`, its
/// log entry `unknown`. The effect's lease ended at the same deadline, so the lease sweep
/// hands it on: a critical effect to verification, a reversible one released for the
/// forwarder to claim and send again. False when the row was no longer so.
pub(crate) async fn interrupt<T: Tx + Send>(
    tx: &mut T,
    effect: &EffectId,
    token: u64,
    now: OffsetDateTime,
) -> Result<bool> {
    let now_ms = ms(now);
    let rows = tx
        .query(
            INTERRUPT,
            &[
                text(effect.as_str()),
                int(token as i64),
                int(now_ms),
                text(INTERRUPTED),
            ],
        )
        .await?;
    let Some(row) = rows.first() else {
        return Ok(false);
    };
    tx.exec(
        "UPDATE forward_attempts SET outcome = 'unknown', error = $4 \
         WHERE effect_id = $1 AND series = $2 AND attempt = $3 AND ended_at IS NULL",
        &[
            text(effect.as_str()),
            int(row.int(0)?),
            int(row.int(1)?),
            text(INTERRUPTED),
        ],
    )
    .await?;
    Ok(true)
}

/// A dead forward sent again, found by primary key alone (see `sql`).
pub(crate) const RESEND: &str = "UPDATE forwards SET fencing_token = $2, series = series + 1, attempts = 0, state = 'pending', due_at = $3, \
     deadline = NULL, updated_at = $3 WHERE effect_id = $1 \
     AND (CASE WHEN state = 'dead' THEN TRUE ELSE FALSE END)";

/// Re-sends a dead letter: the effect, failed for good by its last attempt, is reserved again
/// under the next fencing token with a lease of `lease`, and the forward starts a fresh
/// series due now. `NotFound` without a forward, `Conflict` when it is not dead.
pub(crate) async fn resend<T: Tx + Send>(
    tx: &mut T,
    effect: &EffectId,
    lease: Duration,
    now: OffsetDateTime,
) -> Result<ForwardRecord> {
    let Some(current) = read(tx, effect).await? else {
        return Err(StoreError::NotFound {
            what: "forward",
            id: effect.to_string(),
        });
    };
    if current.state != ForwardState::Dead {
        return Err(StoreError::Conflict(format!(
            "the forward of {effect} is {}, not dead: only a dead letter is re-sent",
            current.state.as_str()
        )));
    }
    let now_ms = ms(now);
    let until = now_ms.saturating_add(duration_ms(lease));
    let rows = tx
        .query(
            "UPDATE effects SET state = 'reserved', fencing_token = fencing_token + 1, lease_until = $3, \
             holder = 'forwarder', error = NULL, updated_at = $2 \
             WHERE id = $1 AND state = 'failed' RETURNING fencing_token",
            &[text(effect.as_str()), int(now_ms), int(until)],
        )
        .await?;
    let Some(row) = rows.first() else {
        return Err(StoreError::Conflict(format!(
            "the effect {effect} is no longer failed: it was settled another way"
        )));
    };
    let token = row.int(0)?;
    tx.exec(RESEND, &[text(effect.as_str()), int(token), int(now_ms)])
        .await?;
    read(tx, effect).await?.ok_or_else(|| StoreError::NotFound {
        what: "forward",
        id: effect.to_string(),
    })
}

/// Every attempt of one effect's forwards, in order.
pub(crate) async fn attempts<T: Tx + Send>(
    tx: &mut T,
    effect: &EffectId,
) -> Result<Vec<ForwardAttempt>> {
    let rows = tx
        .query(
            "SELECT effect_id, series, attempt, delivery_id, fencing_token, started_at, ended_at, status, latency_ms, \
             outcome, error FROM forward_attempts WHERE effect_id = $1 ORDER BY series, attempt",
            &[text(effect.as_str())],
        )
        .await?;
    rows.iter()
        .map(|r| {
            Ok(ForwardAttempt {
                effect: plan::parse_effect_id(&r.text(0)?)?,
                series: r.int(1)? as u64,
                attempt: r.int(2)? as u64,
                delivery: plan::parse_delivery_id(&r.text(3)?)?,
                fencing_token: r.int(4)? as u64,
                started_at: from_ms(r.int(5)?)?,
                ended_at: r.opt_int(6)?.map(from_ms).transpose()?,
                status: r.opt_int(7)?.map(|s| s as u16),
                latency_ms: r.opt_int(8)?.map(|l| l.max(0) as u64),
                outcome: r.opt_text(9)?,
                error: r.opt_text(10)?,
            })
        })
        .collect()
}
