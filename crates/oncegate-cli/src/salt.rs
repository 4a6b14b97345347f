//! Where the key salt comes from: the environment or a file, never the contract.

use anyhow::{bail, Context, Result};

/// The secret salt sensitive fields are hashed under (`ONCEGATE_KEY_SALT` or
/// `ONCEGATE_KEY_SALT_FILE`). `None` when neither is set.
pub fn read() -> Result<Option<Vec<u8>>> {
    if let Ok(s) = std::env::var("ONCEGATE_KEY_SALT") {
        if s.is_empty() {
            bail!("ONCEGATE_KEY_SALT is set but empty");
        }
        return Ok(Some(s.into_bytes()));
    }
    if let Ok(path) = std::env::var("ONCEGATE_KEY_SALT_FILE") {
        let bytes =
            std::fs::read(&path).with_context(|| format!("reading the key salt from {path}"))?;
        let trimmed = bytes.trim_ascii().to_vec();
        if trimmed.is_empty() {
            bail!("the key salt file {path} is empty");
        }
        return Ok(Some(trimmed));
    }
    Ok(None)
}
