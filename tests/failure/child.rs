//! A worker in a process of its own, so a test can SIGKILL or SIGSTOP it. The test binary
//! re-executes itself running only the ignored test `child_worker_entry`, which (with
//! `SHARDCAR_CHILD` set) subscribes and prints every event as `EVENT <hex protobuf>` on stdout;
//! it answers commands read from stdin (`COMPLETE <execution> <items>`) with
//! `ANSWER <execution> <grpc code>`, or `ANSWER <execution> VOID` when it did not send it.
//!
//! Its answers follow the worker contract: an answer belongs to the stream that delivered the
//! trigger. While that stream is open a call that fails in transport is sent again (answers are
//! idempotent); once the stream has ended the answer is void and is not sent at all.
// Shared by the failure tests and the benchmark program; each uses part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prost::Message;
use shardcar::proto::subscribe_response::Event;
use shardcar::proto::worker_service_client::WorkerServiceClient;
use shardcar::proto::{CompleteRequest, SubscribeRequest, SubscribeResponse, Trigger};

const ENV_ENDPOINT: &str = "SHARDCAR_CHILD";
const ENV_REQUEST: &str = "SHARDCAR_CHILD_REQUEST";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}

/// The child's main: runs only when started by [`ChildWorker::spawn`].
pub fn main_if_child() {
    let Ok(endpoint) = std::env::var(ENV_ENDPOINT) else {
        return;
    };
    let request =
        SubscribeRequest::decode(unhex(&std::env::var(ENV_REQUEST).expect("request")).as_slice())
            .expect("request");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async move {
        let mut client = WorkerServiceClient::connect(endpoint)
            .await
            .expect("connect");
        let mut stream = client
            .subscribe(request)
            .await
            .expect("subscribe")
            .into_inner();
        let instance = Arc::new(Mutex::new(String::new()));
        let stream_open = Arc::new(AtomicBool::new(true));
        let commands = {
            let (instance, client) = (instance.clone(), client.clone());
            let stream_open = stream_open.clone();
            tokio::task::spawn_blocking(move || {
                let handle = tokio::runtime::Handle::current();
                for line in std::io::stdin().lines() {
                    let Ok(line) = line else { return };
                    let parts: Vec<&str> = line.split_whitespace().collect();
                    if parts.len() == 3 && parts[0] == "COMPLETE" {
                        let items = parts[2].split(',').filter_map(|i| i.parse().ok()).collect();
                        let request = CompleteRequest {
                            instance_id: instance.lock().unwrap().clone(),
                            execution_id: parts[1].to_string(),
                            items,
                        };
                        let code = answer(&handle, &client, &request, &stream_open);
                        match code {
                            Some(code) => println!("ANSWER {} {code}", parts[1]),
                            None => println!("ANSWER {} VOID", parts[1]),
                        }
                    }
                }
            })
        };
        while let Ok(Some(event)) = stream.message().await {
            if let Some(Event::Registered(r)) = &event.event {
                *instance.lock().unwrap() = r.instance_id.clone();
            }
            println!("EVENT {}", hex(&event.encode_to_vec()));
        }
        stream_open.store(false, Ordering::SeqCst);
        println!("END");
        // Keep answering commands (a late Complete, say) until the parent closes stdin.
        let _ = commands.await;
    });
    std::process::exit(0);
}

/// Sends one `Complete` as the contract says: again after a transport failure while the stream
/// is open, never once it has ended. The gRPC code of the sidecar's reply, or `None` (void).
fn answer(
    handle: &tokio::runtime::Handle,
    client: &WorkerServiceClient<tonic::transport::Channel>,
    request: &CompleteRequest,
    stream_open: &AtomicBool,
) -> Option<i32> {
    for _ in 0..50 {
        if !stream_open.load(Ordering::SeqCst) {
            return None;
        }
        let mut client = client.clone();
        match handle.block_on(client.complete(request.clone())) {
            Ok(_) => return Some(0),
            Err(status) if is_transport_error(&status) => {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            Err(status) => return Some(status.code() as i32),
        }
    }
    None
}

/// Whether a call failed on its way (so the sidecar may not have seen it) rather than being
/// answered by the sidecar: the connection was closed or refused the stream.
pub fn is_transport_error(status: &tonic::Status) -> bool {
    use tonic::Code;
    match status.code() {
        Code::Unavailable | Code::Cancelled | Code::Unknown => true,
        // A stream the server never accepted (a GOAWAY arrived first) is reported as INTERNAL
        // with an h2 error; the sidecar itself never answers INTERNAL.
        Code::Internal => status.message().contains("h2 protocol error"),
        _ => false,
    }
}

#[derive(Default)]
struct Seen {
    events: Vec<(Instant, SubscribeResponse)>,
    answers: Vec<(String, Option<i32>)>,
    /// When each `Complete` was sent.
    sent: Vec<(String, Instant)>,
    ended: bool,
}

/// The parent's handle on a child worker process. Drop kills it.
pub struct ChildWorker {
    child: Child,
    stdin: ChildStdin,
    seen: Arc<Mutex<Seen>>,
}

impl ChildWorker {
    /// Starts a child worker subscribed to `endpoint` with `request`, and waits for `Registered`.
    pub async fn spawn(endpoint: &str, request: SubscribeRequest) -> ChildWorker {
        let mut child = Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                "child_worker_entry",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ENV_ENDPOINT, endpoint)
            .env(ENV_REQUEST, hex(&request.encode_to_vec()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the child worker");
        let stdout = child.stdout.take().expect("stdout");
        let stdin = child.stdin.take().expect("stdin");
        let seen = Arc::new(Mutex::new(Seen::default()));
        let writer = seen.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let mut seen = writer.lock().unwrap();
                // libtest may print its own text before a line of ours: look for our tags.
                let line = ["EVENT ", "ANSWER ", "END"]
                    .iter()
                    .find_map(|tag| line.find(tag).map(|at| line[at..].to_string()))
                    .unwrap_or_default();
                if let Some(payload) = line.strip_prefix("EVENT ") {
                    let event = SubscribeResponse::decode(unhex(payload.trim()).as_slice())
                        .unwrap_or_else(|e| panic!("bad event line {payload:?}: {e}"));
                    seen.events.push((Instant::now(), event));
                } else if let Some(answer) = line.strip_prefix("ANSWER ") {
                    let (exec, code) = answer.split_once(' ').expect("answer");
                    let code = (code != "VOID").then(|| code.parse().expect("code"));
                    seen.answers.push((exec.to_string(), code));
                } else if line == "END" {
                    seen.ended = true;
                }
            }
            writer.lock().unwrap().ended = true;
        });
        let worker = ChildWorker { child, stdin, seen };
        worker
            .wait("Registered", Duration::from_secs(20), |s| {
                s.events
                    .iter()
                    .any(|(_, e)| matches!(e.event, Some(Event::Registered(_))))
            })
            .await;
        worker
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn instance_id(&self) -> String {
        self.seen
            .lock()
            .unwrap()
            .events
            .iter()
            .find_map(|(_, e)| match &e.event {
                Some(Event::Registered(r)) => Some(r.instance_id.clone()),
                _ => None,
            })
            .unwrap_or_default()
    }

    pub fn events(&self) -> Vec<(Instant, SubscribeResponse)> {
        self.seen.lock().unwrap().events.clone()
    }

    /// Every `Complete` sent, and when.
    pub fn answers(&self) -> Vec<(String, Instant)> {
        self.seen.lock().unwrap().sent.clone()
    }

    pub fn triggers(&self) -> Vec<(Instant, Trigger)> {
        self.events()
            .into_iter()
            .filter_map(|(at, e)| match e.event {
                Some(Event::Trigger(t)) => Some((at, t)),
                _ => None,
            })
            .collect()
    }

    async fn wait(&self, what: &str, timeout: Duration, mut pred: impl FnMut(&Seen) -> bool) {
        let deadline = Instant::now() + timeout;
        loop {
            {
                let seen = self.seen.lock().unwrap();
                if pred(&seen) {
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "child worker: no {what} within {timeout:?}; {} events seen",
                    seen.events.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits for the first trigger.
    pub async fn first_trigger(&self, timeout: Duration) -> (Instant, Trigger) {
        self.wait("Trigger", timeout, |s| {
            s.events
                .iter()
                .any(|(_, e)| matches!(e.event, Some(Event::Trigger(_))))
        })
        .await;
        self.triggers().remove(0)
    }

    /// Sends `Complete` from the child and returns the gRPC code (0 = OK), or `None` when the
    /// child did not send it because its stream had ended (the answer is void).
    pub async fn complete(&mut self, execution_id: &str, items: &[i32]) -> Option<i32> {
        let items: Vec<String> = items.iter().map(|i| i.to_string()).collect();
        self.seen
            .lock()
            .unwrap()
            .sent
            .push((execution_id.to_string(), Instant::now()));
        writeln!(self.stdin, "COMPLETE {execution_id} {}", items.join(","))
            .expect("write to the child");
        self.stdin.flush().expect("flush");
        self.wait("answer", Duration::from_secs(20), |s| {
            s.answers.iter().any(|(e, _)| e == execution_id)
        })
        .await;
        let seen = self.seen.lock().unwrap();
        seen.answers
            .iter()
            .find(|(e, _)| e == execution_id)
            .map(|(_, c)| *c)
            .unwrap()
    }

    /// Waits until the child has seen its stream end.
    pub async fn wait_stream_end(&self, timeout: Duration) {
        self.wait("the end of its stream", timeout, |s| s.ended)
            .await;
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([format!("-{signal}"), self.pid().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{signal} failed");
    }

    pub fn kill(&mut self) {
        self.signal("KILL");
        let _ = self.child.wait();
    }

    /// SIGSTOP, returning once every thread has stopped.
    pub fn pause(&self) {
        self.signal("STOP");
        crate::common::process::wait_stopped(self.pid());
    }

    pub fn resume(&self) {
        self.signal("CONT");
    }
}

impl Drop for ChildWorker {
    fn drop(&mut self) {
        // Only a child not reaped yet may be signalled: a reaped one's pid may be another's.
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = Command::new("kill")
                .args(["-CONT", &self.pid().to_string()])
                .status();
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}
