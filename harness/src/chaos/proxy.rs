//! A fault-injection HTTP proxy. Put between the service and the sandbox processor (an
//! account's `processor.base_url`), or between the processor and our ingress (a merchant's
//! `events_url`), it forwards every request to its target unless told to misbehave: by rules
//! (the next requests of one route get one fault: what a test scripts) or at random (each
//! request independently gets one fault from a weighted list, drawn from a seeded generator:
//! what `billing chaos` does). It records every request it saw and the fault it applied.
//!
//! It speaks just enough HTTP/1.1 for our processor client and the sandbox's event sender (one
//! request per connection, `Content-Length` bodies, `Connection: close` answers) on a raw
//! socket, so that a dropped answer is a connection really closed without one and a reset is a
//! real TCP reset. It names neither axum nor the database: it is a peer on the network.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What to do with a request.
#[derive(Clone, Debug)]
pub enum Fault {
    /// Answer `status` with `body` (JSON), without forwarding.
    Answer(u16, Value),
    /// Forward (the processor acts), then answer `status` instead of the processor's answer.
    ForwardThenAnswer(u16),
    /// Forward, then close the connection without answering.
    ForwardThenDrop,
    /// Forward, and answer only after this long (past the client's timeout).
    ForwardThenDelay(Duration),
    /// Hold the request this long, then forward it and answer: it reaches the target after
    /// requests sent later (reordered), or after its client gave up.
    DelayThenForward(Duration),
    /// Forward twice and answer the second answer: a duplicate delivery.
    ForwardTwice,
    /// Reset the connection without forwarding.
    Reset,
    /// Hold the request until the gate opens, then forward it and answer: a request kept out
    /// for exactly as long as a test needs to move something meanwhile.
    HoldUntil(Gate),
}

/// A gate that holds requests (`Fault::HoldUntil`) until it is opened, once, for good.
#[derive(Clone, Debug)]
pub struct Gate(Arc<tokio::sync::watch::Sender<bool>>);

impl Gate {
    pub fn new() -> Self {
        Self(Arc::new(tokio::sync::watch::channel(false).0))
    }

    /// Lets every held request (and every later one) through.
    pub fn open(&self) {
        self.0.send_replace(true);
    }

    async fn opened(&self) {
        let mut open = self.0.subscribe();
        let _ = open.wait_for(|open| *open).await;
    }
}

impl Default for Gate {
    fn default() -> Self {
        Self::new()
    }
}

impl Fault {
    /// A short name for reports.
    pub fn name(&self) -> &'static str {
        match self {
            Fault::Answer(429, _) => "429",
            Fault::Answer(500, _) => "500",
            Fault::Answer(..) => "answer",
            Fault::ForwardThenAnswer(_) => "acted-then-error",
            Fault::ForwardThenDrop => "acted-then-drop",
            Fault::ForwardThenDelay(_) => "acted-then-timeout",
            Fault::DelayThenForward(_) => "late",
            Fault::ForwardTwice => "twice",
            Fault::Reset => "reset",
            Fault::HoldUntil(_) => "held",
        }
    }
}

struct Rule {
    method: String,
    /// The path without query; a path ending in `/` matches every path under it.
    path: String,
    fault: Fault,
    /// How many more requests it applies to; None: all.
    remaining: Option<usize>,
}

/// Random faults: each request gets the first fault whose cumulative probability exceeds a
/// uniform draw, or none when the draw is past them all.
struct Random {
    rng: StdRng,
    faults: Vec<(Fault, f64)>,
}

/// One request the proxy saw.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    /// With its query.
    pub target: String,
    pub body: String,
    /// The fault applied to it, if any.
    pub fault: Option<Fault>,
}

#[derive(Default)]
struct Shared {
    rules: Mutex<Vec<Rule>>,
    random: Mutex<Option<Random>>,
    seen: Mutex<Vec<Seen>>,
}

/// A lock that outlives a panic elsewhere: the proxy's state stays usable for the report.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Clone)]
pub struct Proxy {
    /// The proxy's own base URL, to use as an account's `processor.base_url`.
    pub base: String,
    shared: Arc<Shared>,
    _accepting: Arc<AcceptLoop>,
}

/// The accept loop's task, stopped when the last clone of its proxy is dropped, so the port
/// is freed with the proxy.
struct AcceptLoop(tokio::task::AbortHandle);

impl Drop for AcceptLoop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Proxy {
    /// Starts a proxy in front of `target` (a base URL such as `<app>/sandbox/processor/v1`).
    /// It stops accepting when the last clone is dropped.
    pub async fn start(target: &str) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let shared = Arc::new(Shared::default());
        let target = target.trim_end_matches('/').to_owned();
        // Bounded: a target that hangs (a server being killed) must not hold a request for ever.
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(std::io::Error::other)?;
        let state = Arc::clone(&shared);
        let accepting = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (state, target, http) = (Arc::clone(&state), target.clone(), http.clone());
                tokio::spawn(async move { serve(stream, &state, &target, &http).await });
            }
        });
        Ok(Self {
            base,
            shared,
            _accepting: Arc::new(AcceptLoop(accepting.abort_handle())),
        })
    }

    /// Applies `fault` to the next `times` requests of `method path`.
    pub fn fail(&self, method: &str, path: &str, fault: Fault, times: usize) {
        self.add(method, path, fault, Some(times));
    }

    /// Applies `fault` to every request of `method path` until `clear`.
    pub fn always(&self, method: &str, path: &str, fault: Fault) {
        self.add(method, path, fault, None);
    }

    fn add(&self, method: &str, path: &str, fault: Fault, remaining: Option<usize>) {
        lock(&self.shared.rules).push(Rule {
            method: method.to_owned(),
            path: path.to_owned(),
            fault,
            remaining,
        });
    }

    /// From now on, every request no rule matches independently gets one of `faults`, each
    /// with its probability (their sum at most 1; the rest pass through), drawn in arrival
    /// order from a generator seeded with `seed`.
    pub fn randomly(&self, seed: u64, faults: Vec<(Fault, f64)>) {
        *lock(&self.shared.random) = Some(Random {
            rng: StdRng::seed_from_u64(seed),
            faults,
        });
    }

    /// Forwards everything from now on: rules and random faults are dropped.
    pub fn clear(&self) {
        lock(&self.shared.rules).clear();
        *lock(&self.shared.random) = None;
    }

    /// The requests of `method path` seen so far (the path matched as in rules).
    pub fn seen(&self, method: &str, path: &str) -> Vec<Seen> {
        lock(&self.shared.seen)
            .iter()
            .filter(|s| s.method == method && matches(path, &s.target))
            .cloned()
            .collect()
    }

    /// Every request seen so far.
    pub fn all_seen(&self) -> Vec<Seen> {
        lock(&self.shared.seen).clone()
    }
}

fn matches(rule_path: &str, target: &str) -> bool {
    let path = target.split('?').next().unwrap_or_default();
    path == rule_path || (rule_path.ends_with('/') && path.starts_with(rule_path))
}

/// The fault for one request: a matching rule first, else a random draw.
fn choose(shared: &Shared, request: &Request) -> Option<Fault> {
    let mut rules = lock(&shared.rules);
    let found = rules.iter_mut().find(|r| {
        r.method == request.method && matches(&r.path, &request.target) && r.remaining != Some(0)
    });
    if let Some(rule) = found {
        if let Some(n) = rule.remaining.as_mut() {
            *n -= 1;
        }
        return Some(rule.fault.clone());
    }
    drop(rules);
    let mut random = lock(&shared.random);
    let random = random.as_mut()?;
    let draw: f64 = random.rng.random();
    let mut cumulative = 0.0;
    for (fault, probability) in &random.faults {
        cumulative += probability;
        if draw < cumulative {
            return Some(fault.clone());
        }
    }
    None
}

/// A parsed request: method, target, headers, body.
struct Request {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

async fn read_request(stream: &mut TcpStream) -> Option<Request> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let (method, target) = (
        request_line.next()?.to_owned(),
        request_line.next()?.to_owned(),
    );
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buffer[head_end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Request {
        method,
        target,
        headers,
        body,
    })
}

async fn serve(mut stream: TcpStream, shared: &Shared, target: &str, http: &reqwest::Client) {
    let Some(request) = read_request(&mut stream).await else {
        return;
    };
    let fault = choose(shared, &request);
    lock(&shared.seen).push(Seen {
        method: request.method.clone(),
        target: request.target.clone(),
        body: String::from_utf8_lossy(&request.body).into_owned(),
        fault: fault.clone(),
    });
    let (status, body) = match fault {
        Some(Fault::Answer(status, body)) => (status, body.to_string().into_bytes()),
        Some(Fault::Reset) => return reset(stream),
        Some(Fault::ForwardThenAnswer(status)) => {
            forward(http, target, &request).await;
            let body = serde_json::json!({"error": {"type": "PROXY_FAULT", "reason": "injected"}});
            (status, body.to_string().into_bytes())
        }
        Some(Fault::ForwardThenDrop) => {
            forward(http, target, &request).await;
            return;
        }
        Some(Fault::ForwardThenDelay(delay)) => {
            let answer = forward(http, target, &request).await;
            tokio::time::sleep(delay).await;
            answer
        }
        Some(Fault::DelayThenForward(delay)) => {
            tokio::time::sleep(delay).await;
            forward(http, target, &request).await
        }
        Some(Fault::ForwardTwice) => {
            forward(http, target, &request).await;
            forward(http, target, &request).await
        }
        Some(Fault::HoldUntil(gate)) => {
            gate.opened().await;
            forward(http, target, &request).await
        }
        None => forward(http, target, &request).await,
    };
    respond(&mut stream, status, &body).await;
}

/// Sends the request on to the target; a failure to reach it is answered 502.
async fn forward(http: &reqwest::Client, target: &str, request: &Request) -> (u16, Vec<u8>) {
    let Ok(method) = reqwest::Method::from_bytes(request.method.as_bytes()) else {
        return (400, b"{}".to_vec());
    };
    let mut outgoing = http
        .request(method, format!("{target}{}", request.target))
        .body(request.body.clone());
    for (name, value) in &request.headers {
        if !["host", "content-length", "connection"].contains(&name.as_str()) {
            outgoing = outgoing.header(name, value);
        }
    }
    match outgoing.send().await {
        Ok(response) => {
            let status = response.status().as_u16();
            (status, response.bytes().await.unwrap_or_default().to_vec())
        }
        Err(_) => (502, b"{}".to_vec()),
    }
}

async fn respond(stream: &mut TcpStream, status: u16, body: &[u8]) {
    let head = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        reason(status),
        body.len()
    );
    // The client may have given up already (a delay past its timeout): nothing to do then.
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body).await;
    let _ = stream.shutdown().await;
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        408 => "Request Timeout",
        409 => "Conflict",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

/// Closes with a TCP reset (linger zero) instead of an orderly close.
#[allow(deprecated)]
fn reset(stream: TcpStream) {
    let _ = stream.set_linger(Some(Duration::ZERO));
    drop(stream);
}
