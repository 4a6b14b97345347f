//! Retention as data-model rules: what `purge` may remove and what it must keep. Purge is the
//! only code path that deletes anything.

use time::{Duration, OffsetDateTime};

use crate::codes::{delivery_id_floor, duration_ms, from_ms, ms};
use crate::error::StoreError;
use crate::partition;
use crate::schema;
use crate::sql::{int, text, Dialect, Tx};

type Result<T> = std::result::Result<T, StoreError>;

/// How long each kind of record lives. The fast index has no entry here: each key's slot
/// carries its own expiry (its strategy's horizon), or none when the type is durable, and an
/// effect holding a live slot is kept whatever its age.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PurgePolicy {
    /// Raw bodies are dropped after this; the delivery row and its proof stay.
    pub payload_retention: Duration,
    /// Proofs and their delivery rows are deleted after this, unless an open queue item still
    /// needs them. Effects of durable types keep their identity regardless.
    pub proof_retention: Duration,
}

/// What a purge removed (or, in a dry run, would remove).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PurgeCounts {
    /// Fast-index entries past their horizon: the rows of `effect_index`, where the slots of
    /// the keys reserved before schema version 13 are (a slot since is its effect's own row,
    /// and its expiry a column of it: nothing to delete).
    pub index_entries: u64,
    /// Raw bodies set to NULL.
    pub payloads: u64,
    /// Proofs deleted (past the proof retention).
    pub proofs: u64,
    /// Delivery rows deleted, their proofs with them.
    pub deliveries: u64,
    /// Non-durable effects left with no delivery, and no reservation in flight.
    pub effects: u64,
    /// Resolved queue items of purged deliveries.
    pub queue_items: u64,
    /// Effects of durable types whose deliveries and proofs are all gone and whose identity is
    /// kept regardless (what a late delivery of the same key still finds).
    pub durable_identities_kept: u64,
    /// Observations older than the proof retention: collision-breaker counter buckets and
    /// settled missing-operation records (a breaker's state and any open record stay).
    pub observations: u64,
}

/// Deliveries old enough to lose their proof, unless an open queue item still needs them: the
/// range is read from the primary key (`$2`, the first id of the cut-off's millisecond, see
/// `codes::delivery_id_floor`).
const PURGEABLE_DELIVERIES: &str =
    "SELECT d.id FROM deliveries d WHERE d.id < $2 AND d.received_at < $1 \
     AND NOT EXISTS (SELECT 1 FROM queue_items q WHERE q.delivery_id = d.id AND q.status = 'open')";

/// The minutes from the time of delivery id `from` to that of `to` (a day partition's bounds),
/// as the report's totals number them.
fn minutes_between(from: &str, to: &str) -> Result<std::ops::Range<i64>> {
    let time = |id: &str| -> Result<i64> {
        let ulid = id
            .split_once('_')
            .and_then(|(_, u)| ulid::Ulid::from_string(&u.to_ascii_uppercase()).ok())
            .ok_or_else(|| {
                StoreError::corrupt(format!("partition bound {id} is not a delivery id"))
            })?;
        Ok(ulid.timestamp_ms() as i64)
    };
    Ok(time(from)?.div_euclid(60_000)..(time(to)? + 59_999).div_euclid(60_000))
}

/// How many deliveries a journal partition holds, and how many of them have their proof,
/// counted before it is dropped.
async fn rows_of<T: Tx + Send>(tx: &mut T, partition: &str) -> Result<(u64, u64)> {
    let rows = tx
        .query(
            &format!("SELECT COUNT(*), COUNT(decided_at) FROM {partition}"),
            &[],
        )
        .await?;
    Ok(match rows.first() {
        Some(r) => (r.int(0)?.max(0) as u64, r.int(1)?.max(0) as u64),
        None => (0, 0),
    })
}

/// Applies the retention rules inside the caller's transaction; a dry run is the same work
/// rolled back, so its counts are exact.
pub(crate) async fn purge<T: Tx + Send>(
    tx: &mut T,
    policy: &PurgePolicy,
    now: OffsetDateTime,
) -> Result<PurgeCounts> {
    let now_ms = ms(now);
    let payload_cutoff = now_ms.saturating_sub(duration_ms(policy.payload_retention));
    let proof_cutoff = now_ms.saturating_sub(duration_ms(policy.proof_retention));
    let floor = delivery_id_floor(from_ms(proof_cutoff)?);
    let proof_floor = text(floor.clone());
    let proof_cutoff = int(proof_cutoff);
    let mut counts = PurgeCounts {
        index_entries: tx
            .exec("DELETE FROM effect_index WHERE expires_at IS NOT NULL AND expires_at <= $1", &[int(now_ms)])
            .await?,
        payloads: tx
            .exec(
                "UPDATE deliveries SET payload = NULL WHERE id < $2 AND received_at < $1 AND payload IS NOT NULL",
                &[int(payload_cutoff), text(delivery_id_floor(from_ms(payload_cutoff)?))],
            )
            .await?,
        ..PurgeCounts::default()
    };
    // `$1` the cut-off time, `$2` its first delivery id; the statements that read no delivery
    // take the time alone.
    let cut = &[proof_cutoff, proof_floor];
    let cut_time = &cut[..1];
    // What hangs off a purgeable delivery goes first, while the delivery is there to name it.
    tx.exec(
        &format!("DELETE FROM links WHERE delivery_id IN ({PURGEABLE_DELIVERIES})"),
        cut,
    )
    .await?;
    counts.queue_items = tx
        .exec(&format!("DELETE FROM queue_items WHERE status = 'resolved' AND delivery_id IN ({PURGEABLE_DELIVERIES})"), cut)
        .await?;
    // The minutes of the report's totals that lose rows here (see `rollup`).
    let mut gone = std::collections::BTreeSet::new();
    // A partitioned store drops each day past the cut whole, journal and proofs (one row a
    // delivery), unless an open queue item still needs one of its deliveries (that day is
    // purged row by row below).
    for day in partition::days_before(tx, &floor).await? {
        let open = tx
            .query(
                "SELECT 1 FROM queue_items WHERE status = 'open' AND delivery_id >= $1 AND delivery_id < $2 LIMIT 1",
                &[text(&day.from), text(&day.to)],
            )
            .await?;
        if !open.is_empty() {
            continue;
        }
        let (deliveries, proofs) = rows_of(tx, &day.deliveries).await?;
        counts.deliveries += deliveries;
        counts.proofs += proofs;
        gone.extend(minutes_between(&day.from, &day.to)?);
        tx.exec(&schema::drop_partition(&day.deliveries), &[])
            .await?;
    }
    // A delivery's proof is its own row's (schema v14): deleted with it, and counted.
    let deleted = tx
        .query(
            &format!(
                "DELETE FROM deliveries WHERE id IN ({PURGEABLE_DELIVERIES}) \
                 RETURNING received_at / 60000, decided_at IS NOT NULL"
            ),
            cut,
        )
        .await?;
    counts.deliveries += deleted.len() as u64;
    for r in &deleted {
        gone.insert(r.int(0)?);
        counts.proofs += u64::from(r.boolean(1)?);
    }
    // Durable effects keep their identity forever; others go once nothing refers to them, no
    // reservation or claim is in flight and they hold no live slot of their key (the effect
    // is the slot: the key is known for as long as its horizon says).
    let deleted = tx
        .query(
            "DELETE FROM effects WHERE durable = FALSE AND state NOT IN ('reserved', 'released') AND updated_at < $1 \
             AND (indexed = FALSE OR (index_expires_at IS NOT NULL AND index_expires_at <= $2)) \
             AND NOT EXISTS (SELECT 1 FROM links l WHERE l.effect_id = effects.id) \
             AND NOT EXISTS (SELECT 1 FROM deliveries p WHERE p.effect_id = effects.id) \
             AND NOT EXISTS (SELECT 1 FROM queue_items q WHERE q.existing_effect = effects.id AND q.status = 'open') \
             RETURNING created_at / 60000",
            &[cut[0].clone(), int(now_ms)],
        )
        .await?;
    counts.effects = deleted.len() as u64;
    for r in &deleted {
        gone.insert(r.int(0)?);
    }
    crate::rollup::mark_stale(tx, gone).await?;
    // Counters and settled sightings are observations, not proofs: past the proof retention
    // they explain nothing anyone can still ask about. Without this they would only grow.
    counts.observations = tx
        .exec("DELETE FROM breaker_counts WHERE bucket < $1", cut_time)
        .await?
        + tx.exec(
            "DELETE FROM missing_operations WHERE settled_at IS NOT NULL AND settled_at < $1",
            cut_time,
        )
        .await?;
    let kept = tx
        .query(
            "SELECT COUNT(*) FROM effects e WHERE e.durable = TRUE \
             AND NOT EXISTS (SELECT 1 FROM links l WHERE l.effect_id = e.id) \
             AND NOT EXISTS (SELECT 1 FROM deliveries p WHERE p.effect_id = e.id AND p.link_kind IS NOT NULL)",
            &[],
        )
        .await?;
    counts.durable_identities_kept = match kept.first() {
        Some(row) => row.int(0)?.max(0) as u64,
        None => 0,
    };
    // SQLite keeps the pages the deletes freed inside its file unless told to give them back:
    // with incremental auto-vacuum (every SQLite store this version creates) this moves them to
    // the end of the file, which is cut at the commit (at the next checkpoint, in WAL mode).
    // On a store without it, the pragma does nothing and the pages are reused by later writes.
    if tx.dialect() == Dialect::Sqlite {
        tx.query("PRAGMA incremental_vacuum", &[]).await?;
    }
    Ok(counts)
}
