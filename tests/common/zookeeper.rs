//! A real ZooKeeper for tests, started by `scripts/zk.sh run` from Debian's jars (`apt-get
//! install zookeeper`; the one way every harness starts it): one node, or an ensemble of n
//! nodes on loopback with distinct client, peer and election ports. Each node
//! has its own data directory and log file in a temp dir; dropping the [`ZooKeeper`] kills every
//! node and removes the directory.
//!
//! Ready means the `srvr` four-letter word reports `Mode: standalone|leader|follower` (`ruok`
//! answers before the server serves requests). Nodes are indexed from 0 (`myid` is index + 1).
//!
//! Overrides: `SHARDCAR_TEST_JAVA` (java binary), `SHARDCAR_TEST_ZK_CLASSPATH`.
use super::free_port;
use super::log_tail;
use super::process::{mark_log, Process};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long a node (or the whole ensemble) may take to serve.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long SIGTERM may take before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);

struct Node {
    client_port: u16,
    dir: PathBuf,
    log: PathBuf,
    process: Option<Process>,
    /// Its id in the ensemble (`myid`).
    myid: usize,
    /// The ensemble's `server.N` entries as `scripts/zk.sh run` takes them (empty: standalone).
    servers: String,
}

/// One ZooKeeper server or an ensemble, killed on drop.
pub struct ZooKeeper {
    nodes: Vec<Node>,
    /// `ZK_JVM_FLAGS` for `scripts/zk.sh` (`None`: its default, a JVM quick to start).
    jvm_flags: Option<String>,
    // Dropped last: the processes die before their directories go.
    _dir: tempfile::TempDir,
}

impl ZooKeeper {
    /// Starts a single standalone node and waits until it serves.
    ///
    /// # Panics
    /// When ZooKeeper is not installed or does not serve within 60 s (the panic shows its log).
    pub async fn start() -> ZooKeeper {
        Self::launch(1, None).await
    }

    /// A single node whose JVM runs with its own defaults (full JIT, default collector), as a
    /// production server runs: for benchmarks. Tests use [`ZooKeeper::start`], whose JVM
    /// starts sooner and is slower under load.
    pub async fn start_with_jvm_defaults() -> ZooKeeper {
        Self::launch(1, Some(String::new())).await
    }

    /// Starts an ensemble of `n` nodes (use 3) on loopback and waits until all serve, i.e. a
    /// quorum has formed and every node is leader or follower.
    ///
    /// # Panics
    /// As [`ZooKeeper::start`].
    pub async fn ensemble(n: usize) -> ZooKeeper {
        assert!(
            n >= 2,
            "an ensemble needs at least 2 nodes, use ZooKeeper::start() for one"
        );
        Self::launch(n, None).await
    }

    async fn launch(n: usize, jvm_flags: Option<String>) -> ZooKeeper {
        let dir = tempfile::Builder::new()
            .prefix("shardcar-zk-")
            .tempdir()
            .expect("cannot create a temp dir for ZooKeeper");
        let ports: Vec<(u16, u16, u16)> = (0..n)
            .map(|_| (free_port(), free_port(), free_port()))
            .collect();
        let servers: Vec<String> = if n > 1 {
            ports
                .iter()
                .enumerate()
                .map(|(i, (_, peer, election))| format!("{}=127.0.0.1:{peer}:{election}", i + 1))
                .collect()
        } else {
            Vec::new()
        };
        let mut nodes = Vec::with_capacity(n);
        for (i, (client_port, _, _)) in ports.iter().enumerate() {
            let node_dir = dir.path().join(format!("node{i}"));
            std::fs::create_dir_all(&node_dir).expect("cannot create a ZooKeeper node dir");
            nodes.push(Node {
                client_port: *client_port,
                log: node_dir.join("zookeeper.log"),
                dir: node_dir,
                process: None,
                myid: i + 1,
                servers: servers.join(","),
            });
        }
        let mut zk = ZooKeeper {
            nodes,
            jvm_flags,
            _dir: dir,
        };
        for i in 0..n {
            zk.spawn(i);
        }
        for i in 0..n {
            zk.wait_ready(i, READY_TIMEOUT).await;
        }
        zk
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// `127.0.0.1:p1,127.0.0.1:p2,…` over all nodes, running or not.
    pub fn connect_string(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.client_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn client_port(&self, i: usize) -> u16 {
        self.nodes[i].client_port
    }

    /// The pid of node `i`, if it was started and not stopped.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.nodes[i].process.as_ref().map(Process::pid)
    }

    /// The whole log of node `i`.
    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(&self.nodes[i].log).unwrap_or_default()
    }

    /// The node's `Mode:` from `srvr` (`standalone`, `leader`, `follower`), or `None` when it
    /// does not answer or does not serve.
    pub async fn mode(&self, i: usize) -> Option<String> {
        let reply = four_letter_word(self.nodes[i].client_port, "srvr").await?;
        reply
            .lines()
            .find_map(|l| l.strip_prefix("Mode: "))
            .map(|m| m.trim().to_string())
    }

    /// Index of the node that is leader now, if any.
    pub async fn leader(&self) -> Option<usize> {
        for i in 0..self.nodes.len() {
            if self.mode(i).await.as_deref() == Some("leader") {
                return Some(i);
            }
        }
        None
    }

    /// Gracefully stops node `i` (SIGTERM, SIGKILL after 10 s). Its data directory stays, so
    /// [`ZooKeeper::start_node`] brings it back with its state.
    pub async fn stop(&mut self, i: usize) {
        if let Some(mut process) = self.nodes[i].process.take() {
            process.stop(STOP_GRACE).await;
            mark_log(&self.nodes[i].log, "stopped");
        }
    }

    /// Kills node `i` with SIGKILL (no shutdown at all).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut process) = self.nodes[i].process.take() {
            process.kill_and_reap();
            mark_log(&self.nodes[i].log, "killed");
        }
    }

    /// Starts node `i` again (after `stop`/`kill`) and waits until it serves. (Named
    /// `start_node` because `ZooKeeper::start()` is the constructor.) In an ensemble a
    /// node serves only with a quorum, so start enough nodes for one (see
    /// [`ZooKeeper::start_no_wait`]).
    ///
    /// # Panics
    /// When it does not serve within 60 s.
    pub async fn start_node(&mut self, i: usize) {
        self.start_no_wait(i);
        self.wait_ready(i, READY_TIMEOUT).await;
    }

    /// Starts node `i` again without waiting for it to serve.
    pub fn start_no_wait(&mut self, i: usize) {
        if self.nodes[i].process.is_none() {
            mark_log(&self.nodes[i].log, "starting again");
            self.spawn(i);
        }
    }

    /// SIGSTOP: the node keeps its sockets but answers nothing.
    pub fn pause(&mut self, i: usize) {
        if let Some(process) = self.nodes[i].process.as_mut() {
            process.pause();
        }
    }

    /// SIGCONT after [`ZooKeeper::pause`].
    pub fn resume(&mut self, i: usize) {
        if let Some(process) = self.nodes[i].process.as_mut() {
            process.signal("CONT");
        }
    }

    /// Waits until node `i` serves.
    ///
    /// # Panics
    /// After `timeout`, or when the process exited, with the tail of its log.
    pub async fn wait_ready(&mut self, i: usize, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(mode) = self.mode(i).await {
                if matches!(mode.as_str(), "standalone" | "leader" | "follower") {
                    return;
                }
            }
            let node = &mut self.nodes[i];
            if let Some(process) = node.process.as_mut() {
                if let Some(status) = process.try_status() {
                    panic!(
                        "ZooKeeper node {i} (client port {}) exited with {status} before serving; \
                         is the `zookeeper` package installed (scripts/install-deps.sh)?\n\
                         --- last lines of {} ---\n{}",
                        node.client_port,
                        node.log.display(),
                        log_tail(&node.log, 40)
                    );
                }
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "ZooKeeper node {i} (client port {}) did not serve within {timeout:?}\n\
                     --- last lines of {} ---\n{}",
                    node.client_port,
                    node.log.display(),
                    log_tail(&node.log, 40)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Starts node `i` through `scripts/zk.sh run` (the one way shardcar starts ZooKeeper),
    /// which writes its config and replaces itself with the server: the pid is the server's.
    fn spawn(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        let mut command = Command::new("bash");
        command
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/zk.sh"))
            .arg("run")
            .arg(&node.dir)
            .arg(node.client_port.to_string())
            .arg(&node.servers)
            // A short tick (sessions of a few seconds expire promptly) and no fsync: fast
            // tests on a small shared machine.
            .env("ZK_TICK", "500")
            .env("ZK_FORCE_SYNC", "no")
            .env("ZK_MYID", node.myid.to_string());
        if let Some(flags) = &self.jvm_flags {
            command.env("ZK_JVM_FLAGS", flags);
        }
        if let Ok(java) = std::env::var("SHARDCAR_TEST_JAVA") {
            command.env("JAVA", java);
        }
        if let Ok(classpath) = std::env::var("SHARDCAR_TEST_ZK_CLASSPATH") {
            command.env("ZK_CLASSPATH", classpath);
        }
        node.process = Some(Process::spawn(
            &format!("zookeeper node {i}"),
            command,
            &node.log,
        ));
    }
}

/// Sends a four-letter word and returns the reply, or `None` when the node does not answer
/// within 2 s.
pub async fn four_letter_word(port: u16, word: &str) -> Option<String> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        stream.write_all(word.as_bytes()).await.ok()?;
        let mut reply = Vec::new();
        stream.read_to_end(&mut reply).await.ok()?;
        Some(String::from_utf8_lossy(&reply).into_owned())
    };
    tokio::time::timeout(Duration::from_secs(2), exchange)
        .await
        .ok()
        .flatten()
}
