//! A one-node Slurm cluster from Debian's slurm-wlm (22.05) on this
//! machine: munged, slurmctld and slurmd with their own config, state and
//! ports in a temporary directory, `select/cons_tres`, and two simulated
//! AMD GPUs as `gpu` gres (device nodes made with mknod under a temporary
//! dev root, as the GPU tests make them, with chosen gids). Everything it
//! started is stopped when it is dropped, even when a test fails.

use super::{have_tool, in_ci};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub struct Slurm {
    dir: tempfile::TempDir,
    daemons: Vec<Child>,
    /// The simulated dev root (`QUARRY_DEV_ROOT` for the jobs).
    pub dev: PathBuf,
}

/// Gids of the simulated nodes: kfd and renderD128 4242, renderD129 4243.
pub const GIDS: [(&str, u32); 3] = [("kfd", 4242), ("dri/renderD128", 4242), ("dri/renderD129", 4243)];

pub fn have_slurm() -> bool {
    ["slurmctld", "slurmd", "sbatch", "munged"].iter().all(|t| {
        let ok = Command::new("sh").args(["-c", &format!("command -v {t}")]).output().is_ok_and(|o| o.status.success());
        if !ok {
            assert!(!in_ci(), "CI is set but `{t}` is missing: scripts/setup must install slurm-wlm and munge");
            eprintln!("skipping: `{t}` is not installed");
        }
        ok
    }) && have_tool("mknod")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Slurm {
    pub fn start() -> Slurm {
        let dir = tempfile::Builder::new().prefix("quarry-test-slurm-").tempdir().unwrap();
        let d = dir.path().to_path_buf();
        let dev = d.join("dev");
        std::fs::create_dir_all(dev.join("dri")).unwrap();
        for (node, gid) in GIDS {
            let p = dev.join(node);
            let st = Command::new("mknod").arg(&p).args(["c", "1", "3"]).status().unwrap();
            assert!(st.success(), "mknod {} (the Slurm tests need root)", p.display());
            std::os::unix::fs::chown(&p, None, Some(gid)).unwrap();
        }
        for sub in ["state", "spool", "log", "munge"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        let key = d.join("munge/munge.key");
        let st = Command::new("mungekey").args(["-c", "-k"]).arg(&key).status().unwrap();
        assert!(st.success(), "mungekey");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::set_permissions(d.join("munge"), std::fs::Permissions::from_mode(0o700)).unwrap();
        let socket = d.join("munge/munge.sock");
        let mut s = Slurm { dir, daemons: Vec::new(), dev: dev.clone() };
        let munged = Command::new("munged")
            .arg("--foreground")
            .arg(format!("--key-file={}", key.display()))
            .arg(format!("--socket={}", socket.display()))
            .arg(format!("--pid-file={}", d.join("munge/munged.pid").display()))
            .arg(format!("--log-file={}", d.join("munge/munged.log").display()))
            .arg(format!("--seed-file={}", d.join("munge/seed").display()))
            .arg("--force")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start munged");
        s.daemons.push(munged);
        s.wait_for(|| socket.exists(), "munged's socket");
        let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
        let conf = format!(
            "ClusterName=quarrytest
SlurmctldHost=localhost
SlurmctldPort={ctld}
SlurmdPort={slurmd}
AuthType=auth/munge
AuthInfo=socket={socket}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
KillWait=10
NodeName=localhost CPUs={cpus} RealMemory=8000 Gres=gpu:2 State=UNKNOWN
PartitionName=quarry Nodes=localhost Default=YES MaxTime=INFINITE State=UP
",
            ctld = free_port(),
            slurmd = free_port(),
            socket = socket.display(),
            d = d.display(),
        );
        std::fs::write(d.join("slurm.conf"), conf).unwrap();
        let gres = format!(
            "Name=gpu File={}\nName=gpu File={}\n",
            dev.join("dri/renderD128").display(),
            dev.join("dri/renderD129").display()
        );
        std::fs::write(d.join("gres.conf"), gres).unwrap();
        for daemon in ["slurmctld", "slurmd"] {
            let child = Command::new(daemon)
                .arg("-D")
                .arg("-f")
                .arg(d.join("slurm.conf"))
                .env("SLURM_CONF", d.join("slurm.conf"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("start {daemon}: {e}"));
            s.daemons.push(child);
        }
        let ok = || {
            s.cmd("sinfo").args(["-h", "-o", "%T"]).output().is_ok_and(|o| {
                let t = String::from_utf8_lossy(&o.stdout);
                o.status.success() && t.trim() == "idle"
            })
        };
        s.wait_for(ok, "the node to be idle");
        s
    }

    fn wait_for(&self, ok: impl Fn() -> bool, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !ok() {
            assert!(Instant::now() < deadline, "Slurm: waited 60 s for {what}:\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn conf(&self) -> PathBuf {
        self.dir.path().join("slurm.conf")
    }

    /// A Slurm client command for this cluster.
    pub fn cmd(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("SLURM_CONF", self.conf());
        c
    }

    /// `sbatch --parsable SCRIPT` (the environment passes on to the job): the job id.
    pub fn submit(&self, script: &Path, env: &[(&str, &Path)]) -> String {
        let mut c = self.cmd("sbatch");
        c.arg("--parsable").arg(script).current_dir(self.dir.path());
        for (k, v) in env {
            c.env(k, v);
        }
        let o = c.output().unwrap();
        assert!(o.status.success(), "sbatch: {}\n{}", String::from_utf8_lossy(&o.stderr), self.logs());
        String::from_utf8_lossy(&o.stdout).trim().split(';').next().unwrap().to_string()
    }

    /// Wait until no task of job `id` is pending or running.
    pub fn wait(&self, id: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let o = self.cmd("squeue").args(["-h", "-j", id, "-o", "%i %T"]).output().unwrap();
            let text = String::from_utf8_lossy(&o.stdout).trim().to_string();
            if o.status.success() && text.is_empty() {
                return;
            }
            assert!(Instant::now() < deadline, "job {id} still queued after {limit:?}: {text}\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    pub fn run(&self, program: &str, args: &[&str]) -> Output {
        self.cmd(program).args(args).output().unwrap()
    }

    pub fn logs(&self) -> String {
        let read = |f: &str| std::fs::read_to_string(self.dir.path().join(f)).unwrap_or_default();
        let tail =
            |t: String| t.lines().rev().take(30).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
        format!("slurmctld:\n{}\nslurmd:\n{}", tail(read("log/slurmctld.log")), tail(read("log/slurmd.log")))
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        let _ = self.cmd("scancel").args(["--full", "-u", "root"]).output();
        for c in self.daemons.iter_mut().rev() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
