//! A fault-injection HTTP proxy: put between the service and the sandbox processor (an
//! account's `processor.base_url`), it forwards every request to its target unless the test
//! told it to misbehave on the next requests of one route: answer a status without forwarding
//! (429, 500, 408, 409, 422), forward and then answer a status instead of the processor's
//! answer (the processor acted; we are told it failed), forward and then close the connection
//! without an answer, forward and answer only after a delay (past the client's timeout), or
//! reset the connection without forwarding. It records every request it saw.
//!
//! It speaks just enough HTTP/1.1 for our processor client (one request per connection,
//! `Content-Length` bodies, `Connection: close` answers) on a raw socket, so that a dropped
//! answer is a connection really closed without one, and a reset is a real TCP reset.

use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What to do with a matching request.
#[derive(Clone, Debug)]
pub enum Fault {
    /// Answer `status` with `body` (JSON), without forwarding.
    Answer(u16, Value),
    /// Forward (the processor acts), then answer `status` instead of the processor's answer.
    ForwardThenAnswer(u16),
    /// Forward, then close the connection without answering.
    ForwardThenDrop,
    /// Forward, and answer only after this long.
    ForwardThenDelay(Duration),
    /// Reset the connection without forwarding.
    Reset,
}

struct Rule {
    method: String,
    /// The path without query; a path ending in `/` matches every path under it.
    path: String,
    fault: Fault,
    /// How many more requests it applies to; None: all.
    remaining: Option<usize>,
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
    seen: Mutex<Vec<Seen>>,
}

#[derive(Clone)]
pub struct Proxy {
    /// The proxy's own base URL, to use as an account's `processor.base_url`.
    pub base: String,
    shared: Arc<Shared>,
}

impl Proxy {
    /// Starts a proxy in front of `target` (a base URL such as `<app>/sandbox/processor/v1`).
    pub async fn start(target: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let shared = Arc::new(Shared::default());
        let target = target.trim_end_matches('/').to_owned();
        let http = reqwest::Client::new();
        let state = Arc::clone(&shared);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (state, target, http) = (Arc::clone(&state), target.clone(), http.clone());
                tokio::spawn(async move { serve(stream, &state, &target, &http).await });
            }
        });
        Self { base, shared }
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
        self.shared.rules.lock().expect("rules").push(Rule {
            method: method.to_owned(),
            path: path.to_owned(),
            fault,
            remaining,
        });
    }

    /// Forwards everything from now on.
    pub fn clear(&self) {
        self.shared.rules.lock().expect("rules").clear();
    }

    /// The requests of `method path` seen so far (the path matched as in rules).
    pub fn seen(&self, method: &str, path: &str) -> Vec<Seen> {
        self.shared
            .seen
            .lock()
            .expect("seen")
            .iter()
            .filter(|s| s.method == method && matches(path, &s.target))
            .cloned()
            .collect()
    }
}

fn matches(rule_path: &str, target: &str) -> bool {
    let path = target.split('?').next().unwrap_or_default();
    path == rule_path || (rule_path.ends_with('/') && path.starts_with(rule_path))
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
    let fault = {
        let mut rules = shared.rules.lock().expect("rules");
        let found = rules.iter_mut().find(|r| {
            r.method == request.method
                && matches(&r.path, &request.target)
                && r.remaining != Some(0)
        });
        found.map(|rule| {
            if let Some(n) = rule.remaining.as_mut() {
                *n -= 1;
            }
            rule.fault.clone()
        })
    };
    shared.seen.lock().expect("seen").push(Seen {
        method: request.method.clone(),
        target: request.target.clone(),
        body: String::from_utf8_lossy(&request.body).into_owned(),
        fault: fault.clone(),
    });
    match fault {
        Some(Fault::Answer(status, body)) => {
            respond(&mut stream, status, body.to_string().as_bytes()).await;
        }
        Some(Fault::Reset) => reset(stream),
        Some(Fault::ForwardThenAnswer(status)) => {
            forward(http, target, &request).await;
            let body = serde_json::json!({"error": {"type": "PROXY_FAULT", "reason": "injected"}});
            respond(&mut stream, status, body.to_string().as_bytes()).await;
        }
        Some(Fault::ForwardThenDrop) => {
            forward(http, target, &request).await;
            drop(stream);
        }
        Some(Fault::ForwardThenDelay(delay)) => {
            let (status, body) = forward(http, target, &request).await;
            tokio::time::sleep(delay).await;
            respond(&mut stream, status, &body).await;
        }
        None => {
            let (status, body) = forward(http, target, &request).await;
            respond(&mut stream, status, &body).await;
        }
    }
}

/// Sends the request on to the target; a failure to reach it is answered 502.
async fn forward(http: &reqwest::Client, target: &str, request: &Request) -> (u16, Vec<u8>) {
    let method = reqwest::Method::from_bytes(request.method.as_bytes()).expect("method");
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
