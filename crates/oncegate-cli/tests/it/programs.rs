//! Programs of the machine a test runs (python3, systemd-analyze), found on `PATH` first so a
//! missing one fails the test by naming the Debian package to install, not with "No such file".

use std::path::PathBuf;
use std::process::Command;

/// A command for `name`, found on `PATH`; panics naming `package` and what the test needs the
/// program for when it is not there (`scripts/test` installs it, as root).
pub fn program(name: &str, package: &str, needed_for: &str) -> Command {
    match on_path(name) {
        Some(path) => Command::new(path),
        None => panic!(
            "{name} is not on PATH; it is needed {needed_for}. Install Debian's {package} \
             (as root: apt-get install -y {package}; scripts/test does it)"
        ),
    }
}

fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}
