//! Where each conformance scenario gets its store: a temporary SQLite file, or a fresh
//! PostgreSQL database created for the test (and dropped after it).

use std::sync::Arc;

use oncegate_core::matrix::{self, Confidence, Criticality, Decision, Keyed, Situation};
use oncegate_store::testing::{pg_admin, TestDatabase};
use oncegate_store::Store;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Postgres,
}

/// The real matrix for an identified delivery of a critical type with a strong key.
pub fn strong_critical(view: &oncegate_store::PriorView) -> Decision {
    strong(Criticality::Critical)(view)
}

/// The real matrix for an identified delivery of a type of `criticality` with a strong key
/// and no authority.
pub fn strong(
    criticality: Criticality,
) -> impl Fn(&oncegate_store::PriorView) -> Decision + Clone + Send + Sync {
    move |view| {
        matrix::decide(&Situation::Identified {
            criticality,
            authority: false,
            breaker_open: false,
            transport: view.transport,
            key: Keyed {
                confidence: Confidence::Strong,
                prior: view.prior,
                differences: view.differences.clone(),
            },
        })
    }
}

/// One backend instance for one test: a URL any number of stores can be opened on.
pub struct Backend {
    pub kind: Kind,
    pub url: String,
    db: TestDatabase,
}

impl Backend {
    pub async fn sqlite() -> Backend {
        let db = TestDatabase::sqlite();
        Backend {
            kind: Kind::Sqlite,
            url: db.url.clone(),
            db,
        }
    }

    pub async fn postgres() -> Backend {
        let db = TestDatabase::postgres("oncegate_test").await;
        Backend {
            kind: Kind::Postgres,
            url: db.url.clone(),
            db,
        }
    }

    /// PostgreSQL with `default_transaction_isolation = serializable`.
    pub async fn postgres_serializable() -> Backend {
        let db = TestDatabase::postgres_serializable("oncegate_test_ser").await;
        Backend {
            kind: Kind::Postgres,
            url: db.url.clone(),
            db,
        }
    }

    pub async fn open(&self) -> Arc<Store> {
        oncegate_store::open(&self.url)
            .await
            .unwrap_or_else(|e| panic!("opening {}: {e}", self.url))
    }

    /// A URL of the same kind at which nothing can be opened.
    pub fn unreachable_url(&self) -> String {
        match self.kind {
            Kind::Sqlite => {
                let dir = self.db.dir().expect("sqlite has a directory");
                // A path under a regular file cannot be created, even by root.
                let file = dir.join("not-a-directory");
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

    /// Runs `sql` (statements separated by `;`) on the database, beside the stores: a state
    /// an older oncegate left, written as it wrote it.
    pub async fn execute(&self, sql: &str) {
        match self.kind {
            Kind::Sqlite => {
                let path = self.url.trim_start_matches("sqlite://");
                let conn = rusqlite::Connection::open(path).expect("open the test file");
                conn.execute_batch(sql).expect("run the statements");
            }
            Kind::Postgres => {
                let client = pg_admin(&self.url).await;
                client.batch_execute(sql).await.expect("run the statements");
            }
        }
    }

    /// Takes the database away under an open store: PostgreSQL drops it (closing the store's
    /// connections). Returns false where there is no such outage to stage: an open SQLite file
    /// stays usable to its process even when unlinked.
    pub async fn take_down(&self) -> bool {
        match &self.db.admin {
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
        self.db.cleanup().await;
    }
}
