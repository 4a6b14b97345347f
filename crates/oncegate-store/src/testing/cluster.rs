//! Throwaway PostgreSQL clusters a test starts for itself: a primary, a streaming standby it
//! replicates to synchronously, a kill -9 and a promotion. Each cluster lives in a temporary
//! directory, listens on a free port of 127.0.0.1 (and a socket in its directory), and is
//! stopped when dropped. Run as root, the server runs as the `postgres` user (PostgreSQL refuses
//! root); run as a plain user, as that user.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// One PostgreSQL server of a test's own.
pub struct Cluster {
    /// The TCP port on 127.0.0.1.
    pub port: u16,
    dir: PathBuf,
    postmaster: Option<Child>,
    _home: TempDir,
}

/// The directory holding `initdb`, `postgres` and `pg_basebackup`: `pg_config --bindir`, else
/// the newest `/usr/lib/postgresql/<version>/bin`.
fn bin_dir() -> PathBuf {
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if dir.join("initdb").exists() && dir.join("pg_basebackup").exists() {
            return dir;
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_string_lossy().parse().ok()?;
            Some((v, e.path().join("bin")))
        })
        .filter(|(_, bin)| bin.join("initdb").exists())
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).unwrap_or_else(|| {
        panic!("this test starts PostgreSQL clusters of its own and needs the server's programs (initdb, postgres, pg_basebackup): install Debian's `postgresql` package")
    })
}

/// The uid and gid to run the server as: the `postgres` user's when running as root.
fn run_as() -> Option<(u32, u32)> {
    let probe = tempfile::tempfile().expect("a temporary file");
    if probe.metadata().expect("its metadata").uid() != 0 {
        return None;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").expect("/etc/passwd");
    let line = passwd
        .lines()
        .find(|l| l.starts_with("postgres:"))
        .expect("run as root, this test runs PostgreSQL as the `postgres` user, which does not exist: install Debian's `postgresql` package");
    let fields: Vec<&str> = line.split(':').collect();
    Some((
        fields[2].parse().expect("a uid"),
        fields[3].parse().expect("a gid"),
    ))
}

/// A command of the server's, run as the server's user.
fn command(program: &str) -> Command {
    let path = bin_dir().join(program);
    match run_as() {
        None => Command::new(path),
        Some((uid, gid)) => {
            let mut c = Command::new("setpriv");
            c.args([
                &format!("--reuid={uid}"),
                &format!("--regid={gid}"),
                "--clear-groups",
                "--",
            ])
            .arg(path);
            c
        }
    }
}

fn run(mut c: Command, what: &str) {
    let out = c.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A temporary home the server's user may write to.
fn home() -> (TempDir, PathBuf) {
    let home = tempfile::Builder::new()
        .prefix("oncegate-pg-")
        .tempdir()
        .expect("a temporary directory");
    let dir = home.path().join("data");
    if let Some((uid, gid)) = run_as() {
        std::os::unix::fs::chown(home.path(), Some(uid), Some(gid)).expect("chown the home");
    }
    (home, dir)
}

fn append(path: &Path, text: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    f.write_all(text.as_bytes())
        .expect("write the configuration");
}

impl Cluster {
    /// A new primary. With `sync_standby`, a commit is acknowledged only once the standby of
    /// that name has it (`synchronous_standby_names`).
    pub async fn primary(sync_standby: Option<&str>) -> Cluster {
        Cluster::primary_at(None, sync_standby, "").await
    }

    /// A new primary whose data directory is `data` (a small filesystem the test mounted, say),
    /// with `settings` appended to its configuration. Its WAL comes in 1 MiB segments, so a
    /// small disk holds it.
    pub async fn primary_at(
        data: Option<&Path>,
        sync_standby: Option<&str>,
        settings: &str,
    ) -> Cluster {
        let (home, dir) = home();
        let dir = match data {
            Some(d) => {
                if let Some((uid, gid)) = run_as() {
                    std::os::unix::fs::chown(d, Some(uid), Some(gid)).expect("chown the data disk");
                }
                d.join("data")
            }
            None => dir,
        };
        let mut initdb = command("initdb");
        initdb.arg("-D").arg(&dir).args([
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--no-sync",
            "--wal-segsize=1",
        ]);
        run(initdb, "initdb");
        let port = super::free_port();
        append(
            &dir.join("postgresql.conf"),
            &format!(
                "\nport = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
                 wal_level = replica\nmax_wal_senders = 5\nhot_standby = on\nfsync = on\n\
                 synchronous_standby_names = '{}'\n{settings}\n",
                home.path().display(),
                sync_standby.unwrap_or("")
            ),
        );
        let mut cluster = Cluster {
            port,
            dir,
            postmaster: None,
            _home: home,
        };
        cluster.start().await;
        cluster
    }

    /// A streaming standby of `primary`, named `name` (its `application_name`), started and
    /// caught up.
    pub async fn standby_of(primary: &Cluster, name: &str) -> Cluster {
        let (home, dir) = home();
        let mut backup = command("pg_basebackup");
        backup
            .args(["-h", "127.0.0.1", "-p", &primary.port.to_string()])
            .args(["-U", "postgres", "-X", "stream", "--no-sync", "-D"])
            .arg(&dir);
        run(backup, "pg_basebackup");
        let port = super::free_port();
        append(
            &dir.join("postgresql.auto.conf"),
            &format!(
                "\nport = {port}\nunix_socket_directories = '{}'\nsynchronous_standby_names = ''\n\
                 primary_conninfo = 'host=127.0.0.1 port={} user=postgres application_name={name}'\n",
                home.path().display(),
                primary.port
            ),
        );
        std::fs::write(dir.join("standby.signal"), "").expect("standby.signal");
        if let Some((uid, gid)) = run_as() {
            for f in ["postgresql.auto.conf", "standby.signal"] {
                std::os::unix::fs::chown(dir.join(f), Some(uid), Some(gid)).expect("chown");
            }
        }
        let mut cluster = Cluster {
            port,
            dir,
            postmaster: None,
            _home: home,
        };
        cluster.start().await;
        // Caught up and streaming: the primary sees it by name.
        let deadline = Instant::now() + Duration::from_secs(30);
        let admin = primary.client().await;
        loop {
            let rows = admin
                .query(
                    "SELECT 1 FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming'",
                    &[&name],
                )
                .await
                .expect("pg_stat_replication");
            if !rows.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the standby {name} never streamed"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        cluster
    }

    async fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log())
            .expect("the server's log file");
        let mut postgres = command("postgres");
        postgres
            .arg("-D")
            .arg(&self.dir)
            .stdout(log.try_clone().expect("the log file"))
            .stderr(log);
        self.postmaster = Some(postgres.spawn().expect("postgres starts"));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if tokio_postgres::connect(&self.url(), tokio_postgres::NoTls)
                .await
                .is_ok()
            {
                return;
            }
            if let Some(Ok(Some(status))) = self.postmaster.as_mut().map(Child::try_wait) {
                panic!(
                    "postgres exited with {status} on port {}; its log:\n{}",
                    self.port,
                    std::fs::read_to_string(self.log()).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "postgres did not accept connections on port {} within 30 s",
                self.port
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The server's log (outside its data directory, which may be on a full disk).
    fn log(&self) -> PathBuf {
        self._home.path().join("postgres.log")
    }

    /// An admin URL of the cluster's `postgres` database, on TCP.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// A plain client for set-up statements and checks.
    pub async fn client(&self) -> tokio_postgres::Client {
        super::pg_admin(&self.url()).await
    }

    /// Kills the postmaster with SIGKILL, as a crash would; its backends exit on their own.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.postmaster.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again if it stopped (a PANIC it could not recover from, say), as a
    /// service manager would; returns whether it had stopped.
    pub async fn restart_if_stopped(&mut self) -> bool {
        let stopped = match self.postmaster.as_mut() {
            None => true,
            Some(child) => child.try_wait().expect("the postmaster's status").is_some(),
        };
        if stopped {
            self.start().await;
        }
        stopped
    }

    /// Promotes a standby to primary and waits until it accepts writes.
    pub async fn promote(&self) {
        let client = self.client().await;
        let promoted: bool = client
            .query_one("SELECT pg_promote(true, 60)", &[])
            .await
            .expect("pg_promote")
            .get(0);
        assert!(promoted, "the standby was promoted");
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(mut child) = self.postmaster.take() {
            // An immediate stop: the test is over, nothing need be flushed.
            let mut stop = command("pg_ctl");
            stop.arg("-D")
                .arg(&self.dir)
                .args(["stop", "-m", "immediate", "-w"])
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let _ = stop.status();
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
