//! A PostgreSQL cluster of a test's own (initdb, pg_ctl) on its own port, with password
//! authentication and the settings the test gives it: its connection limit can be filled
//! or left at the default without touching the shared server. Also what the fleet test
//! reads of it: connections, committed transactions, statements and CPU.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::free_port;

pub const PASSWORD: &str = "fleet-secret";

pub struct Cluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    pub port: u16,
    as_postgres: bool,
}

impl Cluster {
    /// Started with `settings` (postgresql.conf lines) and stopped when dropped.
    pub fn start(settings: &str) -> Cluster {
        let bin = crate::common::pg::bin_with("initdb");
        let (dir, as_postgres) = crate::common::pg::cluster_dir();
        let c = Cluster {
            dir,
            bin,
            port: free_port(),
            as_postgres,
        };
        let pwfile = c.dir.path().join("pw");
        std::fs::write(&pwfile, PASSWORD).unwrap();
        let data = c.data();
        c.tool(
            "initdb",
            &[
                "-D",
                &data,
                "-U",
                "postgres",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                &format!("--pwfile={}", pwfile.display()),
                "--no-sync",
            ],
        );
        std::fs::write(
            Path::new(&data).join("postgresql.auto.conf"),
            format!(
                "listen_addresses = '127.0.0.1'\nport = {}\nunix_socket_directories = '{}'\nfsync = off\n{settings}",
                c.port,
                c.dir.path().display()
            ),
        )
        .unwrap();
        let log = c.dir.path().join("log").display().to_string();
        c.tool("pg_ctl", &["-D", &data, "-l", &log, "-w", "start"]);
        c
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    /// One of the server's programs, as the postgres user when the test runs as root.
    fn command(&self, tool: &str) -> Command {
        let exe = self.bin.join(tool);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(exe);
            c
        } else {
            Command::new(exe)
        }
    }

    fn tool(&self, tool: &str, args: &[&str]) {
        let out = self.command(tool).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{tool}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A URL of this cluster for `database`, as `postgres` with `password`.
    pub fn url_as(&self, password: &str, database: &str) -> String {
        format!(
            "postgres://postgres:{password}@127.0.0.1:{}/{database}",
            self.port
        )
    }

    pub fn url(&self) -> String {
        self.url_as(PASSWORD, "postgres")
    }

    /// Stops the server (fast shutdown: sessions are cut, as in a restart).
    pub fn stop(&self) {
        self.tool("pg_ctl", &["-D", &self.data(), "-m", "fast", "-w", "stop"]);
    }

    /// Starts it again after [`Cluster::stop`], with the same data and port.
    pub fn start_again(&self) {
        let log = self.dir.path().join("log").display().to_string();
        self.tool("pg_ctl", &["-D", &self.data(), "-l", &log, "-w", "start"]);
    }

    /// CPU seconds the server has used so far: the postmaster, its live backends, and
    /// the backends that have exited (the postmaster waited for them).
    pub fn cpu_seconds(&self) -> f64 {
        let pid_file = Path::new(&self.data()).join("postmaster.pid");
        let postmaster: u32 = std::fs::read_to_string(pid_file)
            .unwrap()
            .lines()
            .next()
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let ticks = 100.0; // USER_HZ
        let mut total = 0.0;
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // Fields after the command's closing parenthesis: state ppid … utime stime cutime cstime.
            let Some(after) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
                continue;
            };
            let f: Vec<&str> = after.split(' ').collect();
            let num = |i: usize| f[i].parse::<f64>().unwrap_or(0.0);
            if pid == postmaster {
                total += num(11) + num(12) + num(13) + num(14);
            } else if f[1] == postmaster.to_string() {
                total += num(11) + num(12);
            }
        }
        total / ticks
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.data();
        let _ = self
            .command("pg_ctl")
            .args(["-D", &data, "-m", "immediate", "stop"])
            .output();
    }
}
