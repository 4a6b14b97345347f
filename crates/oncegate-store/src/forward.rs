//! Pending forwards (gateway mode, schema v6): the effects oncegate itself delivers to the
//! consumer's endpoint, each with its attempt series, and the log of every attempt (the
//! proof's account of what was sent, when, and what came back).
//!
//! A forward is `pending` (due at a time), `sending` (one attempt in flight, until its
//! deadline), `delivered`, `dead` (its attempts ran out; re-sendable), `interrupted` (an
//! attempt was cut before its answer was recorded: the outcome is unknown, and the effect's
//! lease, ending at that same deadline, hands it to the unknown-outcome path) or `superseded`
//! (the effect moved to another holder). Starting an attempt is one conditional update of a
//! due, pending row under the effect's current fencing token, in the same transaction as the
//! lease that covers it: two instances never send one effect at once, and an answer recorded
//! under an older token is refused like any stale holder's.

use oncegate_core::ids::{DeliveryId, EffectId};
use time::{Duration, OffsetDateTime};

use crate::codes::{duration_ms, from_ms, ms};
use crate::delivery::TenantFilter;
use crate::effect::{self, LinkKind};
use crate::error::StoreError;
use crate::plan;
use crate::sql::{int, opt_int, opt_text, text, Query, Row, Tx};

type Result<T> = std::result::Result<T, StoreError>;

/// Schema v6: the forwards and their attempts.
pub(crate) const SCHEMA_V6: &str = r#"
CREATE TABLE IF NOT EXISTS forwards (
    effect_id TEXT PRIMARY KEY,
    delivery_id TEXT NOT NULL,
    tenant TEXT NOT NULL,
    provider TEXT NOT NULL,
    env TEXT NOT NULL,
    event_type TEXT,
    fencing_token BIGINT NOT NULL,
    series BIGINT NOT NULL,
    attempts BIGINT NOT NULL,
    state TEXT NOT NULL,
    due_at BIGINT NOT NULL,
    deadline BIGINT,
    last_status BIGINT,
    last_error TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS forwards_due ON forwards (due_at) WHERE state = 'pending';
CREATE INDEX IF NOT EXISTS forwards_sending ON forwards (deadline) WHERE state = 'sending';
CREATE INDEX IF NOT EXISTS forwards_state ON forwards (state, updated_at);
CREATE TABLE IF NOT EXISTS forward_attempts (
    effect_id TEXT NOT NULL,
    series BIGINT NOT NULL,
    attempt BIGINT NOT NULL,
    delivery_id TEXT NOT NULL,
    fencing_token BIGINT NOT NULL,
    started_at BIGINT NOT NULL,
    ended_at BIGINT,
    status BIGINT,
    latency_ms BIGINT,
    outcome TEXT,
    error TEXT,
    PRIMARY KEY (effect_id, series, attempt)
);
"#;

/// Where a forward stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ForwardState {
    /// Waiting until its due time for its next attempt.
    Pending,
    /// One attempt in flight, until its deadline.
    Sending,
    /// A 2xx answer completed the effect.
    Delivered,
    /// Every attempt failed: a dead letter, re-sendable.
    Dead,
    /// An attempt was cut before its answer was recorded: its outcome is unknown.
    Interrupted,
    /// The effect moved to another holder (a newer token): this series ended.
    Superseded,
}

impl ForwardState {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            ForwardState::Pending => "pending",
            ForwardState::Sending => "sending",
            ForwardState::Delivered => "delivered",
            ForwardState::Dead => "dead",
            ForwardState::Interrupted => "interrupted",
            ForwardState::Superseded => "superseded",
        }
    }

    /// The state a stored name stands for.
    pub fn parse(s: &str) -> Option<ForwardState> {
        [
            ForwardState::Pending,
            ForwardState::Sending,
            ForwardState::Delivered,
            ForwardState::Dead,
            ForwardState::Interrupted,
            ForwardState::Superseded,
        ]
        .into_iter()
        .find(|f| f.as_str() == s)
    }
}

/// A forward to enqueue: an effect held under `fencing_token`, to be delivered from the
/// journaled body of `delivery`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewForward {
    pub effect: EffectId,
    pub fencing_token: u64,
    pub delivery: DeliveryId,
    pub tenant: String,
    pub provider: String,
    pub env: String,
    pub event_type: Option<String>,
    /// When its first attempt is due.
    pub due_at: OffsetDateTime,
}

/// A forward read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardRecord {
    pub effect: EffectId,
    pub delivery: DeliveryId,
    pub tenant: String,
    pub provider: String,
    pub env: String,
    pub event_type: Option<String>,
    /// The effect's fencing token this series sends under.
    pub fencing_token: u64,
    /// Which attempt series (1 for the first; each re-send or takeover starts the next).
    pub series: u64,
    /// Attempts started in this series.
    pub attempts: u64,
    pub state: ForwardState,
    pub due_at: OffsetDateTime,
    /// While `sending`: when the attempt's lease ends.
    pub deadline: Option<OffsetDateTime>,
    /// The last attempt's HTTP status, when it got one.
    pub last_status: Option<u16>,
    pub last_error: Option<String>,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

/// An attempt just started: what the sender needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardStart {
    pub series: u64,
    pub attempt: u64,
    pub delivery: DeliveryId,
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForwardNext {
    /// A 2xx: the effect completes with this result (JSON text).
    Delivered { result: String },
    /// Retry at `due_at`; the effect's lease is extended to `lease_until` to cover the wait.
    Retry {
        due_at: OffsetDateTime,
        lease_until: OffsetDateTime,
    },
    /// No attempt left: the effect fails for good with `error` and the forward is a dead
    /// letter.
    Dead { error: String },
}

/// What one ended attempt records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardEnd {
    pub ended_at: OffsetDateTime,
    /// The HTTP status, when one came back.
    pub status: Option<u16>,
    pub latency: Duration,
    /// Why it failed (a status, a timeout, a refused connection), when it did.
    pub error: Option<String>,
    pub next: ForwardNext,
}

/// One attempt of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardAttempt {
    pub effect: EffectId,
    pub series: u64,
    pub attempt: u64,
    pub delivery: DeliveryId,
    pub fencing_token: u64,
    pub started_at: OffsetDateTime,
    pub ended_at: Option<OffsetDateTime>,
    pub status: Option<u16>,
    pub latency_ms: Option<u64>,
    /// `delivered`, `retry`, `dead`, `unknown` (cut by a crash), `stale` (the effect had moved
    /// on when the answer came); `None` while in flight.
    pub outcome: Option<String>,
    pub error: Option<String>,
}

/// How many forwards stand in each state that still needs attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ForwardCounts {
    pub pending: u64,
    pub sending: u64,
    pub dead: u64,
}

/// Which forwards a listing shows.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ForwardFilter {
    pub tenants: TenantFilter,
    pub state: Option<ForwardState>,
    pub limit: u32,
}

/// A forward type: released effects of these (provider, event type) pairs are the
/// forwarder's to claim.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ForwardType {
    pub provider: String,
    pub event_type: String,
}

const COLS: &str =
    "effect_id, delivery_id, tenant, provider, env, event_type, fencing_token, series, attempts, \
     state, due_at, deadline, last_status, last_error, created_at, updated_at";

fn record_from(r: &Row) -> Result<ForwardRecord> {
    let state = r.text(9)?;
    Ok(ForwardRecord {
        effect: plan::parse_effect_id(&r.text(0)?)?,
        delivery: plan::parse_delivery_id(&r.text(1)?)?,
        tenant: r.text(2)?,
        provider: r.text(3)?,
        env: r.text(4)?,
        event_type: r.opt_text(5)?,
        fencing_token: r.int(6)? as u64,
        series: r.int(7)? as u64,
        attempts: r.int(8)? as u64,
        state: ForwardState::parse(&state)
            .ok_or_else(|| StoreError::corrupt(format!("unknown forward state {state:?}")))?,
        due_at: from_ms(r.int(10)?)?,
        deadline: r.opt_int(11)?.map(from_ms).transpose()?,
        last_status: r.opt_int(12)?.map(|s| s as u16),
        last_error: r.opt_text(13)?,
        created_at: from_ms(r.int(14)?)?,
        updated_at: from_ms(r.int(15)?)?,
    })
}

/// Enqueues a forward, or starts a new series on an existing one when `f` holds a newer
/// token (a takeover, a claim of the released effect). False when the row already carries
/// this token or a newer one.
pub(crate) async fn enqueue<T: Tx + Send>(tx: &mut T, f: &NewForward) -> Result<bool> {
    let now = ms(f.due_at);
    let changed = tx
        .exec(
            "INSERT INTO forwards (effect_id, delivery_id, tenant, provider, env, event_type, fencing_token, series, \
             attempts, state, due_at, deadline, last_status, last_error, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, 1, 0, 'pending', $8, NULL, NULL, NULL, $8, $8) \
             ON CONFLICT (effect_id) DO UPDATE SET delivery_id = excluded.delivery_id, \
             fencing_token = excluded.fencing_token, series = forwards.series + 1, attempts = 0, state = 'pending', \
             due_at = excluded.due_at, deadline = NULL, updated_at = excluded.updated_at \
             WHERE forwards.fencing_token < excluded.fencing_token",
            &[
                text(f.effect.as_str()),
                text(f.delivery.as_str()),
                text(f.tenant.as_str()),
                text(f.provider.as_str()),
                text(f.env.as_str()),
                opt_text(f.event_type.as_deref()),
                int(f.fencing_token as i64),
                int(now),
            ],
        )
        .await?;
    Ok(changed > 0)
}

/// The forward of one effect.
pub(crate) async fn read<T: Tx + Send>(
    tx: &mut T,
    effect: &EffectId,
) -> Result<Option<ForwardRecord>> {
    let sql = format!("SELECT {COLS} FROM forwards WHERE effect_id = $1");
    let rows = tx.query(&sql, &[text(effect.as_str())]).await?;
    rows.first().map(record_from).transpose()
}

/// Forwards matching the filter, most recently changed first.
pub(crate) async fn list<T: Tx + Send>(
    tx: &mut T,
    filter: &ForwardFilter,
) -> Result<Vec<ForwardRecord>> {
    let mut q = Query::new(&format!("SELECT {COLS} FROM forwards WHERE 1 = 1"));
    q.tenants("tenant", &filter.tenants);
    if let Some(state) = filter.state {
        let p = q.bind(text(state.as_str()));
        q.push(&format!(" AND state = {p}"));
    }
    let limit = q.bind(int(i64::from(filter.limit.clamp(1, 1000))));
    q.push(&format!(
        " ORDER BY updated_at DESC, effect_id LIMIT {limit}"
    ));
    tx.query(&q.sql, &q.params)
        .await?
        .iter()
        .map(record_from)
        .collect()
}

/// What the forwarder has to look at by `now`: pending forwards that are due, and attempts in
/// flight past their deadline (cut by a crash), earliest first.
pub(crate) async fn due<T: Tx + Send>(
    tx: &mut T,
    now: OffsetDateTime,
    limit: u32,
) -> Result<Vec<ForwardRecord>> {
    let sql = format!(
        "SELECT {COLS} FROM forwards WHERE (state = 'pending' AND due_at <= $1) OR (state = 'sending' AND deadline <= $1) \
         ORDER BY due_at, effect_id LIMIT $2"
    );
    tx.query(&sql, &[int(ms(now)), int(i64::from(limit.max(1)))])
        .await?
        .iter()
        .map(record_from)
        .collect()
}

/// When the next pending forward falls due or the next attempt in flight reaches its deadline.
pub(crate) async fn next_due<T: Tx + Send>(tx: &mut T) -> Result<Option<OffsetDateTime>> {
    let rows = tx
        .query(
            "SELECT MIN(t) FROM (SELECT MIN(due_at) AS t FROM forwards WHERE state = 'pending' \
             UNION ALL SELECT MIN(deadline) AS t FROM forwards WHERE state = 'sending') AS due",
            &[],
        )
        .await?;
    rows.first()
        .and_then(|r| r.opt_int(0).transpose())
        .transpose()?
        .map(from_ms)
        .transpose()
}

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
            "UPDATE forwards SET state = 'sending', attempts = attempts + 1, deadline = $3, updated_at = $4 \
             WHERE effect_id = $1 AND fencing_token = $2 AND state = 'pending' AND due_at <= $4 \
             RETURNING series, attempts, delivery_id",
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
        "UPDATE forwards SET state = $4, due_at = COALESCE($5, due_at), deadline = NULL, last_status = $6, \
         last_error = $7, updated_at = $8 \
         WHERE effect_id = $1 AND fencing_token = $2 AND series = $3 AND state = 'sending'",
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
            "UPDATE forwards SET state = 'interrupted', last_error = $4, updated_at = $3 \
             WHERE effect_id = $1 AND fencing_token = $2 AND state = 'sending' AND deadline <= $3 \
             RETURNING series, attempts",
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
    tx.exec(
        "UPDATE forwards SET fencing_token = $2, series = series + 1, attempts = 0, state = 'pending', due_at = $3, \
         deadline = NULL, updated_at = $3 WHERE effect_id = $1 AND state = 'dead'",
        &[text(effect.as_str()), int(token), int(now_ms)],
    )
    .await?;
    read(tx, effect).await?.ok_or_else(|| StoreError::NotFound {
        what: "forward",
        id: effect.to_string(),
    })
}

/// Claims the oldest released effect of a forward type for the forwarder (the next fencing
/// token, a lease of `lease`) and enqueues its forward due now, in one transaction; `None`
/// when there is none. Released effects come from a verifier or a person (a distinct
/// operation, an unknown outcome found not applied) or from a reversible lease that expired.
pub(crate) async fn claim<T: Tx + Send>(
    tx: &mut T,
    types: &[ForwardType],
    lease: Duration,
    now: OffsetDateTime,
) -> Result<Option<ForwardRecord>> {
    if types.is_empty() {
        return Ok(None);
    }
    let now_ms = ms(now);
    let until = now_ms.saturating_add(duration_ms(lease));
    for _ in 0..plan::MAX_ATTEMPTS {
        let mut q = Query::new("SELECT e.id FROM effects e WHERE e.state = 'released' AND (");
        for (i, t) in types.iter().enumerate() {
            let p = q.bind(text(t.provider.as_str()));
            let e = q.bind(text(t.event_type.as_str()));
            if i > 0 {
                q.push(" OR ");
            }
            q.push(&format!("(e.provider = {p} AND e.event_type = {e})"));
        }
        q.push(") ORDER BY e.created_at, e.id LIMIT 1");
        q.push(tx.dialect().skip_locked());
        let rows = tx.query(&q.sql, &q.params).await?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let id = row.text(0)?;
        let rows = tx
            .query(
                "UPDATE effects SET state = 'reserved', fencing_token = fencing_token + 1, lease_until = $2, \
                 holder = 'forwarder', updated_at = $3 WHERE id = $1 AND state = 'released' \
                 RETURNING fencing_token, first_delivery, tenant, provider, env, event_type",
                &[text(id.as_str()), int(until), int(now_ms)],
            )
            .await?;
        let Some(r) = rows.first() else { continue };
        let effect_id = plan::parse_effect_id(&id)?;
        let delivery = plan::parse_delivery_id(&r.text(1)?)?;
        let (sql, params) = effect::link(&effect_id, &delivery, LinkKind::Claimed, now_ms);
        tx.exec(sql, &params).await?;
        let new = NewForward {
            effect: effect_id.clone(),
            fencing_token: r.int(0)? as u64,
            delivery,
            tenant: r.text(2)?,
            provider: r.text(3)?,
            env: r.text(4)?,
            event_type: r.opt_text(5)?,
            due_at: now,
        };
        enqueue(tx, &new).await?;
        return read(tx, &effect_id).await;
    }
    Ok(None)
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

/// The forwards of the tenants `tenants` admits still needing attention, by state (the
/// backlog gauge, the dead letters beside the queue).
pub(crate) async fn counts<T: Tx + Send>(
    tx: &mut T,
    tenants: &TenantFilter,
) -> Result<ForwardCounts> {
    let mut q = Query::new(
        "SELECT state, COUNT(*) FROM forwards WHERE state IN ('pending', 'sending', 'dead')",
    );
    q.tenants("tenant", tenants);
    q.push(" GROUP BY state");
    let rows = tx.query(&q.sql, &q.params).await?;
    let mut c = ForwardCounts::default();
    for r in &rows {
        let n = r.int(1)?.max(0) as u64;
        match r.text(0)?.as_str() {
            "pending" => c.pending = n,
            "sending" => c.sending = n,
            _ => c.dead = n,
        }
    }
    Ok(c)
}
