//! The sandbox DIAN: DIAN's web service (`WcfDianCustomerServices.svc`, SOAP 1.2 with
//! WS-Security) served by our code, like the sandbox processor: in-process under a prefix the
//! caller chooses, or standalone. `SendBillSync` unzips the document, refuses what DIAN refuses
//! (`validate`) and remembers its answer; `GetStatus` answers it again by the document's key;
//! a number accepted once is refused as a duplicate after.
//!
//! It knows the numbering ranges and software it is told of (`register_range`,
//! `register_software`, or `POST _sandbox/ranges` and `_sandbox/software` with the admin
//! token), and it can be told to fail (`fail_next`, `POST _sandbox/faults`): to answer late
//! (past a client's timeout) or with a 503, for the next so many calls.

mod admin;
pub mod answer;
mod service;
pub mod validate;

pub use crate::processor::sandbox::AdminAuth;

use crate::dian::document::NumberingRange;
use crate::dian::soap::response::DianResponse;
use axum::Router;
use axum::routing::post;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Where the service answers, relative to the router's mount point.
pub const SERVICE_PATH: &str = "/WcfDianCustomerServices.svc";

#[derive(Clone, Debug)]
pub struct SandboxDianConfig {
    /// How long a "late" fault holds the answer back.
    pub late_by: Duration,
    /// Whether a request's WS-Security signature is checked (DIAN does).
    pub check_ws_security: bool,
}

impl Default for SandboxDianConfig {
    fn default() -> Self {
        Self {
            late_by: Duration::from_secs(30),
            check_ws_security: true,
        }
    }
}

/// A failure the sandbox is told to produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Answer only after `late_by` (a client's timeout).
    Late,
    /// Answer 503 without a body.
    Unavailable,
}

/// A document the sandbox accepted.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AcceptedDocument {
    pub seller_nit: String,
    pub number: String,
    /// Its CUFE or CUDE.
    pub key: String,
    /// How many times it was sent (`SendBillSync`), the accepted time included.
    pub sends: u32,
}

/// What the sandbox was told: ranges by seller NIT, software PINs by software id.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    ranges: Vec<(String, NumberingRange)>,
    software: HashMap<String, String>,
}

impl Registry {
    /// The range of `seller_nit` under `resolution` whose prefix starts `number`.
    pub fn range(
        &self,
        seller_nit: &str,
        resolution: &str,
        number: &str,
    ) -> Option<NumberingRange> {
        self.ranges
            .iter()
            .filter(|(nit, range)| {
                nit == seller_nit
                    && range.resolution_number == resolution
                    && number.starts_with(&range.prefix)
            })
            .map(|(_, range)| range.clone())
            .max_by_key(|range| range.prefix.len())
    }

    pub fn pin(&self, software_id: &str) -> Option<String> {
        self.software.get(software_id).cloned()
    }
}

/// How many refused documents' answers the sandbox remembers: the key of a refused document
/// is whatever its sender wrote, so keeping every one would let anybody fill its memory. The
/// oldest is forgotten first (`GetStatus` then answers that it does not know it, as DIAN does
/// for a document it never accepted).
const REFUSED_REMEMBERED: usize = 10_000;

#[derive(Default)]
struct State {
    registry: Registry,
    /// Every answer given to a document, by its key (CUFE or CUDE): each accepted one, and
    /// the latest `REFUSED_REMEMBERED` refused ones.
    answers: HashMap<String, DianResponse>,
    /// The keys of the refused answers kept, oldest first.
    refused: VecDeque<String>,
    /// Accepted numbers: (seller NIT, number) → key.
    numbers: HashMap<(String, String), String>,
    /// How many times each document (by key) was sent.
    sends: HashMap<String, u32>,
    fault: Option<(Fault, u32)>,
}

impl State {
    /// Keeps a refusal's answer under `key`, unless the document was accepted before.
    fn remember_refused(&mut self, key: String, answer: DianResponse) {
        if self.answers.get(&key).is_some_and(|known| known.is_valid) {
            return;
        }
        if self.answers.insert(key.clone(), answer).is_none() {
            self.refused.push_back(key);
        }
        while self.refused.len() > REFUSED_REMEMBERED {
            let Some(oldest) = self.refused.pop_front() else {
                break;
            };
            if !self
                .answers
                .get(&oldest)
                .is_some_and(|known| known.is_valid)
            {
                self.answers.remove(&oldest);
                self.sends.remove(&oldest);
            }
        }
    }
}

pub struct SandboxDian {
    config: SandboxDianConfig,
    admin: AdminAuth,
    state: Mutex<State>,
}

impl SandboxDian {
    pub fn new(config: SandboxDianConfig, admin: AdminAuth) -> Arc<Self> {
        Arc::new(Self {
            config,
            admin,
            state: Mutex::new(State::default()),
        })
    }

    /// The routes, relative: `POST /WcfDianCustomerServices.svc` and `_sandbox/…`.
    pub fn router(self: Arc<Self>) -> Router {
        Router::new()
            .route(SERVICE_PATH, post(service::serve))
            .with_state(Arc::clone(&self))
            .nest("/_sandbox", admin::router(self))
    }

    /// Serves the routes on `listener` at its root until `shutdown` completes: the standalone
    /// sandbox (and the tests' round trips over real HTTP).
    pub async fn serve(
        self: Arc<Self>,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        axum::serve(listener, self.router())
            .with_graceful_shutdown(shutdown)
            .await
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain maps behind: still usable.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Authorises `range` for the seller whose NIT is `seller_nit` (replacing what it was told
    /// of the same seller, resolution and prefix).
    pub fn register_range(&self, seller_nit: &str, range: NumberingRange) {
        let mut state = self.state();
        let ranges = &mut state.registry.ranges;
        ranges.retain(|(nit, known)| {
            !(nit == seller_nit
                && known.resolution_number == range.resolution_number
                && known.prefix == range.prefix
                && known.from == range.from)
        });
        ranges.push((seller_nit.to_owned(), range));
    }

    /// Enables the software `software_id` with its PIN.
    pub fn register_software(&self, software_id: &str, pin: &str) {
        self.state()
            .registry
            .software
            .insert(software_id.to_owned(), pin.to_owned());
    }

    /// Holds `number` of `seller_nit` as accepted under another document's `key`, as DIAN does
    /// when a merchant's previous software used part of a range, or two accounts share a NIT
    /// (`POST _sandbox/documents`): our document of that number is then refused by rule 90.
    pub fn hold_for_another(&self, seller_nit: &str, number: &str, key: &str) {
        let mut state = self.state();
        state
            .numbers
            .insert((seller_nit.to_owned(), number.to_owned()), key.to_owned());
        state.answers.insert(
            key.to_owned(),
            DianResponse {
                is_valid: true,
                status_code: crate::dian::soap::response::ACCEPTED.into(),
                status_description: "Procesado Correctamente.".into(),
                status_message: format!("La Factura electrónica {number}, ha sido autorizada."),
                document_key: Some(key.to_owned()),
                ..DianResponse::default()
            },
        );
        state.sends.insert(key.to_owned(), 1);
    }

    /// The next `times` calls fail with `fault`.
    pub fn fail_next(&self, fault: Fault, times: u32) {
        self.state().fault = (times > 0).then_some((fault, times));
    }

    /// Every document it accepted, with how many times it was sent (`GET _sandbox/documents`):
    /// what a fault run compares with the documents the service believes accepted.
    pub fn accepted(&self) -> Vec<AcceptedDocument> {
        let state = self.state();
        let mut accepted: Vec<AcceptedDocument> = state
            .numbers
            .iter()
            .map(|((seller_nit, number), key)| AcceptedDocument {
                seller_nit: seller_nit.clone(),
                number: number.clone(),
                key: key.clone(),
                sends: state.sends.get(key).copied().unwrap_or(0),
            })
            .collect();
        accepted.sort_by(|a, b| (&a.seller_nit, &a.number).cmp(&(&b.seller_nit, &b.number)));
        accepted
    }

    /// Takes one call's fault, if one is pending.
    fn take_fault(&self) -> Option<Fault> {
        let mut state = self.state();
        let (fault, left) = state.fault?;
        state.fault = (left > 1).then_some((fault, left - 1));
        Some(fault)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal() -> DianResponse {
        DianResponse {
            is_valid: false,
            status_code: crate::dian::soap::response::REFUSED.into(),
            ..DianResponse::default()
        }
    }

    /// Strangers choose a refused document's key: the sandbox must not keep them all.
    #[test]
    fn refused_answers_are_bounded_and_accepted_ones_kept() {
        let mut state = State::default();
        state.answers.insert(
            "accepted".into(),
            DianResponse {
                is_valid: true,
                ..DianResponse::default()
            },
        );
        state.remember_refused("accepted".into(), refusal());
        assert!(state.answers["accepted"].is_valid);
        for n in 0..REFUSED_REMEMBERED + 500 {
            let key = format!("key-{n}");
            *state.sends.entry(key.clone()).or_insert(0) += 1;
            state.remember_refused(key, refusal());
        }
        assert_eq!(state.answers.len(), REFUSED_REMEMBERED + 1);
        assert!(state.sends.len() <= REFUSED_REMEMBERED);
        assert!(state.answers["accepted"].is_valid);
        assert!(!state.answers.contains_key("key-0"));
        assert!(
            state
                .answers
                .contains_key(&format!("key-{}", REFUSED_REMEMBERED + 499))
        );
    }
}
