//! Test helper: a real standalone ZooKeeper (Debian's `/usr/share/java/zookeeper.jar`, started
//! by `scripts/zk.sh run` like every other harness) on a free loopback port with a temporary
//! dataDir, killed when dropped (also when a test panics).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) struct ZkServer {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl ZkServer {
    /// Starts a server and waits until it serves requests (`srvr` says `Mode: standalone`).
    pub(crate) fn start() -> ZkServer {
        let port = TcpListener::bind("127.0.0.1:0")
            .expect("free port")
            .local_addr()
            .expect("addr")
            .port();
        let dir = tempfile::tempdir().expect("temp dir");
        let log = std::fs::File::create(dir.path().join("zookeeper.out")).expect("log file");
        // `run` replaces the script with the server: the child's pid is the server's.
        let child = Command::new("bash")
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/zk.sh"))
            .arg("run")
            .arg(dir.path())
            .arg(port.to_string())
            .env("ZK_TICK", "500")
            .env("ZK_FORCE_SYNC", "no")
            .env("ZK_HEAP", "128m")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("start scripts/zk.sh (is ZooKeeper installed?)");
        let server = ZkServer {
            child,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !server.four_letter("srvr").contains("Mode: standalone") {
            assert!(
                Instant::now() < deadline,
                "ZooKeeper did not start on port {port}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }

    pub(crate) fn connect_string(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Sends a four-letter command; empty string if the server does not answer.
    pub(crate) fn four_letter(&self, cmd: &str) -> String {
        let Ok(mut s) = TcpStream::connect_timeout(
            &([127, 0, 0, 1], self.port).into(),
            Duration::from_millis(500),
        ) else {
            return String::new();
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let mut out = String::new();
        if s.write_all(cmd.as_bytes()).is_ok() {
            let _ = s.read_to_string(&mut out);
        }
        out
    }

    fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill {sig} failed");
    }

    /// Freezes the server (SIGSTOP): connections stay open but nothing answers.
    pub(crate) fn pause(&self) {
        self.signal("-STOP");
    }

    /// Resumes a paused server (SIGCONT).
    pub(crate) fn resume(&self) {
        self.signal("-CONT");
    }
}

impl Drop for ZkServer {
    fn drop(&mut self) {
        // A stopped JVM ignores SIGTERM until continued; SIGKILL works either way.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
