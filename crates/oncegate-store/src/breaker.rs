//! The collision breaker: per strategy (name + version), provider, environment and event type,
//! a rolling window of key matches and of the collisions among them. When the share of
//! collisions passes the contract's threshold over at least its minimum sample, the breaker
//! opens, and from then on what the matrix would `ignore` for that strategy is reconciled
//! instead. Only an operator closes it, with a note.
//!
//! The window is kept as time buckets of counters (one row per scope and bucket), so old
//! matches age out by leaving the window rather than by being rewritten; buckets older than
//! the window are deleted as new matches arrive. Closing a breaker clears its window: the
//! operator reviewed the collisions so far, and keeping them would reopen it at the next match.
//!
//! Opening is a conditional upsert on the breaker's row (`… WHERE state = 'closed'`), so under
//! any concurrency exactly one recorder sees "it opened now" and logs it.

use time::{Duration, OffsetDateTime};

use crate::codes::{duration_ms, from_ms, ms};
use crate::error::StoreError;
use crate::sql::{int, text, Dialect, Row, Tx, Value};

type Result<T> = std::result::Result<T, StoreError>;

/// Which strategy a breaker guards: a new strategy version starts with a fresh breaker, like it
/// starts with fresh keys.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BreakerScope {
    /// The provider whose deliveries the strategy keys.
    pub provider: String,
    /// The provider's environment (`live`, `test`…).
    pub env: String,
    /// The event type the strategy makes keys for.
    pub event_type: String,
    /// The strategy's name, as the contract spells it.
    pub strategy: String,
    /// The strategy's version; a new version has its own breaker.
    pub version: u32,
}

impl BreakerScope {
    /// `name@version`, as metrics and the command line spell a strategy.
    pub fn strategy_label(&self) -> String {
        format!("{}@{}", self.strategy, self.version)
    }
}

impl std::fmt::Display for BreakerScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{}/{} {}@{}",
            self.provider, self.env, self.event_type, self.strategy, self.version
        )
    }
}

/// When a breaker opens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakerRule {
    /// The share of matches that may be collisions; strictly more opens the breaker.
    pub threshold: f64,
    /// No breaker opens on fewer matches than this in the window.
    pub min_sample: u32,
    /// How far back matches count.
    pub window: Duration,
}

impl BreakerRule {
    /// A rule over the default window of 24 hours (the contract's defaults are a threshold of
    /// 0.005 and a minimum sample of 200).
    pub fn new(threshold: f64, min_sample: u32) -> Self {
        BreakerRule {
            threshold,
            min_sample,
            window: Duration::hours(24),
        }
    }

    /// Whether these counts trip the breaker.
    pub fn trips(&self, matches: u64, collisions: u64) -> bool {
        matches > 0
            && matches >= u64::from(self.min_sample)
            && (collisions as f64) / (matches as f64) > self.threshold
    }

    /// The length of one counter bucket: a 24th of the window, between a minute and an hour,
    /// so the window slides in small steps without a row per match.
    fn bucket_ms(&self) -> i64 {
        (duration_ms(self.window) / 24).clamp(60_000, 3_600_000)
    }

    /// The start of the oldest bucket still inside the window at `now`.
    fn cutoff(&self, now: OffsetDateTime) -> i64 {
        ms(now).saturating_sub(duration_ms(self.window))
    }
}

/// Whether a strategy's automatic ignores are trusted: the breaker's position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BreakerState {
    /// Matches are decided normally.
    Closed,
    /// Ignores become reconcile until an operator closes it.
    Open,
}

impl BreakerState {
    /// The word stored in the breaker's `state` column: `"closed"` or `"open"`.
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
        }
    }

    /// The state [`as_str`](Self::as_str) spells, or `None` for any other word.
    ///
    /// ```
    /// use oncegate_store::BreakerState;
    ///
    /// assert_eq!(BreakerState::parse("open"), Some(BreakerState::Open));
    /// assert_eq!(BreakerState::parse(BreakerState::Closed.as_str()), Some(BreakerState::Closed));
    /// assert_eq!(BreakerState::parse("half-open"), None);
    /// ```
    pub fn parse(s: &str) -> Option<BreakerState> {
        [BreakerState::Closed, BreakerState::Open]
            .into_iter()
            .find(|k| k.as_str() == s)
    }
}

/// One breaker as stored, with its current window's counts.
#[derive(Debug, Clone, PartialEq)]
pub struct Breaker {
    /// The strategy this breaker guards.
    pub scope: BreakerScope,
    /// Open while ignores of the strategy are reconciled instead; closed otherwise.
    pub state: BreakerState,
    /// When it last opened; `None` when it never did.
    pub opened_at: Option<OffsetDateTime>,
    /// Why it last opened: one sentence with the window's counts, the rate and the threshold.
    pub reason: Option<String>,
    /// How many matches the window held when it last opened (0 when it never did).
    pub opened_matches: u64,
    /// How many of those matches were collisions when it last opened (0 when it never did).
    pub opened_collisions: u64,
    /// When an operator last closed it.
    pub closed_at: Option<OffsetDateTime>,
    /// Who last closed it (the operator the close request named).
    pub closed_by: Option<String>,
    /// The operator's note when they last closed it.
    pub note: Option<String>,
    /// Key matches inside the window now (zero right after a close).
    pub matches: u64,
    /// Collisions among `matches` inside the window now.
    pub collisions: u64,
}

impl Breaker {
    /// Whether the breaker is open, so what would be ignored for its strategy is reconciled.
    pub fn is_open(&self) -> bool {
        self.state == BreakerState::Open
    }

    fn closed(scope: BreakerScope) -> Breaker {
        Breaker {
            scope,
            state: BreakerState::Closed,
            opened_at: None,
            reason: None,
            opened_matches: 0,
            opened_collisions: 0,
            closed_at: None,
            closed_by: None,
            note: None,
            matches: 0,
            collisions: 0,
        }
    }
}

/// What recording a tally of matches did.
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerRecord {
    /// The breaker after these matches, with the window's counts.
    pub breaker: Breaker,
    /// True for exactly one recorder: the one whose matches opened it.
    pub opened_now: bool,
}

/// Key matches of one strategy scope, counted together in one write, in the order they were
/// decided (whether each was a collision). Recorded as a whole, they trip the breaker exactly
/// when one of them recorded alone would have: the rule is checked after each match in turn.
///
/// ```
/// use oncegate_store::BreakerTally;
///
/// let mut tally = BreakerTally::one(false);
/// tally.push(true);
/// assert_eq!((tally.matches(), tally.collisions()), (2, 1));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BreakerTally {
    collisions: Vec<bool>,
}

impl BreakerTally {
    /// One match; `collision` when it was quarantined.
    pub fn one(collision: bool) -> BreakerTally {
        BreakerTally {
            collisions: vec![collision],
        }
    }

    /// Counts one more match after those already in the tally.
    pub fn push(&mut self, collision: bool) {
        self.collisions.push(collision);
    }

    /// How many matches the tally holds.
    pub fn matches(&self) -> u64 {
        self.collisions.len() as u64
    }

    /// How many of them were collisions.
    pub fn collisions(&self) -> u64 {
        self.collisions.iter().filter(|c| **c).count() as u64
    }

    /// The window's counts at the first match that trips `rule`, the window holding `before`
    /// (matches, collisions) until this tally; `None` when none does.
    fn trips_at(&self, rule: &BreakerRule, before: (u64, u64)) -> Option<(u64, u64)> {
        let (mut matches, mut collisions) = before;
        for collision in &self.collisions {
            matches += 1;
            collisions += u64::from(*collision);
            if rule.trips(matches, collisions) {
                return Some((matches, collisions));
            }
        }
        None
    }
}

fn scope_params(s: &BreakerScope) -> Vec<Value<'_>> {
    vec![
        text(s.provider.as_str()),
        text(s.env.as_str()),
        text(s.event_type.as_str()),
        text(s.strategy.as_str()),
        int(i64::from(s.version)),
    ]
}

const SCOPE_WHERE: &str =
    "provider = $1 AND env = $2 AND event_type = $3 AND strategy_name = $4 AND strategy_version = $5";

const BREAKER_COLS: &str =
    "provider, env, event_type, strategy_name, strategy_version, state, opened_at, reason, \
     opened_matches, opened_collisions, closed_at, closed_by, note";

fn scope_from(row: &Row) -> Result<BreakerScope> {
    Ok(BreakerScope {
        provider: row.text(0)?,
        env: row.text(1)?,
        event_type: row.text(2)?,
        strategy: row.text(3)?,
        version: u32::try_from(row.int(4)?)
            .map_err(|_| StoreError::corrupt("a strategy version is out of range"))?,
    })
}

fn breaker_from(row: &Row) -> Result<Breaker> {
    let state = row.text(5)?;
    Ok(Breaker {
        scope: scope_from(row)?,
        state: BreakerState::parse(&state)
            .ok_or_else(|| StoreError::corrupt(format!("unknown breaker state {state:?}")))?,
        opened_at: row.opt_int(6)?.map(from_ms).transpose()?,
        reason: row.opt_text(7)?,
        opened_matches: row.opt_int(8)?.unwrap_or(0).max(0) as u64,
        opened_collisions: row.opt_int(9)?.unwrap_or(0).max(0) as u64,
        closed_at: row.opt_int(10)?.map(from_ms).transpose()?,
        closed_by: row.opt_text(11)?,
        note: row.opt_text(12)?,
        matches: 0,
        collisions: 0,
    })
}

async fn window_counts<T: Tx + Send>(
    tx: &mut T,
    scope: &BreakerScope,
    cutoff: i64,
) -> Result<(u64, u64)> {
    let mut params = scope_params(scope);
    params.push(int(cutoff));
    let rows = tx
        .query(
            &format!(
                "SELECT CAST(COALESCE(SUM(matches), 0) AS BIGINT), CAST(COALESCE(SUM(collisions), 0) AS BIGINT) FROM breaker_counts \
                 WHERE {SCOPE_WHERE} AND bucket >= $6"
            ),
            &params,
        )
        .await?;
    // PostgreSQL's SUM over BIGINT is NUMERIC, hence the casts: both backends then answer
    // a plain integer.
    let row = rows
        .first()
        .ok_or_else(|| StoreError::corrupt("a breaker window sum returned no row"))?;
    Ok((row.int(0)?.max(0) as u64, row.int(1)?.max(0) as u64))
}

async fn stored<T: Tx + Send>(tx: &mut T, scope: &BreakerScope) -> Result<Option<Breaker>> {
    let rows = tx
        .query(
            &format!("SELECT {BREAKER_COLS} FROM breakers WHERE {SCOPE_WHERE}"),
            &scope_params(scope),
        )
        .await?;
    rows.first().map(breaker_from).transpose()
}

/// What counting a tally read: the breaker as stored (closed when it never opened), the
/// window's counts before the current bucket, and the current bucket's row after the count
/// (matches, collisions).
type Counted = (Breaker, (i64, i64), Row);

const COUNT_INSERT: &str = "INSERT INTO breaker_counts (provider, env, event_type, strategy_name, strategy_version, bucket, matches, collisions) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
     ON CONFLICT (provider, env, event_type, strategy_name, strategy_version, bucket) \
     DO UPDATE SET matches = breaker_counts.matches + excluded.matches, collisions = breaker_counts.collisions + excluded.collisions \
     RETURNING matches, collisions";

const EARLIER_SUMS: &str = "SELECT CAST(COALESCE(SUM(matches), 0) AS BIGINT), CAST(COALESCE(SUM(collisions), 0) AS BIGINT) \
     FROM breaker_counts WHERE provider = $1 AND env = $2 AND event_type = $3 AND strategy_name = $4 \
     AND strategy_version = $5 AND bucket >= $6 AND bucket <> $7";

/// SQLite: the expired buckets deleted, the breaker and the earlier buckets read, then the
/// current bucket counted. The current bucket is one row every match of the scope updates, so
/// its lock is taken last: everything else is read before it.
async fn counted_in_turn<T: Tx + Send>(
    tx: &mut T,
    scope: &BreakerScope,
    add: Vec<Value<'_>>,
    oldest: i64,
    bucket: i64,
) -> Result<Counted> {
    let mut expire = scope_params(scope);
    expire.push(int(oldest));
    tx.exec(
        "DELETE FROM breaker_counts WHERE provider = $1 AND env = $2 AND event_type = $3 AND strategy_name = $4 \
         AND strategy_version = $5 AND bucket < $6",
        &expire,
    )
    .await?;
    let breaker = stored(tx, scope)
        .await?
        .unwrap_or_else(|| Breaker::closed(scope.clone()));
    let mut earlier = scope_params(scope);
    earlier.extend([int(oldest), int(bucket)]);
    let rows = tx.query(EARLIER_SUMS, &earlier).await?;
    let row = rows
        .first()
        .ok_or_else(|| StoreError::corrupt("a breaker window sum returned no row"))?;
    let sums = (row.int(0)?, row.int(1)?);
    let rows = tx.query(COUNT_INSERT, &add).await?;
    let row = rows
        .first()
        .cloned()
        .ok_or_else(|| StoreError::corrupt("a breaker count returned no row"))?;
    Ok((breaker, sums, row))
}

/// PostgreSQL: the same as `counted_in_turn` in ONE statement (one round trip instead of four):
/// the expired buckets' delete and the current bucket's count are data-modifying `WITH`s, the
/// earlier buckets and the breaker are read in the statement's snapshot (which the delete
/// does not change for them: it removes only buckets before the window). The current bucket's
/// lock is held from the count to the commit, as before.
async fn counted_at_once<T: Tx + Send>(
    tx: &mut T,
    scope: &BreakerScope,
    add: Vec<Value<'_>>,
    oldest: i64,
) -> Result<Counted> {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let sql = SQL.get_or_init(|| {
        // $1-$5 the scope, $6-$8 the count (bucket, matches, collisions), $9 the oldest bucket.
        format!(
            "WITH expired AS (DELETE FROM breaker_counts WHERE {SCOPE_WHERE} AND bucket < $9), \
             counted AS ({COUNT_INSERT}) \
             SELECT counted.matches, counted.collisions, earlier.m, earlier.c, {breaker} \
             FROM counted \
             CROSS JOIN ({earlier}) AS earlier(m, c) \
             LEFT JOIN breakers b ON b.provider = $1 AND b.env = $2 AND b.event_type = $3 \
             AND b.strategy_name = $4 AND b.strategy_version = $5",
            breaker = BREAKER_COLS
                .split(", ")
                .map(|c| format!("b.{c}"))
                .collect::<Vec<_>>()
                .join(", "),
            earlier = EARLIER_SUMS.replace("$6", "$9").replace("$7", "$6"),
        )
    });
    let mut params = add;
    params.push(int(oldest));
    let rows = tx.query(sql, &params).await?;
    let row = rows
        .first()
        .ok_or_else(|| StoreError::corrupt("a breaker count returned no row"))?;
    let stored_at = Row(row.0[4..].to_vec());
    let breaker = if stored_at.opt_text(0)?.is_some() {
        breaker_from(&stored_at)?
    } else {
        Breaker::closed(scope.clone())
    };
    Ok((
        breaker,
        (row.int(2)?, row.int(3)?),
        Row(row.0[..2].to_vec()),
    ))
}

/// Counts a tally of key matches (and which were collisions) and opens the breaker when the
/// window's counts trip the rule at one of them.
pub(crate) async fn record<T: Tx + Send>(
    tx: &mut T,
    scope: &BreakerScope,
    tally: &BreakerTally,
    rule: &BreakerRule,
    now: OffsetDateTime,
) -> Result<BreakerRecord> {
    let now_ms = ms(now);
    let bucket_ms = rule.bucket_ms();
    let bucket = now_ms - now_ms.rem_euclid(bucket_ms);
    let cutoff = rule.cutoff(now);
    let mut add = scope_params(scope);
    add.extend([
        int(bucket),
        int(tally.matches() as i64),
        int(tally.collisions() as i64),
    ]);
    // A bucket wholly before the window never counts again; the window is the buckets from
    // there, the current one included.
    let oldest = cutoff.saturating_sub(bucket_ms);
    let (mut breaker, (earlier_matches, earlier_collisions), row) = match tx.dialect() {
        Dialect::Postgres => counted_at_once(tx, scope, add, oldest).await?,
        Dialect::Sqlite => counted_in_turn(tx, scope, add, oldest, bucket).await?,
    };
    let matches = (earlier_matches + row.int(0)?).max(0) as u64;
    let collisions = (earlier_collisions + row.int(1)?).max(0) as u64;
    let before = (
        matches.saturating_sub(tally.matches()),
        collisions.saturating_sub(tally.collisions()),
    );
    let mut opened_now = false;
    if let Some((matches, collisions)) = tally.trips_at(rule, before) {
        let reason = format!(
            "{collisions} of the last {matches} key matches of {} on {}/{}/{} were collisions ({:.2} %), over the threshold of {:.2} % (minimum sample {}).",
            scope.strategy_label(),
            scope.provider,
            scope.env,
            scope.event_type,
            100.0 * collisions as f64 / matches as f64,
            100.0 * rule.threshold,
            rule.min_sample,
        );
        let mut params = scope_params(scope);
        params.extend([
            int(now_ms),
            text(reason),
            int(matches as i64),
            int(collisions as i64),
        ]);
        // Only a closed (or absent) breaker opens: the one recorder whose update returns a row
        // is the one that opened it.
        let rows = tx
            .query(
                "INSERT INTO breakers (provider, env, event_type, strategy_name, strategy_version, state, opened_at, reason, \
                 opened_matches, opened_collisions, closed_at, closed_by, note) \
                 VALUES ($1, $2, $3, $4, $5, 'open', $6, $7, $8, $9, NULL, NULL, NULL) \
                 ON CONFLICT (provider, env, event_type, strategy_name, strategy_version) \
                 DO UPDATE SET state = 'open', opened_at = excluded.opened_at, reason = excluded.reason, \
                 opened_matches = excluded.opened_matches, opened_collisions = excluded.opened_collisions \
                 WHERE breakers.state = 'closed' \
                 RETURNING state",
                &params,
            )
            .await?;
        opened_now = !rows.is_empty();
        if let Some(now_stored) = stored(tx, scope).await? {
            breaker = now_stored;
        }
    }
    breaker.matches = matches;
    breaker.collisions = collisions;
    Ok(BreakerRecord {
        breaker,
        opened_now,
    })
}

/// The breaker of one scope (closed with no history when it never opened).
pub(crate) async fn read<T: Tx + Send>(
    tx: &mut T,
    scope: &BreakerScope,
    rule: &BreakerRule,
    now: OffsetDateTime,
) -> Result<Breaker> {
    let mut breaker = stored(tx, scope)
        .await?
        .unwrap_or_else(|| Breaker::closed(scope.clone()));
    let (matches, collisions) =
        window_counts(tx, scope, rule.cutoff(now).saturating_sub(rule.bucket_ms())).await?;
    breaker.matches = matches;
    breaker.collisions = collisions;
    Ok(breaker)
}

/// Every breaker that ever opened, and every scope with matches in the window, sorted by scope.
pub(crate) async fn list<T: Tx + Send>(
    tx: &mut T,
    rule: &BreakerRule,
    now: OffsetDateTime,
) -> Result<Vec<Breaker>> {
    let mut all: std::collections::BTreeMap<BreakerScope, Breaker> = Default::default();
    for row in tx
        .query(&format!("SELECT {BREAKER_COLS} FROM breakers"), &[])
        .await?
    {
        let b = breaker_from(&row)?;
        all.insert(b.scope.clone(), b);
    }
    let cutoff = rule.cutoff(now).saturating_sub(rule.bucket_ms());
    for row in tx
        .query(
            "SELECT provider, env, event_type, strategy_name, strategy_version, CAST(SUM(matches) AS BIGINT), CAST(SUM(collisions) AS BIGINT) \
             FROM breaker_counts WHERE bucket >= $1 \
             GROUP BY provider, env, event_type, strategy_name, strategy_version",
            &[int(cutoff)],
        )
        .await?
    {
        let scope = scope_from(&row)?;
        let b = all
            .entry(scope.clone())
            .or_insert_with(|| Breaker::closed(scope));
        b.matches = row.int(5)?.max(0) as u64;
        b.collisions = row.int(6)?.max(0) as u64;
    }
    Ok(all.into_values().collect())
}

/// Closes an open breaker with the operator's note, and clears its window.
pub(crate) async fn close<T: Tx + Send>(
    tx: &mut T,
    scope: &BreakerScope,
    note: &str,
    by: &str,
    now: OffsetDateTime,
) -> Result<Breaker> {
    let mut params = scope_params(scope);
    params.extend([int(ms(now)), text(by), text(note)]);
    // The guarded update comes first: of two operators closing at once, one changes the row.
    let n = tx
        .exec(
            &format!(
                "UPDATE breakers SET state = 'closed', closed_at = $6, closed_by = $7, note = $8 \
                 WHERE {SCOPE_WHERE} AND state = 'open'"
            ),
            &params,
        )
        .await?;
    if n == 0 {
        return Err(match stored(tx, scope).await? {
            Some(_) => StoreError::Conflict(format!("the breaker of {scope} is not open")),
            None => StoreError::NotFound {
                what: "open breaker",
                id: scope.to_string(),
            },
        });
    }
    tx.exec(
        &format!("DELETE FROM breaker_counts WHERE {SCOPE_WHERE}"),
        &scope_params(scope),
    )
    .await?;
    stored(tx, scope)
        .await?
        .ok_or_else(|| StoreError::corrupt("a closed breaker vanished"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_needs_the_sample_and_strictly_more_than_the_threshold() {
        let rule = BreakerRule::new(0.005, 200);
        assert!(!rule.trips(199, 100), "under the minimum sample");
        assert!(!rule.trips(200, 1), "exactly 0.5 % does not trip");
        assert!(rule.trips(200, 2), "1 % trips");
        assert!(!rule.trips(0, 0));
        assert!(BreakerRule::new(0.0, 0).trips(1, 1));
    }

    #[test]
    fn buckets_are_a_24th_of_the_window_within_bounds() {
        assert_eq!(BreakerRule::new(0.1, 1).bucket_ms(), 3_600_000);
        let short = BreakerRule {
            window: Duration::minutes(10),
            ..BreakerRule::new(0.1, 1)
        };
        assert_eq!(short.bucket_ms(), 60_000);
    }
}
