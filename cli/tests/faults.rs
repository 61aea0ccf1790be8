//! Fault injection (issue 16): `slicesched serve` as a real process on a **private**
//! Postgres server this test starts itself (its own temporary folder and port; the
//! shared server on 5432 is never touched). Postgres is stopped and restarted at each
//! phase of a run (queued, starting, progress writes, final store) and the service is
//! killed with SIGKILL at seeded random points and started again. Every run must end in
//! a truthful terminal state (succeeded with all its records, or not succeeded with
//! none), none may stay queued or running, and the queue keeps starting runs.
//!
//! Needs Debian's `postgresql` (initdb, pg_ctl); skipped with a note when absent.
//! `FAULT_SEED` picks the kill points (default 16).

mod common;

use serde_json::Value;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TOKEN: &str = "fault-test-admin-token-0123456789";

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// A private Postgres server: initdb into a temporary folder, pg_ctl on its own port.
struct Pg {
    bin: PathBuf,
    data: PathBuf,
    port: u16,
    /// Root runs the server as `postgres` (it refuses to run as root).
    as_user: Option<&'static str>,
}

impl Pg {
    fn start_new() -> Option<Pg> {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .flatten()
            .map(|e| e.path().join("bin"))
            .filter(|b| b.join("initdb").is_file())
            .max()?;
        let data = std::env::temp_dir().join(format!("slicesched-faults-pg-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data);
        std::fs::create_dir_all(&data).unwrap();
        let root = unsafe_is_root();
        let pg = Pg { bin, data, port: free_port(), as_user: root.then_some("postgres") };
        if root {
            assert!(Command::new("chown").arg("-R").arg("postgres").arg(&pg.data).status().unwrap().success());
        }
        let ok = pg
            .cmd("initdb")
            .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "-D"])
            .arg(&pg.data)
            .stdout(Stdio::null())
            .status()
            .unwrap()
            .success();
        assert!(ok, "initdb");
        pg.up();
        Some(pg)
    }

    fn cmd(&self, tool: &str) -> Command {
        match self.as_user {
            Some(u) => {
                let mut c = Command::new("runuser");
                c.args(["-u", u, "--"]).arg(self.bin.join(tool));
                c
            }
            None => Command::new(self.bin.join(tool)),
        }
    }

    fn up(&self) {
        let opts =
            format!("-p {} -c listen_addresses=127.0.0.1 -k {} -c max_connections=100", self.port, self.data.display());
        let ok = self
            .cmd("pg_ctl")
            .arg("-D")
            .arg(&self.data)
            .args(["-l"])
            .arg(self.data.join("log"))
            .args(["-w", "-t", "60", "-o", &opts, "start"])
            .stdout(Stdio::null())
            .status()
            .unwrap()
            .success();
        assert!(ok, "pg_ctl start");
    }

    /// Stops the server now: open connections are cut (an outage, not a pause).
    fn down(&self) {
        let ok = self
            .cmd("pg_ctl")
            .arg("-D")
            .arg(&self.data)
            .args(["-m", "immediate", "-w", "stop"])
            .stdout(Stdio::null())
            .status()
            .unwrap()
            .success();
        assert!(ok, "pg_ctl stop");
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/slicesched_faults", self.port)
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        let _ = self.cmd("pg_ctl").arg("-D").arg(&self.data).args(["-m", "immediate", "stop"]).output();
        let _ = std::fs::remove_dir_all(&self.data);
    }
}

fn unsafe_is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

/// One HTTP/1.1 exchange; (status, body).
fn http(port: u16, method: &str, path: &str, body: Option<&str>) -> Option<(u16, String)> {
    common::http(port, TOKEN, Duration::from_secs(30), method, path, body)
}

struct Service {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Service {
    fn start(db_url: &str, log: &Path) -> Service {
        Service::start_with(db_url, log, &[])
    }

    fn start_with(db_url: &str, log: &Path, env: &[(&str, &str)]) -> Service {
        let port = free_port();
        let cfg = log.with_extension("toml");
        // One run at a time, so a second one waits queued.
        std::fs::write(&cfg, "max_concurrent_runs = 1\ndemo_run = false\n").unwrap();
        let out = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_slicesched"))
            .args(["serve", "--addr", &format!("127.0.0.1:{port}"), "--no-demo", "--config"])
            .arg(&cfg)
            .current_dir(repo())
            .env("DATABASE_URL", db_url)
            .env("SLICESCHED_ADMIN_TOKEN", TOKEN)
            .env("RUST_LOG", "warn,slicesched_api=info")
            .env("NO_COLOR", "1")
            .envs(env.iter().copied())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("slicesched serve starts");
        let s = Service { child, port, log: log.to_path_buf() };
        s.wait_ready();
        s
    }

    fn wait_ready(&self) {
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(120) {
            if http(self.port, "GET", "/readyz", None).is_some_and(|r| r.0 == 200) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("slicesched serve did not get ready");
    }

    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn submit(&self, scenario: &str) -> String {
        let body = serde_json::json!({ "kind": "replay", "policy": "dedicated", "scenario": scenario }).to_string();
        let (s, b) = http(self.port, "POST", "/api/v1/runs", Some(&body)).expect("answers");
        assert_eq!(s, 202, "{b}");
        serde_json::from_str::<Value>(&b).unwrap()["id"].as_str().unwrap().to_string()
    }

    /// The run, once the database answers again (503s while it is down are expected).
    fn run(&self, id: &str) -> Option<Value> {
        match http(self.port, "GET", &format!("/api/v1/runs/{id}"), None)? {
            (200, b) => serde_json::from_str(&b).ok(),
            (503, _) => None,
            (s, b) => panic!("GET run: {s} {b}"),
        }
    }

    fn wait(&self, id: &str, until: impl Fn(&Value) -> bool, secs: u64) -> Value {
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(secs) {
            if let Some(v) = self.run(id).filter(|v| until(v)) {
                return v;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("run {id} did not get there in {secs} s: {:?}", self.run(id));
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn terminal(v: &Value) -> bool {
    !matches!(v["status"].as_str(), Some("queued") | Some("running"))
}

/// A replay of a few seconds: long enough to stop Postgres inside each phase.
fn scenario(duration_s: u32) -> String {
    std::fs::read_to_string(repo().join("scenarios/uniform-4t.toml"))
        .unwrap()
        .replace("duration_s = 600", &format!("duration_s = {duration_s}"))
}

/// Whether the log shows bookkeeping retried for `what` (the phase was hit).
fn retried(log: &Path, what: &str) -> bool {
    std::fs::read_to_string(log).unwrap_or_default().lines().any(|l| l.contains("retrying") && l.contains(what))
}

/// How many times a job has begun the fault hook's pause before `point` (see
/// `api/src/jobs/fault.rs`): the moment to stop Postgres so that write meets the outage.
fn pauses_begun(log: &Path, point: &str) -> usize {
    let point = format!("point=\"{point}\"");
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("fault injection: pausing") && l.contains(&point))
        .count()
}

fn wait_pauses(log: &Path, point: &str, n: usize) {
    let t0 = Instant::now();
    while pauses_begun(log, point) < n {
        assert!(t0.elapsed() < Duration::from_secs(300), "no job paused before {point} ({n} expected)");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn runs_survive_postgres_outages_and_kills_in_every_phase() {
    let Some(pg) = Pg::start_new() else {
        eprintln!("skipped: no Postgres server binaries (apt install postgresql)");
        return;
    };
    let log = std::env::temp_dir().join(format!("slicesched-faults-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    // The fault hook pauses each job before it marks its run running and before its final
    // store, so the test stops Postgres inside those two phases for certain.
    let svc = Service::start_with(&pg.url(), &log, &[("SLICESCHED_FAULT_PAUSE", "start=2500,store=2500")]);
    let mut all = Vec::new();

    // Progress writes and queued: A runs, B waits behind it; Postgres goes away mid-run.
    let a = svc.submit(&scenario(200));
    let b = svc.submit(&scenario(60));
    all.extend([a.clone(), b.clone()]);
    svc.wait(&a, |v| v["status"] == "running" && v["progress"].as_f64() > Some(0.05), 120);
    pg.down();
    std::thread::sleep(Duration::from_secs(3));
    pg.up();
    // Final store: Postgres stops while A's job waits to store (its results are in memory).
    // Longer than the pause plus the pool's 5 s acquire timeout: a shorter outage is
    // waited out inside the acquire and never reaches the retry.
    wait_pauses(&log, "store", 1);
    pg.down();
    std::thread::sleep(Duration::from_secs(9));
    pg.up();
    let va = svc.wait(&a, terminal, 120);
    assert_eq!(va["status"], "succeeded", "results in memory are stored once the database is back: {va}");
    // Starting: C has been read, and its job waits to mark it running when Postgres stops.
    svc.wait(&b, terminal, 120);
    let c = svc.submit(&scenario(30));
    all.push(c.clone());
    wait_pauses(&log, "start", 3);
    pg.down();
    std::thread::sleep(Duration::from_secs(9));
    pg.up();
    let vc = svc.wait(&c, terminal, 120);
    assert_eq!(vc["status"], "succeeded", "a start that met an outage goes on once the database is back: {vc}");
    let phases: Vec<(&str, bool)> = ["reading the run", "starting the run", "storing the results", "ending the run"]
        .iter()
        .map(|w| (*w, retried(&log, w)))
        .collect();
    eprintln!("bookkeeping retried through an outage: {phases:?}");
    for phase in ["starting the run", "storing the results"] {
        assert!(retried(&log, phase), "the outage met {phase:?} (the fault hook paused there): {phases:?}");
    }

    // Kills at seeded random points, each followed by a restart.
    let seed: u64 = std::env::var("FAULT_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(16);
    let mut x = seed;
    let mut svc = svc;
    let kills = 4;
    for _ in 0..kills {
        let id = svc.submit(&scenario(60));
        let queued = svc.submit(&scenario(10));
        all.extend([id.clone(), queued.clone()]);
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        std::thread::sleep(Duration::from_millis(200 + (x >> 33) % 4000));
        svc.kill();
        svc = Service::start(&pg.url(), &log);
    }
    // Nothing stays queued or running; the queue keeps starting runs.
    let mut stranded = 0;
    let mut statuses = std::collections::BTreeMap::<String, u32>::new();
    for id in &all {
        let v = svc.wait(id, terminal, 300);
        *statuses.entry(v["status"].as_str().unwrap().to_string()).or_default() += 1;
        if !terminal(&v) {
            stranded += 1;
        }
        // Whole or nothing: a succeeded run has every record, any other run none.
        let (s, page) = http(svc.port, "GET", &format!("/api/v1/runs/{id}/requests?limit=1"), None).unwrap();
        assert_eq!(s, 200, "{page}");
        let page: Value = serde_json::from_str(&page).unwrap();
        let has_records = !page["items"].as_array().unwrap().is_empty();
        assert_eq!(has_records, v["status"] == "succeeded", "{id}: {v}");
    }
    let next = svc.submit(&scenario(10));
    assert_eq!(svc.wait(&next, terminal, 120)["status"], "succeeded", "the queue still starts runs");
    eprintln!(
        "fault injection: {} runs, {stranded} stranded, statuses {statuses:?}, {kills} kills, 3 Postgres outages (seed {seed}); log {}",
        all.len() + 1,
        svc.log.display()
    );
    assert_eq!(stranded, 0);
}
