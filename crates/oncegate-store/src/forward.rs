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
use crate::sql::{int, opt_text, text, Query, Row, Tx};

pub(crate) mod attempt;

pub(crate) use attempt::{attempts, finish, interrupt, resend, start};
pub use attempt::{ForwardAttempt, ForwardEnd, ForwardNext, ForwardStart, INTERRUPTED};

type Result<T> = std::result::Result<T, StoreError>;

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
    /// The effect forwarded.
    pub effect: EffectId,
    /// The effect's fencing token the attempts are sent under.
    pub fencing_token: u64,
    /// The delivery whose journaled body is sent.
    pub delivery: DeliveryId,
    /// The tenant of the delivery.
    pub tenant: String,
    /// The provider it came from.
    pub provider: String,
    /// Its environment.
    pub env: String,
    /// Its event type, when the contract read one.
    pub event_type: Option<String>,
    /// When its first attempt is due.
    pub due_at: OffsetDateTime,
}

/// A forward read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardRecord {
    /// The effect forwarded.
    pub effect: EffectId,
    /// The delivery whose journaled body is sent.
    pub delivery: DeliveryId,
    /// The tenant of the delivery.
    pub tenant: String,
    /// The provider it came from.
    pub provider: String,
    /// Its environment.
    pub env: String,
    /// Its event type, when the contract read one.
    pub event_type: Option<String>,
    /// The effect's fencing token this series sends under.
    pub fencing_token: u64,
    /// Which attempt series (1 for the first; each re-send or takeover starts the next).
    pub series: u64,
    /// Attempts started in this series.
    pub attempts: u64,
    /// Where it stands.
    pub state: ForwardState,
    /// When its next attempt is due.
    pub due_at: OffsetDateTime,
    /// While `sending`: when the attempt's lease ends.
    pub deadline: Option<OffsetDateTime>,
    /// The last attempt's HTTP status, when it got one.
    pub last_status: Option<u16>,
    /// Why the last attempt failed, when it did.
    pub last_error: Option<String>,
    /// When it was enqueued.
    pub created_at: OffsetDateTime,
    /// When it last changed.
    pub updated_at: OffsetDateTime,
}

/// How many forwards stand in each state that still needs attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ForwardCounts {
    /// Waiting for their next attempt.
    pub pending: u64,
    /// With an attempt in flight.
    pub sending: u64,
    /// Dead letters, waiting for a re-send.
    pub dead: u64,
}

/// Which forwards a listing shows.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ForwardFilter {
    /// The tenants the reader sees.
    pub tenants: TenantFilter,
    /// Only forwards in this state; every state when `None`.
    pub state: Option<ForwardState>,
    /// At most this many, oldest first.
    pub limit: u32,
}

/// A forward type: released effects of these (provider, event type) pairs are the
/// forwarder's to claim.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ForwardType {
    /// The provider declaring the forward.
    pub provider: String,
    /// The event type whose released effects are forwarded.
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
        let mut q = Query::new(&format!("{} AND (", effect::RELEASED));
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
        // The worker's take (`effect::claim`), with the forwarder as the holder.
        let rows = tx
            .query(
                effect::TAKE_RELEASED,
                &[
                    text(id.as_str()),
                    int(until),
                    text("forwarder"),
                    int(now_ms),
                ],
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
