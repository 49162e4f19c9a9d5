//! A Redis server of the test's own (`redis-server`, which scripts/services.sh installs),
//! on a free port, keeping nothing on disk: a restart loses everything, as a cache's
//! Redis does.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
    extra: Vec<String>,
}

impl RedisServer {
    pub fn start() -> RedisServer {
        RedisServer::with(&[])
    }

    /// With more `redis-server` arguments (`["--requirepass", "x"]`).
    pub fn with(extra: &[&str]) -> RedisServer {
        let mut server = RedisServer {
            port: super::free_port(),
            child: None,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        server.up();
        server
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn up(&mut self) {
        let dir = std::env::temp_dir();
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (scripts/services.sh installs it)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the server (everything it held is gone) and starts it again on its port.
    pub fn restart(&mut self) {
        self.stop();
        self.up();
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}
