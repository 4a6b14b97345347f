//! Where a store lives: the store strings oncegate accepts, checked before anything is opened.
//!
//! A store string names a SQLite file (`sqlite://path` or `sqlite:path`) or a PostgreSQL
//! database (a `postgres://…`/`postgresql://…` URL, or a libpq `key=value` string such as
//! `host=a,b port=5432 dbname=oncegate target_session_attrs=read-write`). Anything else is
//! refused with the list of accepted forms: a store string taken for a file name would
//! otherwise serve a new, empty SQLite store from the working directory, and every delivery
//! decided there would be decided without the history that lives in the intended store.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use crate::error::StoreError;

/// The forms a store string may take, as the refusal lists them.
pub const ACCEPTED_FORMS: &str = "sqlite://PATH (or sqlite:PATH), postgres://… or postgresql://… \
     (a PostgreSQL URL), or a libpq key=value string (host=… port=… dbname=… user=…)";

/// A checked store string: the backend it names and how to reach it.
///
/// ```
/// use oncegate_store::StoreLocation;
///
/// let file: StoreLocation = "sqlite://data/oncegate.db".parse().unwrap();
/// assert_eq!(file.backend(), "sqlite");
/// assert_eq!(file.to_string(), "SQLite file data/oncegate.db");
///
/// let pg: StoreLocation = "host=10.0.0.1,10.0.0.2 port=5432 dbname=og user=og password=s3cret \
///     target_session_attrs=read-write"
///     .parse()
///     .unwrap();
/// assert_eq!(pg.backend(), "postgres");
/// // Said at start-up, so the password never shows.
/// assert_eq!(
///     pg.to_string(),
///     "PostgreSQL database og on 10.0.0.1:5432,10.0.0.2:5432 as og (target_session_attrs=read-write)"
/// );
///
/// // A string that is neither is refused, never taken for a file name.
/// let refused = "oncegate.db".parse::<StoreLocation>().unwrap_err();
/// assert!(refused.to_string().contains("sqlite://PATH"));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// A SQLite file, created when missing.
    Sqlite(PathBuf),
    /// A PostgreSQL database, as a URL or a libpq `key=value` string.
    Postgres(String),
}

impl StoreLocation {
    /// The backend's name, as [`Store::backend`](crate::Store::backend) answers it.
    pub fn backend(&self) -> &'static str {
        match self {
            StoreLocation::Sqlite(_) => "sqlite",
            StoreLocation::Postgres(_) => "postgres",
        }
    }
}

impl FromStr for StoreLocation {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<Self, StoreError> {
        let refused = |why: String| {
            StoreError::Config(format!(
                "the store {s:?} {why}; a store is one of: {ACCEPTED_FORMS}"
            ))
        };
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            tokio_postgres::Config::from_str(s)
                .map_err(|e| refused(format!("is not a valid PostgreSQL URL ({e})")))?;
            return Ok(StoreLocation::Postgres(s.to_owned()));
        }
        if let Some(path) = s
            .strip_prefix("sqlite://")
            .or_else(|| s.strip_prefix("sqlite:"))
        {
            if path.is_empty() {
                return Err(refused("names no SQLite file".to_owned()));
            }
            return Ok(StoreLocation::Sqlite(PathBuf::from(path)));
        }
        if s.trim().is_empty() {
            return Err(refused("is empty".to_owned()));
        }
        // A libpq string is `key=value` pairs, each key one libpq knows: the first word must
        // be such a pair, and the whole must parse (an unknown key is refused by the parser).
        let first = s.split_whitespace().next().unwrap_or_default();
        if first.split_once('=').is_some_and(|(k, _)| {
            !k.is_empty() && k.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
        }) {
            tokio_postgres::Config::from_str(s)
                .map_err(|e| refused(format!("is not a valid libpq key=value string ({e})")))?;
            return Ok(StoreLocation::Postgres(s.to_owned()));
        }
        Err(refused(
            "is neither a URL nor a libpq key=value string".to_owned(),
        ))
    }
}

impl fmt::Display for StoreLocation {
    /// What start-up logs say: the file, or the database, hosts and user, never the password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreLocation::Sqlite(path) => write!(f, "SQLite file {}", path.display()),
            StoreLocation::Postgres(s) => {
                let Ok(config) = tokio_postgres::Config::from_str(s) else {
                    return f.write_str("PostgreSQL database");
                };
                let ports = config.get_ports();
                let hosts: Vec<String> = config
                    .get_hosts()
                    .iter()
                    .enumerate()
                    .map(|(i, host)| {
                        let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
                        match host {
                            tokio_postgres::config::Host::Tcp(h) => format!("{h}:{port}"),
                            #[cfg(unix)]
                            tokio_postgres::config::Host::Unix(p) => {
                                format!("{}/.s.PGSQL.{port}", p.display())
                            }
                        }
                    })
                    .collect();
                write!(f, "PostgreSQL database")?;
                if let Some(db) = config.get_dbname() {
                    write!(f, " {db}")?;
                }
                if !hosts.is_empty() {
                    write!(f, " on {}", hosts.join(","))?;
                }
                if let Some(user) = config.get_user() {
                    write!(f, " as {user}")?;
                }
                if config.get_target_session_attrs()
                    == tokio_postgres::config::TargetSessionAttrs::ReadWrite
                {
                    write!(f, " (target_session_attrs=read-write)")?;
                }
                Ok(())
            }
        }
    }
}

impl fmt::Debug for StoreLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StoreLocation({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(s: &str) -> String {
        s.parse::<StoreLocation>().unwrap_err().to_string()
    }

    #[test]
    fn every_accepted_form_names_its_backend() {
        for (s, backend) in [
            ("sqlite://oncegate.db", "sqlite"),
            ("sqlite:/var/lib/oncegate/o.db", "sqlite"),
            ("postgres://u@127.0.0.1:5432/db", "postgres"),
            (
                "postgresql://u@h1,h2/db?target_session_attrs=read-write",
                "postgres",
            ),
            (
                "host=127.0.0.1,127.0.0.1 port=5432,5433 dbname=og",
                "postgres",
            ),
            ("dbname=og", "postgres"),
            ("host=/run/postgresql dbname=og user=postgres", "postgres"),
        ] {
            let location: StoreLocation = s.parse().unwrap_or_else(|e| panic!("{s}: {e}"));
            assert_eq!(location.backend(), backend, "{s}");
        }
    }

    #[test]
    fn anything_else_is_refused_with_the_accepted_forms() {
        for s in [
            "oncegate.db",
            "./data/oncegate.db",
            "",
            "  ",
            "sqlite://",
            "mysql://root@localhost/og",
            "host = 127.0.0.1",
            "hots=127.0.0.1 dbname=og",
            "postgres://u@h:notaport/db",
        ] {
            let e = refused(s);
            assert!(e.contains(ACCEPTED_FORMS), "{s}: {e}");
            assert!(e.contains(&format!("{s:?}")), "{s}: names the string: {e}");
        }
        assert!(
            refused("hots=x dbname=og").contains("hots"),
            "names the unknown key"
        );
    }

    #[test]
    fn the_description_never_shows_a_password() {
        for s in [
            "postgres://og:s3cret@db.internal:6432/og",
            "host=db.internal port=6432 user=og password=s3cret dbname=og",
        ] {
            let shown = s.parse::<StoreLocation>().unwrap().to_string();
            assert!(!shown.contains("s3cret"), "{shown}");
            assert_eq!(shown, "PostgreSQL database og on db.internal:6432 as og");
        }
    }
}
