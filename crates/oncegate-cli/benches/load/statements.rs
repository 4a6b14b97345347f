//! PostgreSQL's time per decision in each of a side's statements, from `pg_stat_statements`
//! when the server loads it (`scripts/with-test-pg`'s cluster does): the line that names the
//! statement a regression sits in. A generic plan on the wrong index (a by-key update that read
//! every open item) showed here as one statement with a third of oncegate's statement time and a
//! thousand buffers a call, where perf's phases only said "executing".

use tokio_postgres::Client;

/// Whether the server collects statement statistics: the library is preloaded and the view can
/// be made in the admin's database (the throwaway cluster's; elsewhere, a superuser's).
pub async fn available(admin: &Client) -> bool {
    let preloaded = admin
        .query_one("SELECT current_setting('shared_preload_libraries')", &[])
        .await
        .ok()
        .and_then(|r| r.try_get::<_, String>(0).ok())
        .is_some_and(|s| s.split(',').any(|l| l.trim() == "pg_stat_statements"));
    preloaded
        && admin
            .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            .await
            .is_ok()
}

/// Forgets what `database`'s statements did so far (the warm-up's, the first plans'); `false`
/// (with the reason on stderr) when it could not, and the line would count them.
pub async fn reset(admin: &Client, database: &str) -> bool {
    match admin
        .execute(
            "SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database WHERE datname = $1), 0)",
            &[&database],
        )
        .await
    {
        Ok(_) => true,
        Err(e) => {
            eprintln!("pg_stat_statements_reset failed ({e}); no statements line");
            false
        }
    }
}

/// `database`'s `top` statements by time since the reset, each as its time per decision, its
/// calls per decision, its buffers per call and the start of its text: `61 µs (0.11 calls,
/// 86 buffers each) WITH journaled AS (INSERT INTO deliveries …`.
pub async fn line(admin: &Client, database: &str, decisions: u64, top: i64) -> Option<String> {
    let rows = admin
        .query(
            "SELECT query, calls, total_exec_time, shared_blks_hit + shared_blks_read \
             FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1) \
             ORDER BY total_exec_time DESC LIMIT $2",
            &[&database, &top],
        )
        .await
        .ok()?;
    let decisions = decisions.max(1) as f64;
    let parts: Vec<String> = rows
        .iter()
        .map(|r| {
            let text: String = r.get(0);
            let calls: i64 = r.get(1);
            let ms: f64 = r.get(2);
            let buffers: i64 = r.get(3);
            format!(
                "{:.0} µs ({:.2} calls, {} buffers each) {}",
                ms * 1000.0 / decisions,
                calls as f64 / decisions,
                buffers / calls.max(1),
                head(&text, 48)
            )
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// The first `n` characters of a statement's text, its white space collapsed.
fn head(text: &str, n: usize) -> String {
    let words: Vec<&str> = text.split_whitespace().collect();
    let one = words.join(" ");
    match one.char_indices().nth(n) {
        Some((at, _)) => format!("{}…", &one[..at]),
        None => one,
    }
}
