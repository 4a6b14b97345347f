//! Loading the contract file: the one place the CLI reads it, so every command reports the
//! same errors the same way.

use anyhow::{anyhow, Context, Result};
use oncegate_core::contract::{self, Contract};
use std::path::Path;

pub fn load(path: &Path) -> Result<Contract> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the contract {}", path.display()))?;
    let contract =
        contract::parse(&path.display().to_string(), &text).map_err(|e| anyhow!("{e}"))?;
    for w in &contract.warnings {
        errln!("warning: {w}");
    }
    Ok(contract)
}
