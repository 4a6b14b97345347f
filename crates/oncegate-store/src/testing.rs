//! Throwaway databases for tests (feature `testing`): a temporary SQLite file, or a fresh
//! PostgreSQL database created for one test on the server named by `ONCEGATE_TEST_PG` and
//! dropped by [`TestDatabase::cleanup`]. The store's conformance suite, the service's tests and
//! programs embedding oncegate all get their databases the same way, so no test depends on
//! state an earlier run left behind.

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

use tempfile::TempDir;

#[cfg(unix)]
pub mod cluster;

/// A TCP port free on 127.0.0.1 at the moment of asking, for a server a test or bench starts
/// itself (a PostgreSQL cluster, `oncegate serve`).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

/// The admin URL test databases are created with: `ONCEGATE_TEST_PG`, which `scripts/test`
/// sets to a throwaway cluster of its own (`scripts/with-test-pg`). There is no default: a
/// test never reaches whatever server happens to listen on the machine.
pub fn pg_admin_url() -> String {
    std::env::var("ONCEGATE_TEST_PG").unwrap_or_else(|_| {
        panic!(
            "ONCEGATE_TEST_PG is not set: these tests need a PostgreSQL admin URL. Run them \
             through scripts/test, or scripts/with-test-pg COMMAND (a throwaway cluster of \
             their own), or set ONCEGATE_TEST_PG=postgres://user@host:port/postgres"
        )
    })
}

/// A plain client on `url`, for set-up statements. Panics with what to do when PostgreSQL is
/// not there: a test cannot go on without it.
pub async fn pg_admin(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "these tests need PostgreSQL at {url} (set ONCEGATE_TEST_PG to an admin URL): {e}"
            )
        });
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// The statement PostgreSQL's batches complete effects with (arrays `$1` effect ids, `$2`
/// tokens, `$3` times in ms, `$4` results, `$5` members), for tests of its plan.
pub fn pg_batch_complete_sql() -> String {
    crate::postgres::batch_complete_text(false)
}

/// The same statement as a batch of one call writes it (`$1` effect id, `$2` token, `$3` the
/// time in ms, `$4` the result, `$5` the member, each a value), for tests of its plan.
pub fn pg_batch_complete_one_sql() -> String {
    crate::postgres::batch_complete_text(true)
}

/// The statement a holder's complete runs outside a batch (`$1` effect id, `$2` token, `$3`
/// the time in ms, `$4` the result), for tests of how PostgreSQL writes it.
pub fn pg_complete_sql() -> &'static str {
    let effect = oncegate_core::ids::EffectId::from_u128(0);
    crate::effect::complete_statement(&effect, 1, "{}", time::OffsetDateTime::UNIX_EPOCH).0
}

/// The lease sweeper's two statements (`$1` now, `$2` the window's start, both in ms), for
/// tests of their plans.
pub fn pg_lease_sweep_statements() -> [&'static str; 2] {
    [
        crate::reconciliation::RELEASE_EXPIRED,
        crate::reconciliation::UNKNOWN_EXPIRED,
    ]
}

/// The claimers' read of released effects, oldest first, for tests of its plan.
pub fn pg_oldest_released_sql() -> String {
    format!(
        "{} ORDER BY e.created_at, e.id LIMIT 1",
        crate::effect::RELEASED
    )
}

/// Migrates the PostgreSQL database at `url` up to `version` with the store's own migrations,
/// for tests that carry a store of an earlier version over.
pub async fn pg_migrate_through(url: &str, version: i64) {
    let (mut client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("connecting to {url}: {e}"));
    tokio::spawn(async move {
        let _ = connection.await;
    });
    crate::postgres::migrate_with(&mut client, version)
        .await
        .unwrap_or_else(|e| panic!("migrating {url} to version {version}: {e}"));
}

/// The invisible-losses sweep's read of the resources seen since a time (`$1` provider, `$2`
/// type, `$3` the time in ms, `$4` the least effect id of that millisecond), and that id for a
/// time, for tests of its plan.
pub fn pg_resources_seen() -> (&'static str, fn(time::OffsetDateTime) -> String) {
    (
        crate::reconciliation::RESOURCES_SEEN,
        crate::codes::effect_id_floor,
    )
}

/// The statements that find one row by its primary key and test its state outside a batch:
/// for each, what it does, its text, example values (SQL literals) and the primary key it must
/// be planned on, for tests of the plans PostgreSQL makes for them.
pub fn pg_by_key_statements() -> Vec<(&'static str, String, &'static str, &'static str)> {
    use crate::forward::attempt;
    let effect = oncegate_core::ids::EffectId::from_u128(0);
    vec![
        (
            "a reconcile attempt's record",
            crate::reconciliation::RECORD_ATTEMPT.to_owned(),
            "'q', 1, 'e', NULL",
            "queue_items_pkey",
        ),
        (
            "a resolution",
            crate::queue::resolution::RESOLVE.to_owned(),
            "'q', 'duplicate', NULL, 'n', 'b', 1, NULL",
            "queue_items_pkey",
        ),
        (
            "a waiting item resolved as a duplicate",
            crate::queue::resolution::RESOLVE.to_owned(),
            "'q', 'duplicate', NULL, 'n', 'b', 1, 'e'",
            "queue_items_pkey",
        ),
        (
            "a holder's write",
            format!(
                "UPDATE effects SET result = $4, updated_at = $3 WHERE {}",
                crate::effect::HOLDER
            ),
            "'e', 1, 1, 'r'",
            "effects_pkey",
        ),
        (
            "a holder's complete",
            crate::effect::complete_statement(&effect, 1, "r", time::OffsetDateTime::UNIX_EPOCH)
                .0
                .to_owned(),
            "'e', 1, 1, 'r'",
            "effects_pkey",
        ),
        (
            "a released effect taken by a worker",
            crate::effect::TAKE_RELEASED.to_owned(),
            "'e', 1, 'w', 1",
            "effects_pkey",
        ),
        (
            "a released effect taken by the forwarder",
            crate::effect::TAKE_RELEASED.to_owned(),
            "'e', 1, 'forwarder', 1",
            "effects_pkey",
        ),
        (
            "a forward's start",
            attempt::START.to_owned(),
            "'e', 1, 1, 1",
            "forwards_pkey",
        ),
        (
            "a forward's end",
            attempt::FINISH.to_owned(),
            "'e', 1, 1, 'completed', NULL, 200, NULL, 1",
            "forwards_pkey",
        ),
        (
            "a forward interrupted",
            attempt::INTERRUPT.to_owned(),
            "'e', 1, 1, 'x'",
            "forwards_pkey",
        ),
        (
            "a dead forward sent again",
            attempt::RESEND.to_owned(),
            "'e', 1, 1",
            "forwards_pkey",
        ),
    ]
}

/// The `SET LOCAL` statements a PostgreSQL batch's transaction starts with (after `BEGIN`), for
/// tests of the plans its statements get.
pub fn pg_batch_plans() -> &'static str {
    crate::postgres::batch_plans()
}

/// Where a PostgreSQL store string connects: the first host, TCP or a Unix socket's file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PgEndpoint {
    /// A host name or address and its port.
    Tcp(String, u16),
    /// The socket file (`<dir>/.s.PGSQL.<port>`).
    Unix(std::path::PathBuf),
}

/// The endpoint `url` connects to first, for a test that puts something in between (a proxy).
///
/// ```
/// use oncegate_store::testing::{pg_endpoint, PgEndpoint};
///
/// assert_eq!(
///     pg_endpoint("postgres://postgres@127.0.0.1:5433/og"),
///     PgEndpoint::Tcp("127.0.0.1".into(), 5433)
/// );
/// ```
pub fn pg_endpoint(url: &str) -> PgEndpoint {
    let config: tokio_postgres::Config = url.parse().expect("a PostgreSQL store string");
    let port = config.get_ports().first().copied().unwrap_or(5432);
    match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => PgEndpoint::Tcp(h.clone(), port),
        #[cfg(unix)]
        Some(tokio_postgres::config::Host::Unix(dir)) => {
            PgEndpoint::Unix(dir.join(format!(".s.PGSQL.{port}")))
        }
        None => PgEndpoint::Tcp("localhost".to_owned(), port),
    }
}

/// The database `url` names, reached at `addr` instead, as a libpq `key=value` string (its
/// user, password and database kept).
///
/// ```
/// use oncegate_store::testing::pg_via;
///
/// let via = pg_via("postgres://postgres@127.0.0.1:5432/og", "127.0.0.1:6000".parse().unwrap());
/// assert_eq!(via, "host=127.0.0.1 port=6000 dbname=og user=postgres");
/// ```
pub fn pg_via(url: &str, addr: std::net::SocketAddr) -> String {
    let config: tokio_postgres::Config = url.parse().expect("a PostgreSQL store string");
    let mut s = format!("host={} port={}", addr.ip(), addr.port());
    if let Some(db) = config.get_dbname() {
        s.push_str(&format!(" dbname={db}"));
    }
    if let Some(user) = config.get_user() {
        s.push_str(&format!(" user={user}"));
    }
    if let Some(pw) = config.get_password() {
        s.push_str(&format!(" password={}", String::from_utf8_lossy(pw)));
    }
    s
}

/// The URL of database `name` on the same server, with the same options, as `admin`.
pub fn with_database(admin: &str, name: &str) -> String {
    let (base, query) = match admin.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (admin, None),
    };
    let scheme_end = base.find("://").map(|i| i + 3).unwrap_or(0);
    let host_part = match base[scheme_end..].find('/') {
        Some(i) => &base[..scheme_end + i],
        None => base,
    };
    match query {
        Some(q) => format!("{host_part}/{name}?{q}"),
        None => format!("{host_part}/{name}"),
    }
}

/// Databases created by this process, so two tests starting in the same instant never collide.
static CREATED: AtomicU32 = AtomicU32::new(0);

/// One database for one test: a URL any number of stores can be opened on.
///
/// ```
/// use oncegate_store::testing::TestDatabase;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), oncegate_store::StoreError> {
/// let db = TestDatabase::sqlite();
/// assert!(db.url.starts_with("sqlite://"));
/// let store = oncegate_store::open(&db.url).await?;
/// store.ping().await?;
/// // The file lives in the database's own directory, removed with it.
/// assert!(db.dir().expect("a SQLite directory").join("oncegate.db").exists());
/// db.cleanup().await;
/// # Ok(())
/// # }
/// ```
pub struct TestDatabase {
    /// What to pass to [`open`](crate::open): `sqlite://<dir>/oncegate.db`, or the new
    /// PostgreSQL database's URL on the admin server, with the admin URL's options.
    pub url: String,
    dir: Option<TempDir>,
    /// `(admin URL, database name)` for PostgreSQL.
    pub admin: Option<(String, String)>,
}

impl TestDatabase {
    /// A SQLite file in a new temporary directory (removed when this value is dropped).
    pub fn sqlite() -> TestDatabase {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let url = format!("sqlite://{}", dir.path().join("oncegate.db").display());
        TestDatabase {
            url,
            dir: Some(dir),
            admin: None,
        }
    }

    /// A new, empty PostgreSQL database named `{prefix}_{unique}`.
    pub async fn postgres(prefix: &str) -> TestDatabase {
        let admin = pg_admin_url();
        let name = format!(
            "{prefix}_{}_{}",
            ulid::Ulid::new().to_string().to_lowercase(),
            CREATED.fetch_add(1, Ordering::SeqCst)
        );
        pg_admin(&admin)
            .await
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
        TestDatabase {
            url: with_database(&admin, &name),
            dir: None,
            admin: Some((admin, name)),
        }
    }

    /// A new PostgreSQL database whose every transaction runs `SERIALIZABLE` by default, the
    /// mode CockroachDB and YugabyteDB run in: each operation's serialization-failure retry
    /// path is then exercised by ordinary concurrency.
    pub async fn postgres_serializable(prefix: &str) -> TestDatabase {
        let db = TestDatabase::postgres(prefix).await;
        let (admin, name) = db.admin.clone().expect("a PostgreSQL database");
        pg_admin(&admin)
            .await
            .batch_execute(&format!(
                "ALTER DATABASE {name} SET default_transaction_isolation = 'serializable'"
            ))
            .await
            .unwrap_or_else(|e| panic!("making {name} serializable: {e}"));
        db
    }

    /// The SQLite file's directory (`None` for PostgreSQL).
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_ref().map(TempDir::path)
    }

    /// Drops the PostgreSQL database, closing whatever still holds it; a SQLite directory goes
    /// with the value.
    pub async fn cleanup(self) {
        if let Some((admin, name)) = &self.admin {
            if let Err(e) = pg_admin(admin)
                .await
                .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .await
            {
                eprintln!("could not drop the test database {name}: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn a_database_name_replaces_the_admin_one_and_keeps_the_options() {
        let check = |admin: &str, expected: &str| {
            assert_eq!(with_database(admin, "t1"), expected, "{admin}")
        };
        check(
            "postgres://postgres@127.0.0.1:5432/postgres",
            "postgres://postgres@127.0.0.1:5432/t1",
        );
        check(
            "postgres://u@h/db?sslmode=disable",
            "postgres://u@h/t1?sslmode=disable",
        );
        check("postgres://u@h", "postgres://u@h/t1");
    }
}
