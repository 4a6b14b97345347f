//! Where each conformance scenario gets its store: a temporary SQLite file, or a fresh
//! PostgreSQL database created for the test (and dropped after it).

use std::sync::Arc;

use oncegate_store::Store;
use tempfile::TempDir;

/// The admin URL used to create test databases; `ONCEGATE_TEST_PG` overrides it.
const DEFAULT_PG_ADMIN: &str = "postgres://postgres@127.0.0.1:5432/postgres";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Postgres,
}

/// One backend instance for one test: a URL any number of stores can be opened on.
pub struct Backend {
    pub kind: Kind,
    pub url: String,
    _dir: Option<TempDir>,
    admin: Option<(String, String)>,
}

fn pg_admin_url() -> String {
    std::env::var("ONCEGATE_TEST_PG").unwrap_or_else(|_| DEFAULT_PG_ADMIN.to_owned())
}

async fn pg_admin(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| {
            panic!("the conformance suite needs PostgreSQL at {url} (set ONCEGATE_TEST_PG): {e}")
        });
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// The URL of database `name` on the same server as `admin`.
fn with_database(admin: &str, name: &str) -> String {
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

impl Backend {
    pub async fn sqlite() -> Backend {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let url = format!("sqlite://{}", dir.path().join("oncegate.db").display());
        Backend {
            kind: Kind::Sqlite,
            url,
            _dir: Some(dir),
            admin: None,
        }
    }

    pub async fn postgres() -> Backend {
        let admin = pg_admin_url();
        let name = format!(
            "oncegate_test_{}",
            ulid::Ulid::new().to_string().to_lowercase()
        );
        let client = pg_admin(&admin).await;
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .expect("CREATE DATABASE");
        Backend {
            kind: Kind::Postgres,
            url: with_database(&admin, &name),
            _dir: None,
            admin: Some((admin, name)),
        }
    }

    pub async fn open(&self) -> Arc<dyn Store> {
        oncegate_store::open(&self.url)
            .await
            .unwrap_or_else(|e| panic!("opening {}: {e}", self.url))
    }

    /// A URL of the same kind at which nothing can be opened.
    pub fn unreachable_url(&self) -> String {
        match self.kind {
            Kind::Sqlite => {
                let dir = self._dir.as_ref().expect("sqlite has a directory");
                // A path under a regular file cannot be created, even by root.
                let file = dir.path().join("not-a-directory");
                std::fs::write(&file, b"x").expect("write a file");
                format!("sqlite://{}", file.join("oncegate.db").display())
            }
            Kind::Postgres => {
                "postgres://postgres@127.0.0.1:1/postgres?connect_timeout=2".to_owned()
            }
        }
    }

    /// Pretends a newer oncegate migrated the database.
    pub async fn force_schema_version(&self, version: i64) {
        match self.kind {
            Kind::Sqlite => {
                let path = self.url.trim_start_matches("sqlite://");
                let conn = rusqlite::Connection::open(path).expect("open the test file");
                conn.execute(
                    "INSERT INTO schema_version (version, applied_at) VALUES (?1, 0)",
                    [version],
                )
                .expect("insert");
            }
            Kind::Postgres => {
                let client = pg_admin(&self.url).await;
                client
                    .execute(
                        "INSERT INTO schema_version (version, applied_at) VALUES ($1, 0)",
                        &[&version],
                    )
                    .await
                    .expect("insert");
            }
        }
    }

    /// Takes the database away under an open store: PostgreSQL drops it (closing the store's
    /// connections). Returns false where there is no such outage to stage: an open SQLite file
    /// stays usable to its process even when unlinked.
    pub async fn take_down(&self) -> bool {
        match &self.admin {
            Some((admin, name)) => {
                let client = pg_admin(admin).await;
                client
                    .batch_execute(&format!("DROP DATABASE {name} WITH (FORCE)"))
                    .await
                    .expect("DROP DATABASE");
                true
            }
            None => false,
        }
    }

    /// Drops the test database; the test's stores must be gone already.
    pub async fn cleanup(self) {
        if let Some((admin, name)) = &self.admin {
            let client = pg_admin(admin).await;
            if let Err(e) = client
                .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .await
            {
                eprintln!("could not drop {name}: {e:?}");
            }
        }
    }
}
