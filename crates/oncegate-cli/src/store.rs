//! The store a command works on, chosen the same way by every command: `--store`, else
//! `ONCEGATE_STORE`, else the contract's `settings.store` (the contract the command reads, or
//! the one every command finds: `ONCEGATE_CONTRACT`, then `./oncegate.toml`), else
//! `sqlite://oncegate.db`. The string is checked before anything opens
//! ([`oncegate::store::StoreLocation`]): a string that names no store is refused with the
//! accepted forms. A command acts on it through a [`Gate`] over it, with the contract it read
//! (or the one every command finds, else an empty one: reading and operator actions need no
//! provider).

use std::sync::Arc;

use anyhow::{Context, Result};
use oncegate::store::{Store, StoreLocation};
use oncegate::{Gate, GateConfig};
use oncegate_core::contract::Contract;

/// The store when nothing names one.
pub const DEFAULT: &str = "sqlite://oncegate.db";

/// `--store`, shared by every command that reads or writes the store.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct StoreArg {
    /// The store: sqlite://PATH, postgres://… or a libpq key=value string (default: the
    /// contract's settings.store, else sqlite://oncegate.db).
    #[arg(long = "store", env = "ONCEGATE_STORE", value_name = "STORE")]
    pub store: Option<String>,
}

impl StoreArg {
    /// The store this command uses; `contract` is the one it read, if it reads one (otherwise
    /// the contract is looked for as every command looks for it, and not finding one is fine).
    pub fn location(&self, contract: Option<&Contract>) -> Result<StoreLocation> {
        let chosen = match (&self.store, contract) {
            (Some(s), _) => s.clone(),
            (None, Some(c)) => c
                .settings
                .store
                .clone()
                .unwrap_or_else(|| DEFAULT.to_owned()),
            (None, None) => match crate::contract::discover(None, "--contract") {
                Ok(_) => crate::contract::find(None)?
                    .settings
                    .store
                    .unwrap_or_else(|| DEFAULT.to_owned()),
                Err(_) => DEFAULT.to_owned(),
            },
        };
        Ok(chosen.parse()?)
    }

    /// Opens [`location`](Self::location)'s store (migrating its schema).
    pub async fn open(&self, contract: Option<&Contract>) -> Result<Arc<Store>> {
        let location = self.location(contract)?;
        oncegate::store::open_at(&location)
            .await
            .with_context(|| format!("opening the store ({location})"))
    }

    /// A gate over [`location`](Self::location)'s store (its schema migrated), deciding with
    /// `contract` (else the contract every command finds, else an empty one: its settings'
    /// defaults, such as the lease) and `salt` (empty where nothing is keyed).
    pub async fn gate(&self, contract: Option<&Contract>, salt: Vec<u8>) -> Result<Gate> {
        let location = self.location(contract)?;
        let contract = match contract {
            Some(c) => c.clone(),
            None => crate::contract::find(None)
                .or_else(|_| oncegate_core::contract::parse("(no contract)", ""))?,
        };
        let store = oncegate::store::open_at(&location)
            .await
            .with_context(|| format!("opening the store ({location})"))?;
        Ok(Gate::new(GateConfig::new(Arc::new(contract), store, salt)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contract(store: Option<&str>) -> Contract {
        let settings = store
            .map(|s| format!("[settings]\nstore = \"{s}\"\n"))
            .unwrap_or_default();
        oncegate_core::contract::parse("t.toml", &settings).expect("a contract")
    }

    #[test]
    fn the_flag_then_the_contract_then_the_default() {
        let flag = StoreArg {
            store: Some("postgres://og@db/og".into()),
        };
        let none = StoreArg::default();
        let pg = contract(Some("sqlite:///var/lib/og.db"));
        assert_eq!(flag.location(Some(&pg)).unwrap().backend(), "postgres");
        assert_eq!(
            none.location(Some(&pg)).unwrap().to_string(),
            "SQLite file /var/lib/og.db"
        );
        assert_eq!(
            none.location(Some(&contract(None))).unwrap().to_string(),
            "SQLite file oncegate.db"
        );
    }

    #[test]
    fn a_string_that_names_no_store_is_refused() {
        let bad = StoreArg {
            store: Some("oncegate.db".into()),
        };
        let e = bad.location(Some(&contract(None))).unwrap_err().to_string();
        assert!(e.contains("sqlite://PATH"), "{e}");
    }
}
