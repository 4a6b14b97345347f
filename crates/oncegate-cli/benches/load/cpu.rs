//! CPU time and disk writes per decision, from `/proc`: the server process's own, and that of
//! the PostgreSQL backends connected to its database. Throughput on a shared machine moves by ±10 % from run
//! to run; the CPU a decision costs moves much less, and says which side of the socket it goes to.

use std::collections::HashMap;

/// The CPU time (user + system) of `pid` so far, in clock ticks; `None` when it is not a
/// process of this machine.
fn ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: the fields start after the last ')'.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // `utime` and `stime` are fields 14 and 15 of stat(5); the state (field 3) is fields[0].
    let user: u64 = fields.get(11)?.parse().ok()?;
    let system: u64 = fields.get(12)?.parse().ok()?;
    Some(user + system)
}

/// The bytes `pid` caused to be written to storage so far (`write_bytes` of proc(5)'s `io`).
fn written(pid: u32) -> Option<u64> {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    io.lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))?
        .trim()
        .parse()
        .ok()
}

/// The times the threads of `pid` gave up the CPU so far: to wait (voluntary, a worker with
/// nothing to run going to sleep) and by preemption (involuntary), summed over its threads
/// (`voluntary_ctxt_switches` and `nonvoluntary_ctxt_switches` of proc(5)'s `status`).
fn switches(pid: u32) -> (u64, u64) {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return (0, 0);
    };
    let mut sum = (0, 0);
    for task in tasks.flatten() {
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else {
            continue;
        };
        for line in status.lines() {
            let count = |prefix: &str| line.strip_prefix(prefix)?.trim().parse::<u64>().ok();
            if let Some(n) = count("voluntary_ctxt_switches:") {
                sum.0 += n;
            } else if let Some(n) = count("nonvoluntary_ctxt_switches:") {
                sum.1 += n;
            }
        }
    }
    sum
}

/// Microseconds per clock tick (`getconf CLK_TCK`, 100 on Linux).
fn tick_us() -> f64 {
    static TICK: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICK.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse::<f64>().ok())
            .map_or(10_000.0, |hz| 1e6 / hz)
    })
}

/// What a side's processes had used at one moment.
pub struct Reading {
    server: u64,
    written: u64,
    /// The server's context switches (voluntary, involuntary), of the threads alive now.
    switches: (u64, u64),
    backends: HashMap<u32, u64>,
}

/// Reads the CPU of one side: its server's processes and, on PostgreSQL, its database's
/// backends.
pub struct Meter<'a> {
    servers: Vec<u32>,
    database: Option<(&'a tokio_postgres::Client, String)>,
}

impl<'a> Meter<'a> {
    /// `database`: the admin connection and the URL of the side's PostgreSQL database.
    pub fn new(
        servers: Vec<u32>,
        database: Option<(&'a tokio_postgres::Client, &str)>,
    ) -> Meter<'a> {
        let database = database.map(|(admin, url)| {
            let name = url.rsplit('/').next().unwrap_or_default();
            (admin, name.split('?').next().unwrap_or_default().to_owned())
        });
        Meter { servers, database }
    }

    pub async fn read(&self) -> Reading {
        let mut backends = HashMap::new();
        if let Some((admin, name)) = &self.database {
            let rows = admin
                .query(
                    "SELECT pid FROM pg_stat_activity WHERE datname = $1",
                    &[name],
                )
                .await
                .unwrap_or_default();
            for row in rows {
                let pid: i32 = row.get(0);
                if let Some(t) = u32::try_from(pid).ok().and_then(ticks) {
                    backends.insert(pid as u32, t);
                }
            }
        }
        let mut reading = Reading {
            server: 0,
            written: 0,
            switches: (0, 0),
            backends,
        };
        for &pid in &self.servers {
            reading.server += ticks(pid).unwrap_or(0);
            reading.written += written(pid).unwrap_or(0);
            let (voluntary, preempted) = switches(pid);
            reading.switches.0 += voluntary;
            reading.switches.1 += preempted;
        }
        reading
    }
}

impl Reading {
    /// The side's PostgreSQL backends at this reading.
    pub fn backends(&self) -> Vec<u32> {
        self.backends.keys().copied().collect()
    }
}

/// CPU used between readings, summed over slices.
#[derive(Default)]
pub struct Used {
    server: u64,
    written: u64,
    switches: (u64, u64),
    backends: u64,
    decisions: u64,
}

impl Used {
    /// Adds what was used from `before` to `after` for `decisions` decisions. A backend that
    /// appeared in between counts from zero; one that left takes its ticks with it.
    pub fn add(&mut self, before: &Reading, after: &Reading, decisions: u64) {
        self.server += after.server.saturating_sub(before.server);
        self.written += after.written.saturating_sub(before.written);
        self.switches.0 += after.switches.0.saturating_sub(before.switches.0);
        self.switches.1 += after.switches.1.saturating_sub(before.switches.1);
        for (pid, t) in &after.backends {
            self.backends += t.saturating_sub(before.backends.get(pid).copied().unwrap_or(0));
        }
        self.decisions += decisions;
    }

    /// Microseconds of the server's CPU per decision, and of PostgreSQL's.
    pub fn per_decision(&self) -> (f64, f64) {
        let per = |t: u64| t as f64 * tick_us() / self.decisions.max(1) as f64;
        (per(self.server), per(self.backends))
    }

    /// The server's context switches per decision: the times a thread went to sleep with
    /// nothing to run, and the times one was preempted.
    pub fn switches(&self) -> (f64, f64) {
        let per = |n: u64| n as f64 / self.decisions.max(1) as f64;
        (per(self.switches.0), per(self.switches.1))
    }

    /// KiB the server process wrote to storage per decision (SQLite's WAL and checkpoints).
    pub fn written_kib(&self) -> f64 {
        self.written as f64 / 1024.0 / self.decisions.max(1) as f64
    }
}
