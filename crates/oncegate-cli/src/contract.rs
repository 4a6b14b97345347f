//! Finding and loading the contract file: the one place the CLI reads it, so every command
//! finds it the same way (the flag, then `ONCEGATE_CONTRACT`, then `./oncegate.toml`) and
//! reports the same errors the same way.

use anyhow::{anyhow, bail, Context, Result};
use oncegate_core::contract::{self, Contract};
use std::path::{Path, PathBuf};

/// The environment variable naming the contract when the command line does not.
pub const ENV: &str = "ONCEGATE_CONTRACT";

/// The file looked for in the working directory when neither the flag nor [`ENV`] names one.
pub const LOCAL: &str = "oncegate.toml";

/// Where a contract path came from, to say so when it cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Flag,
    Env,
    Local,
}

/// The contract a command uses: `flag` when given (`flag_name` is how its help spells it:
/// `--contract`, `FILE`), else the non-empty `ONCEGATE_CONTRACT`, else `./oncegate.toml` when
/// it exists. With none of them the error names all three and how to write one.
pub fn discover(flag: Option<&Path>, flag_name: &str) -> Result<(PathBuf, Source)> {
    let env = std::env::var_os(ENV).filter(|v| !v.is_empty());
    let cwd = std::env::current_dir().context("reading the working directory")?;
    discover_in(flag, flag_name, env.as_deref().map(Path::new), &cwd)
}

/// [`discover`] with the environment's value and the working directory (`dir`, where a
/// found `oncegate.toml` is returned relative to) given.
fn discover_in(
    flag: Option<&Path>,
    flag_name: &str,
    env: Option<&Path>,
    dir: &Path,
) -> Result<(PathBuf, Source)> {
    if let Some(path) = flag {
        return Ok((path.to_owned(), Source::Flag));
    }
    if let Some(path) = env {
        return Ok((path.to_owned(), Source::Env));
    }
    if dir.join(LOCAL).is_file() {
        return Ok((PathBuf::from(LOCAL), Source::Local));
    }
    bail!(
        "no contract found: no {flag_name} was given, {ENV} is not set, and there is no \
         {LOCAL} in {}. Write one for your provider with `oncegate init <provider>`, or name \
         one with {flag_name}{}",
        dir.display(),
        if flag_name.starts_with("--") {
            " PATH"
        } else {
            ""
        }
    )
}

/// Finds the contract as [`discover`] does and loads it; its path is returned beside it.
pub fn find_and_load(flag: Option<&Path>, flag_name: &str) -> Result<(PathBuf, Contract)> {
    let (path, source) = discover(flag, flag_name)?;
    let contract = load_from(&path, source)?;
    Ok((path, contract))
}

/// [`find_and_load`] for the commands whose flag is `--contract`.
pub fn find(flag: Option<&Path>) -> Result<Contract> {
    find_and_load(flag, "--contract").map(|(_, contract)| contract)
}

/// Loads the contract at `path`, named on the command line.
pub fn load(path: &Path) -> Result<Contract> {
    load_from(path, Source::Flag)
}

fn load_from(path: &Path, source: Source) -> Result<Contract> {
    let text = std::fs::read_to_string(path).with_context(|| match source {
        Source::Flag => format!("reading the contract {}", path.display()),
        Source::Env => format!("reading the contract {} (named by {ENV})", path.display()),
        Source::Local => format!("reading the contract {}", path.display()),
    })?;
    let contract =
        contract::parse(&path.display().to_string(), &text).map_err(|e| anyhow!("{e}"))?;
    for w in &contract.warnings {
        errln!("warning: {w}");
    }
    Ok(contract)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_comes_first_then_the_environment_then_the_working_directory() {
        let dir = tempfile::tempdir().unwrap();
        let flag = Path::new("flag.toml");
        let env = Path::new("env.toml");
        let check = |flag: Option<&Path>, env: Option<&Path>, expected: (&str, Source)| {
            let (path, source) = discover_in(flag, "--contract", env, dir.path()).unwrap();
            assert_eq!((path.to_str().unwrap(), source), expected);
        };
        std::fs::write(dir.path().join(LOCAL), "").unwrap();
        check(Some(flag), Some(env), ("flag.toml", Source::Flag));
        check(None, Some(env), ("env.toml", Source::Env));
        check(None, None, ("oncegate.toml", Source::Local));
    }

    #[test]
    fn with_no_contract_the_error_names_what_was_tried_and_suggests_init() {
        let dir = tempfile::tempdir().unwrap();
        let e = discover_in(None, "--contract", None, dir.path())
            .unwrap_err()
            .to_string();
        for part in [
            "no --contract was given",
            "ONCEGATE_CONTRACT is not set",
            "no oncegate.toml in",
            &dir.path().display().to_string(),
            "oncegate init <provider>",
        ] {
            assert!(e.contains(part), "{part:?} missing from: {e}");
        }
    }
}
