//! `oncegate init <provider>`: writes a starting contract from the catalog (`contracts/`),
//! embedded in the binary so it works wherever the binary is.

use crate::exit::Status;
use anyhow::{bail, Context, Result};
use std::path::Path;

/// The catalog: each provider's contract, as `contracts/<provider>.toml` holds it.
pub const CATALOG: &[(&str, &str)] = &[
    ("adyen", include_str!("../../../contracts/adyen.toml")),
    ("github", include_str!("../../../contracts/github.toml")),
    ("mollie", include_str!("../../../contracts/mollie.toml")),
    ("paddle", include_str!("../../../contracts/paddle.toml")),
    ("razorpay", include_str!("../../../contracts/razorpay.toml")),
    ("shopify", include_str!("../../../contracts/shopify.toml")),
    ("slack", include_str!("../../../contracts/slack.toml")),
    ("square", include_str!("../../../contracts/square.toml")),
    ("stripe", include_str!("../../../contracts/stripe.toml")),
];

/// Lists the catalog's providers, one a line.
pub fn list() -> Result<Status> {
    for (name, _) in CATALOG {
        outln!("{name}")?;
    }
    Ok(Status::Success)
}

/// Writes `provider`'s contract to `out` (default `<provider>.toml`), refusing to overwrite an
/// existing file unless `force`.
pub fn run(provider: &str, out: Option<&Path>, force: bool) -> Result<Status> {
    let Some((name, text)) = CATALOG.iter().find(|(n, _)| *n == provider) else {
        let known: Vec<&str> = CATALOG.iter().map(|(n, _)| *n).collect();
        bail!(
            "provider {provider:?} is not in the catalog: use one of {} (`oncegate init --list`)",
            known.join(", ")
        );
    };
    let default = format!("{name}.toml");
    let path = out.unwrap_or_else(|| Path::new(&default));
    if path.exists() && !force {
        bail!(
            "{} exists: pass --force to overwrite it, or --out to write elsewhere",
            path.display()
        );
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    outln!(
        "wrote {}: the {name} contract from the catalog; `oncegate check {}` prints its key hierarchies",
        path.display(),
        path.display()
    )?;
    Ok(Status::Success)
}
