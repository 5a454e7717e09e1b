//! The fencing store: a tiny TCP line service inside the nemesis process. A write for item i of
//! a job is accepted only with a token at least the last accepted one for that item; every
//! decision is recorded in the [`History`] at the moment it is made, on the soak's one clock.
//!
//! Protocol, one line each way: `W {job} {item} {token} {pid} {gen} {execution} {lease end µs}`
//! → `OK {last}` or `REJ {last}` (`last`: the highest token accepted before this write).

use crate::history::History;
use crate::spec::wall_us;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// Starts the store on a loopback port; returns `host:port`.
pub async fn start(history: Arc<Mutex<History>>) -> String {
    let listener = TcpListener::bind(("127.0.0.1", 0))
        .await
        .expect("bind the fencing store");
    let addr = listener.local_addr().expect("store address").to_string();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            let history = history.clone();
            tokio::spawn(async move {
                let _ = conn.set_nodelay(true);
                let (read, mut write) = conn.into_split();
                let mut lines = BufReader::new(read).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let reply = decide(&history, &line);
                    if write.write_all(reply.as_bytes()).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

fn decide(history: &Mutex<History>, line: &str) -> String {
    let parts: Vec<&str> = line.split_whitespace().collect();
    let ["W", job, item, token, pid, gen, exec, until] = parts.as_slice() else {
        return "ERR bad request\n".into();
    };
    let (Ok(job), Ok(item), Ok(token), Ok(pid), Ok(gen), Ok(until)) = (
        job.parse::<usize>(),
        item.parse::<i32>(),
        token.parse::<i64>(),
        pid.parse::<u32>(),
        gen.parse::<u64>(),
        until.parse::<u64>(),
    ) else {
        return "ERR bad number\n".into();
    };
    // Held only to decide and record: no await.
    let mut h = history.lock().unwrap_or_else(|e| e.into_inner());
    let (accepted, last) = h.store_write(
        wall_us(),
        job,
        item,
        token,
        pid,
        gen,
        exec.to_string(),
        until,
    );
    if accepted {
        format!("OK {last}\n")
    } else {
        format!("REJ {last}\n")
    }
}
