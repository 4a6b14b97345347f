//! Durable storage for oncegate: the Store trait and its SQLite and PostgreSQL backends.
