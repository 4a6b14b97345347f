//! A pooled PostgreSQL connection: deadpool-postgres's client, and the statements prepared on
//! it, looked up by their text.
//!
//! deadpool-postgres has a statement cache of its own, but it keys its map with the standard
//! library's SipHash, which reads the whole text at each look-up: a batch's set statements run
//! to kilobytes, and hashing them took about 3 % of `oncegate serve`'s instructions per
//! delivery. This cache is the same map, hashed by `foldhash` (built for short-lived, in-process
//! keys; the texts are the store's own, never a client's). The pool's manager is deadpool's,
//! wrapped so that each connection carries its cache.

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::{Mutex, MutexGuard, PoisonError};

use deadpool::managed::{self, Metrics, RecycleResult};
use tokio_postgres::Statement;

/// The connection pool.
pub(crate) type Pool = managed::Pool<Manager>;

/// A connection taken from the pool; back to it when dropped.
pub(crate) type Client = managed::Object<Manager>;

/// Makes and recycles connections as deadpool-postgres's manager does, each with its cache.
///
/// The pool recycles with `RecyclingMethod::Fast`, which leaves a connection's prepared
/// statements in place, so its cache stays true. (`Clean` would `DISCARD ALL` them.)
pub(crate) struct Manager(pub deadpool_postgres::Manager);

impl managed::Manager for Manager {
    type Type = Connection;
    type Error = tokio_postgres::Error;

    async fn create(&self) -> Result<Connection, tokio_postgres::Error> {
        Ok(Connection {
            client: self.0.create().await?,
            statements: Statements::default(),
        })
    }

    async fn recycle(
        &self,
        connection: &mut Connection,
        metrics: &Metrics,
    ) -> RecycleResult<tokio_postgres::Error> {
        self.0.recycle(&mut connection.client, metrics).await
    }

    fn detach(&self, connection: &mut Connection) {
        self.0.detach(&mut connection.client);
    }
}

/// A connection and the statements prepared on it.
pub(crate) struct Connection {
    client: deadpool_postgres::ClientWrapper,
    statements: Statements,
}

impl Connection {
    /// The statements prepared on this connection.
    pub fn statements(&self) -> &Statements {
        &self.statements
    }

    /// Starts a transaction, which rolls back if dropped before `commit`.
    pub async fn transaction(&mut self) -> Result<Transaction<'_>, tokio_postgres::Error> {
        let Connection { client, statements } = self;
        Ok(Transaction {
            tx: tokio_postgres::Client::transaction(client).await?,
            statements,
        })
    }
}

impl Deref for Connection {
    type Target = tokio_postgres::Client;

    fn deref(&self) -> &tokio_postgres::Client {
        &self.client
    }
}

impl DerefMut for Connection {
    fn deref_mut(&mut self) -> &mut tokio_postgres::Client {
        &mut self.client
    }
}

/// A transaction on a pooled connection, with the connection's statements.
pub(crate) struct Transaction<'a> {
    tx: tokio_postgres::Transaction<'a>,
    statements: &'a Statements,
}

impl<'a> Transaction<'a> {
    /// The statements prepared on the transaction's connection.
    pub fn statements(&self) -> &'a Statements {
        self.statements
    }

    /// Commits the transaction.
    pub async fn commit(self) -> Result<(), tokio_postgres::Error> {
        self.tx.commit().await
    }

    /// Rolls the transaction back.
    pub async fn rollback(self) -> Result<(), tokio_postgres::Error> {
        self.tx.rollback().await
    }
}

impl<'a> Deref for Transaction<'a> {
    type Target = tokio_postgres::Transaction<'a>;

    fn deref(&self) -> &tokio_postgres::Transaction<'a> {
        &self.tx
    }
}

/// The statements prepared on one connection, by text.
#[derive(Default)]
pub(crate) struct Statements(Mutex<ByText>);

type ByText = HashMap<Box<str>, Statement, foldhash::fast::RandomState>;

impl Statements {
    /// The statement of `sql`, prepared on `client` (this cache's connection) the first time.
    ///
    /// Two callers preparing one text at once both prepare it; the first stored is kept, and
    /// the other is closed on the server when dropped.
    pub async fn prepare(
        &self,
        client: &tokio_postgres::Client,
        sql: &str,
    ) -> Result<Statement, tokio_postgres::Error> {
        if let Some(known) = self.lock().get(sql) {
            return Ok(known.clone());
        }
        let prepared = client.prepare(sql).await?;
        Ok(self.lock().entry(sql.into()).or_insert(prepared).clone())
    }

    /// How many statements are prepared.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> MutexGuard<'_, ByText> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use deadpool_postgres::{ManagerConfig, RecyclingMethod, Runtime};

    use super::*;

    /// The statements of these tests the server holds prepared for `client`'s session (not
    /// this one's own, prepared to run it).
    async fn prepared_on_server(client: &tokio_postgres::Client) -> i64 {
        client
            .query_one(
                "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE 'SELECT $1::%'",
                &[],
            )
            .await
            .unwrap()
            .get(0)
    }

    #[tokio::test]
    async fn a_statement_is_prepared_once_and_found_again_by_its_text() {
        let client = crate::testing::pg_admin(&crate::testing::pg_admin_url()).await;
        let statements = Statements::default();
        statements
            .prepare(&client, "SELECT $1::int8 + 1")
            .await
            .unwrap();
        let again = statements
            .prepare(&client, "SELECT $1::int8 + 1")
            .await
            .unwrap();
        assert_eq!(prepared_on_server(&client).await, 1, "prepared twice");
        statements
            .prepare(&client, "SELECT $1::int8 + 2")
            .await
            .unwrap();
        assert_eq!(statements.len(), 2);
        assert_eq!(prepared_on_server(&client).await, 2);
        let row = client.query_one(&again, &[&41_i64]).await.unwrap();
        assert_eq!(row.get::<_, i64>(0), 42);
        // A text the server refuses is not kept.
        let refused = statements
            .prepare(&client, "SELECT * FROM no_such_table")
            .await;
        assert!(refused.is_err());
        assert_eq!(statements.len(), 2);
    }

    #[tokio::test]
    async fn a_recycled_connection_keeps_its_statements() {
        let config = tokio_postgres::Config::from_str(&crate::testing::pg_admin_url()).unwrap();
        let manager = Manager(deadpool_postgres::Manager::from_config(
            config,
            tokio_postgres::NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        ));
        let pool = Pool::builder(manager)
            .max_size(1)
            .runtime(Runtime::Tokio1)
            .build()
            .unwrap();
        let sql = "SELECT $1::text || '!'";
        {
            let client = pool.get().await.unwrap();
            client.statements().prepare(&client, sql).await.unwrap();
        }
        let mut client = pool.get().await.unwrap();
        assert_eq!(client.statements().len(), 1);
        let statement = client.statements().prepare(&client, sql).await.unwrap();
        assert_eq!(
            prepared_on_server(&client).await,
            1,
            "the recycled connection prepared it again"
        );
        // The statement runs inside a transaction too, which sees the same statements.
        let tx = client.transaction().await.unwrap();
        let row = tx.query_one(&statement, &[&"kept"]).await.unwrap();
        assert_eq!(row.get::<_, String>(0), "kept!");
        assert_eq!(tx.statements().len(), 1);
        tx.rollback().await.unwrap();
    }
}
