//! The customers' mail server of a fault run, and a fault proxy in front of it.
//!
//! The sink is a real SMTP server (mailin-embedded) on a loopback port, in a thread of its
//! own, keeping every message it answered 250 to by its `Message-ID`. The proxy sits between
//! the service and the sink at the TCP level and, while faults are on, gives each connection
//! one fault drawn from a seeded generator: refused (closed at once, nothing said), busy (a
//! `421` greeting, then closed), hung (accepted and never answered: the client's timeout ends
//! it), dropped (everything forwarded up to the end of the message's data, then both sides
//! closed before the sink's `250` comes back: the sink may have the message while the client
//! cannot know it) or refused for good (a `554` greeting). Each is an outcome the service must
//! read as unknown (the first four) or as a no (the last).

use mailin_embedded::response::{OK, Response};
use mailin_embedded::{Handler, Server, SslConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the proxy does with one connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SmtpFault {
    /// Closed at once, before the greeting.
    Refuse,
    /// `421 Service not available`, then closed: try again later.
    Busy,
    /// Accepted, never answered, held this long (past the client's timeout).
    Hang(Duration),
    /// Forwarded until the message's data ended, then closed before the answer.
    DropAfterData,
    /// `554` at the greeting: refused for good.
    Reject,
}

impl SmtpFault {
    pub fn name(self) -> &'static str {
        match self {
            SmtpFault::Refuse => "refused",
            SmtpFault::Busy => "421",
            SmtpFault::Hang(_) => "hung",
            SmtpFault::DropAfterData => "dropped-after-data",
            SmtpFault::Reject => "554",
        }
    }
}

/// The faults of a run, `rate` of the connections in all: the unknown ones in equal shares,
/// and a tenth of that share refused for good (so that some notices end `failed`).
pub fn faults(rate: f64, timeout: Duration) -> Vec<(SmtpFault, f64)> {
    let unknown = [
        SmtpFault::Refuse,
        SmtpFault::Busy,
        SmtpFault::Hang(timeout + Duration::from_millis(300)),
        SmtpFault::DropAfterData,
    ];
    let share = rate / (unknown.len() as f64 + 0.1);
    let mut all: Vec<_> = unknown.into_iter().map(|f| (f, share)).collect();
    all.push((SmtpFault::Reject, share * 0.1));
    all
}

/// Messages the sink answered 250 to, by `Message-ID` (how many copies of each).
#[derive(Clone, Default)]
struct Accepted(Arc<Mutex<BTreeMap<String, usize>>>);

#[derive(Clone)]
struct Sink {
    accepted: Accepted,
    buffer: Vec<u8>,
}

impl Handler for Sink {
    fn data_start(&mut self, _: &str, _: &str, _: bool, _: &[String]) -> Response {
        self.buffer.clear();
        OK
    }

    fn data(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.buffer.extend_from_slice(buf);
        Ok(())
    }

    fn data_end(&mut self) -> Response {
        let message = std::mem::take(&mut self.buffer);
        let id = message_id(&message).unwrap_or_default();
        *lock(&self.accepted.0).entry(id).or_insert(0) += 1;
        OK
    }
}

/// The `Message-ID` header's value of a raw message, as written (`<ntc_…@host>`).
pub fn message_id(raw: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(raw);
    let head = text.split("\r\n\r\n").next()?;
    head.lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("message-id")
                .then(|| value.trim().to_owned())
        })
        .filter(|id| !id.is_empty())
}

/// A real SMTP server on a free loopback port.
pub struct SmtpSink {
    pub port: u16,
    accepted: Accepted,
}

impl SmtpSink {
    pub fn start() -> anyhow::Result<Self> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let accepted = Accepted::default();
        let mut server = Server::new(Sink {
            accepted: accepted.clone(),
            buffer: Vec::new(),
        });
        server
            .with_name("mail.chaos.example")
            .with_ssl(SslConfig::None)
            .map_err(|err| anyhow::anyhow!("SMTP sink: {err}"))?
            .with_tcp_listener(listener);
        std::thread::spawn(move || {
            let _ = server.serve();
        });
        Ok(Self { port, accepted })
    }

    /// Every message accepted so far, by `Message-ID`, with its number of copies.
    pub fn accepted(&self) -> BTreeMap<String, usize> {
        lock(&self.accepted.0).clone()
    }
}

struct Random {
    rng: StdRng,
    faults: Vec<(SmtpFault, f64)>,
}

#[derive(Default)]
struct Shared {
    random: Mutex<Option<Random>>,
    faulted: Mutex<BTreeMap<&'static str, usize>>,
}

/// A TCP proxy in front of an SMTP server that gives connections faults.
pub struct SmtpProxy {
    pub port: u16,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl SmtpProxy {
    pub async fn start(target_port: u16) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let shared = Arc::new(Shared::default());
        let accepting = Arc::clone(&shared);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let fault = draw(&accepting);
                if let Some(fault) = fault {
                    *lock(&accepting.faulted).entry(fault.name()).or_insert(0) += 1;
                }
                tokio::spawn(connection(client, target_port, fault));
            }
        });
        Ok(Self { port, shared, task })
    }

    /// From now on each connection independently gets one of `faults` (with its probability)
    /// or none, drawn from a generator seeded with `seed`.
    pub fn randomly(&self, seed: u64, faults: Vec<(SmtpFault, f64)>) {
        *lock(&self.shared.random) = Some(Random {
            rng: StdRng::seed_from_u64(seed),
            faults,
        });
    }

    /// Forwards every connection from now on.
    pub fn clear(&self) {
        *lock(&self.shared.random) = None;
    }

    /// The connections faulted so far, by fault.
    pub fn faulted(&self) -> BTreeMap<&'static str, usize> {
        lock(&self.shared.faulted).clone()
    }
}

impl Drop for SmtpProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn draw(shared: &Shared) -> Option<SmtpFault> {
    let mut random = lock(&shared.random);
    let random = random.as_mut()?;
    let mut roll: f64 = random.rng.random();
    for (fault, share) in &random.faults {
        if roll < *share {
            return Some(*fault);
        }
        roll -= share;
    }
    None
}

async fn connection(mut client: TcpStream, target_port: u16, fault: Option<SmtpFault>) {
    match fault {
        Some(SmtpFault::Refuse) => return,
        Some(SmtpFault::Busy) => {
            let _ = client
                .write_all(b"421 4.3.2 mail.chaos.example busy, try again later\r\n")
                .await;
            return;
        }
        Some(SmtpFault::Reject) => {
            let _ = client
                .write_all(b"554 5.7.1 mail.chaos.example refuses this sender\r\n")
                .await;
            return;
        }
        Some(SmtpFault::Hang(held)) => {
            tokio::time::sleep(held).await;
            return;
        }
        Some(SmtpFault::DropAfterData) | None => {}
    }
    let Ok(server) = TcpStream::connect(("127.0.0.1", target_port)).await else {
        return;
    };
    let drop_after_data = fault == Some(SmtpFault::DropAfterData);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let upstream = async {
        // The client's bytes to the server; with `DropAfterData`, up to the end of the first
        // message's data (a line holding one dot), and then the connection ends both ways.
        let mut buf = [0u8; 8192];
        let mut tail: Vec<u8> = Vec::new();
        loop {
            let n = match client_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if server_write.write_all(&buf[..n]).await.is_err() {
                return;
            }
            if drop_after_data {
                tail.extend_from_slice(&buf[..n]);
                if tail.windows(5).any(|w| w == b"\r\n.\r\n") {
                    return;
                }
                let keep = tail.len().saturating_sub(4);
                tail.drain(..keep);
            }
        }
    };
    let downstream = async {
        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
    };
    // Whichever direction ends first ends the connection: dropping both halves closes it.
    tokio::select! {
        () = upstream => {}
        () = downstream => {}
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_id_is_read_from_the_head() {
        let raw = b"From: a@b\r\nMessage-ID: <ntc_1@billing.example>\r\n\r\nMessage-ID: body";
        assert_eq!(message_id(raw).as_deref(), Some("<ntc_1@billing.example>"));
        assert_eq!(message_id(b"From: a@b\r\n\r\nbody"), None);
    }

    #[test]
    fn the_faults_add_up_to_the_rate() {
        let total: f64 = faults(0.3, Duration::from_secs(1))
            .iter()
            .map(|(_, share)| share)
            .sum();
        assert!((total - 0.3).abs() < 1e-9, "{total}");
    }
}
