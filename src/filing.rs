//! Filing electronic documents with DIAN (CONTRACT §12): a loop that claims the pending
//! documents that are due (`Store::claim_dian_documents`: a lease per row, so several nodes
//! share the work), signs each one once (the exact XML is kept and is what the XML endpoints
//! serve), sends it through the account's `DianEmitter`, and records the answer. Accepted and
//! rejected are final; unknown (a timeout, a 5xx, a fault) leaves it pending, asked about again
//! with backoff: `GetStatus` first, and sent again only when DIAN says it has no such
//! document, so a number is never sent blindly twice. Nothing here runs inside a charge's
//! settlement: numbering does (`store::dian::numbering`), and filing follows it.
//!
//! Sandbox accounts file with the in-process sandbox DIAN (told of their software and ranges
//! before each send, since it remembers nothing across restarts), reached over HTTP at this
//! node's own address, or with the standalone one an operator named (`dian_sandbox_url`);
//! live accounts with DIAN's service for their environment, or the address
//! an operator set. The test clock's advance calls `flush`.

use crate::clock::Clock;
use crate::config::Config;
use crate::dian::certificate::Certificate;
use crate::dian::document::Kind;
use crate::dian::emitter::{DianEmitter, DianService, Outcome, Unknown};
use crate::dian::sandbox::{SERVICE_PATH, SandboxDian};
use crate::dian::soap::client::{SoapClient, default_address};
use crate::domain::dian::{
    DianStatus, DianWaiting, Environment, RangeUse, colombian_date, software_security_code,
};
use crate::domain::recheck::recheck_delay;
use crate::domain::time::from_millis;
use crate::ids::{AccountId, DocumentId};
use crate::store::dian::DianSecrets;
use crate::store::dian::submission::{Claimed, Prepared, Redated};
use crate::store::dian::waiting::WaitingGroup;
use crate::store::{Store, StoreResult};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where the in-process sandbox DIAN is mounted.
pub const SANDBOX_MOUNT: &str = "/sandbox/dian";
/// Documents claimed per pass.
const BATCH: u64 = 16;
/// Passes of one `flush` at most (each pass files what the last left due).
const FLUSH_PASSES: usize = 8;
/// How often the ranges' gauges are refreshed, in passes of the loop.
const GAUGE_EVERY: u64 = 30;

/// DIAN's ApplicationResponse, from the base64 of its answer; `None` when it is not text.
fn decoded(encoded: &str) -> Option<String> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded.split_whitespace().collect::<String>())
        .ok()?;
    String::from_utf8(bytes).ok()
}

/// The filing loop's handle, cheap to clone.
#[derive(Clone)]
pub struct Filing(Arc<Inner>);

struct Inner {
    store: Store,
    clock: Clock,
    sandbox: Arc<SandboxDian>,
    /// The sandbox's service: the in-process one at this node's own address, or another.
    sandbox_address: String,
    /// Whether that is the in-process sandbox, which is told of software and ranges here.
    sandbox_in_process: bool,
    test_address: String,
    production_address: String,
    timeout: Duration,
    retry_base: Duration,
    /// A claim outlives the attempt it was made for: three calls at most (a status, a send, a
    /// status after "already received"), each within `timeout`, and the rows' writes. A
    /// claim that lapses anyway loses its writes (each is conditional on the claim).
    lease: Duration,
    /// Each account's emitter, with the fingerprint of the secrets and address it was made of.
    emitters: Mutex<HashMap<AccountId, (String, Arc<DianService>)>>,
    /// How often the loop looks for documents to file.
    interval: Duration,
}

impl Filing {
    pub fn new(store: Store, clock: Clock, sandbox: Arc<SandboxDian>, config: &Config) -> Self {
        let timeout = Duration::from_millis(config.dian_timeout_ms.max(1));
        Self(Arc::new(Inner {
            store,
            clock,
            sandbox,
            sandbox_address: config
                .dian_sandbox_url
                .clone()
                .unwrap_or_else(|| format!("{}{SANDBOX_MOUNT}{SERVICE_PATH}", config.node_url())),
            sandbox_in_process: config.dian_sandbox_url.is_none(),
            test_address: config
                .dian_test_url
                .clone()
                .unwrap_or_else(|| default_address(Environment::Test).to_owned()),
            production_address: config
                .dian_production_url
                .clone()
                .unwrap_or_else(|| default_address(Environment::Production).to_owned()),
            timeout,
            retry_base: Duration::from_millis(config.dian_retry_base_ms.max(1)),
            interval: Duration::from_millis(config.dian_interval_ms.max(10)),
            lease: timeout * 3 + Duration::from_secs(5),
            emitters: Mutex::new(HashMap::new()),
        }))
    }

    /// Runs passes every `interval` until `stop` changes or closes.
    async fn run(self, interval: Duration, mut stop: tokio::sync::watch::Receiver<()>) {
        let mut passes: u64 = 0;
        loop {
            if passes.is_multiple_of(GAUGE_EVERY)
                && let Err(err) = self.refresh_gauges().await
            {
                tracing::warn!(error = ?err, "refreshing the DIAN ranges' gauges failed");
            }
            passes += 1;
            let now = chrono::Utc::now().timestamp_millis();
            if let Err(err) = self.pass(None, now).await {
                tracing::warn!(error = ?err, "a DIAN filing pass failed");
            }
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = stop.changed() => return,
            }
        }
    }

    /// Files every document of `account` due by its clock's now (the test clock's promise),
    /// in at most a few passes; one the loop (or another node) holds is waited for, within
    /// a call's timeout.
    pub async fn flush(&self, account: &AccountId) -> StoreResult<()> {
        let deadline = tokio::time::Instant::now() + self.0.timeout + Duration::from_secs(5);
        let mut passes = 0;
        loop {
            let due_by = self.0.clock.fresh_now_ms(account).await?;
            if passes < FLUSH_PASSES && self.pass(Some(account), due_by).await? > 0 {
                passes += 1;
                continue;
            }
            let now = chrono::Utc::now().timestamp_millis();
            if self
                .0
                .store
                .dian_documents_held(account, due_by, now)
                .await?
                == 0
                || tokio::time::Instant::now() >= deadline
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    /// One pass: numbers the invoices waiting for a range that may have become usable (a
    /// range that starts today, the account's clock moved on), then claims what is due by
    /// `due_by` and files it, all at once; how many it claimed.
    async fn pass(&self, account: Option<&AccountId>, due_by: i64) -> StoreResult<usize> {
        if let Err(err) = self.number_waiting(account).await {
            tracing::warn!(error = ?err, "numbering the DIAN documents waiting for a range failed; tried again next pass");
        }
        let claim = crate::secrets::random_token("dclm_", 24);
        let now = chrono::Utc::now().timestamp_millis();
        let claimed = self
            .0
            .store
            .claim_dian_documents(
                account,
                &claim,
                due_by,
                now,
                self.0.lease.as_millis() as i64,
                BATCH,
            )
            .await?;
        let count = claimed.len();
        let mut running = tokio::task::JoinSet::new();
        for document in claimed {
            let filing = self.clone();
            let claim = claim.clone();
            running.spawn(async move {
                let id = document.row.id.clone();
                if let Err(err) = filing.file(document, &claim).await {
                    tracing::warn!(document = %id, error = ?err, "filing a document with DIAN failed; it stays pending");
                }
            });
        }
        running.join_all().await;
        Ok(count)
    }

    /// Numbers the waiting invoices of every account that has some (or of `account`), each
    /// as issued at its account's instant now: run at every pass, so that a range valid from
    /// today numbers them on its first day (CONTRACT §12a) and a numbering that failed is
    /// tried again.
    async fn number_waiting(&self, account: Option<&AccountId>) -> StoreResult<()> {
        for waiting in self.0.store.accounts_awaiting_numbers(account).await? {
            let now = self.0.clock.now_ms(&waiting).await?;
            let numbered = self.0.store.number_waiting(&waiting, now).await?;
            if numbered > 0 {
                tracing::info!(account = %waiting, numbered, "DIAN documents waiting for a range were numbered");
            }
        }
        Ok(())
    }

    /// One attempt at one claimed document: a document sent before whose answer was unknown
    /// is asked about first; one DIAN does not hold is signed (again, when the software PIN
    /// changed since it was signed) and sent.
    async fn file(&self, claimed: Claimed, claim: &str) -> StoreResult<()> {
        let Claimed {
            row,
            sandbox,
            prepared,
        } = claimed;
        let store = &self.0.store;
        let now = chrono::Utc::now().timestamp_millis();
        let account = row.account_id.clone();
        let (document, secrets) = match prepared {
            Prepared::Ready { document, secrets } => (document, secrets),
            Prepared::WaitsForInvoice => {
                let later = now + self.0.retry_base.as_millis() as i64;
                return store.retry_dian_later(&row.id, claim, later, None).await;
            }
            Prepared::InvoiceRejected => {
                // Sending it would be refused for certain: it rests, visibly, until its
                // invoice is corrected.
                let since = self.0.clock.now_ms(&account).await?;
                tracing::warn!(document = %row.id, "a credit note of an invoice DIAN rejected is held, not sent");
                return store
                    .park_dian_document(&row.id, claim, DianWaiting::InvoiceRejected, since)
                    .await;
            }
            Prepared::Settings(why) => {
                tracing::error!(document = %row.id, why = %why, "a DIAN document waits for the account's DIAN settings; asked again in an hour");
                let since = self.0.clock.now_ms(&account).await?;
                return store
                    .retry_dian_later(
                        &row.id,
                        claim,
                        now + 3_600_000,
                        Some((DianWaiting::Settings, since)),
                    )
                    .await;
            }
            Prepared::Broken(why) => {
                tracing::error!(document = %row.id, why = %why, "a DIAN document cannot be built; asked again in an hour");
                return store
                    .retry_dian_later(&row.id, claim, now + 3_600_000, None)
                    .await;
            }
        };
        let emitter = match self
            .emitter(&row.account_id, sandbox, row.environment, &secrets)
            .await
        {
            Ok(emitter) => emitter,
            Err(why) => {
                tracing::error!(account = %row.account_id, why = %why, "the account's DIAN certificate cannot be used; asked again in an hour");
                let since = self.0.clock.now_ms(&account).await?;
                return store
                    .retry_dian_later(
                        &row.id,
                        claim,
                        now + 3_600_000,
                        Some((DianWaiting::Settings, since)),
                    )
                    .await;
            }
        };
        if sandbox && self.0.sandbox_in_process {
            self.0
                .sandbox
                .register_software(&document.software.id, &secrets.software_pin);
            if let Kind::Invoice { range, .. } = &document.kind {
                self.0
                    .sandbox
                    .register_range(&document.seller.nit, range.clone());
            }
        }
        let mut document = document;
        let mut key = row.unique_code.clone().unwrap_or_default();
        if row.sent_at.is_some() {
            match emitter.status(&key).await {
                // DIAN does not hold it: it may be sent (again).
                Outcome::Unknown(Unknown::NotFound) => {}
                other => return self.conclude(&row, claim, other, now).await,
            }
        }
        // Signed with the software's PIN in force now, or signed again: DIAN checks the
        // SoftwareSecurityCode (and a credit note's CUDE) against the PIN it holds now, and
        // it holds no document of this number, so nothing it knows changes.
        let security_code = software_security_code(
            &document.software.id,
            &secrets.software_pin,
            &document.number(),
        );
        let xml = match row.xml.clone().filter(|xml| xml.contains(&security_code)) {
            Some(xml) => xml,
            None => {
                // Signed at the account's instant: a sandbox account's test clock may be ahead,
                // and DIAN compares the signing time with the issue instant. DIAN accepts a
                // document only on the Colombian date it was issued (FAD09e): one numbered on
                // an earlier day and never sent is re-dated to now, with the code that date
                // gives it (an invoice that waited for a range, a node down across midnight, a
                // test clock moved between numbering and signing).
                let signing_time = from_millis(self.0.clock.now_ms(&account).await?);
                let redated = colombian_date(signing_time) != colombian_date(document.issued_at);
                if redated {
                    if let Kind::Invoice { range, .. } = &document.kind
                        && colombian_date(signing_time) > range.valid_to
                    {
                        // Its range ended before the new date: DIAN would refuse it (FAB07b).
                        // Its number, never sent, is given up and it is numbered again.
                        tracing::warn!(document = %row.id, "a DIAN invoice's range ended before it could be sent; it is numbered again");
                        return store
                            .renumber_dian_invoice(&row.id, claim, signing_time.timestamp_millis())
                            .await;
                    }
                    document.issued_at = signing_time;
                }
                let code = document.unique_code();
                let rekeyed = code != key;
                key = code;
                let signed = match emitter.sign(&document, signing_time) {
                    Ok(signed) => String::from_utf8_lossy(&signed).into_owned(),
                    Err(err) => {
                        tracing::error!(document = %row.id, error = %err, "signing a DIAN document failed; asked again in an hour");
                        return store
                            .retry_dian_later(&row.id, claim, now + 3_600_000, None)
                            .await;
                    }
                };
                let changed = (redated || rekeyed).then(|| Redated {
                    issued_at: redated.then(|| signing_time.timestamp_millis()),
                    unique_code: &key,
                });
                if !store
                    .record_dian_signature(&row.id, claim, &signed, changed)
                    .await?
                {
                    return Ok(());
                }
                if redated {
                    tracing::info!(document = %row.id, "a DIAN document numbered on an earlier day was re-dated to its signing");
                }
                if rekeyed && !redated {
                    tracing::info!(document = %row.id, "a DIAN document was signed again with the software's new PIN");
                }
                signed
            }
        };
        let outcome = self
            .send(&*emitter, &row.id, claim, &document, &xml, &key)
            .await?;
        self.conclude(&row, claim, outcome, now).await
    }

    /// Records what DIAN made of `row`: accepted or rejected (final), or unknown (asked about
    /// again with backoff).
    async fn conclude(
        &self,
        row: &crate::store::dian::DianDocument,
        claim: &str,
        outcome: Outcome,
        now: i64,
    ) -> StoreResult<()> {
        let store = &self.0.store;
        let (status, messages, response) = match outcome {
            Outcome::Accepted {
                messages,
                application_response,
                ..
            } => (
                DianStatus::Accepted,
                messages,
                application_response.and_then(|encoded| decoded(&encoded)),
            ),
            Outcome::Rejected { messages, .. } => (DianStatus::Rejected, messages, None),
            Outcome::Unknown(why) => {
                let attempt = u32::try_from(row.attempts + 1).unwrap_or(u32::MAX);
                let later = now + recheck_delay(self.0.retry_base, attempt).as_millis() as i64;
                tracing::info!(document = %row.id, why = %why, attempt, "DIAN's answer is unknown; asked again later");
                metrics::counter!("dian_unknown_answers_total").increment(1);
                return store.retry_dian_later(&row.id, claim, later, None).await;
            }
        };
        let event_at = self.0.clock.now_ms(&row.account_id).await?;
        metrics::counter!("dian_documents_filed_total", "status" => status.as_str()).increment(1);
        store
            .record_dian_outcome(
                &row.id,
                claim,
                status,
                &messages,
                response.as_deref(),
                event_at,
                now,
            )
            .await?;
        Ok(())
    }

    /// Sends `xml` once, noted before it goes out. A number DIAN already holds (rule 90) is
    /// asked about by our key: DIAN's answer about it is the outcome, and "no such document"
    /// means DIAN holds the number under another document, which is DIAN's refusal of this
    /// one (with DIAN's messages), never an unknown to send again and again.
    async fn send(
        &self,
        emitter: &dyn DianEmitter,
        id: &DocumentId,
        claim: &str,
        document: &crate::dian::document::Document,
        xml: &str,
        key: &str,
    ) -> StoreResult<Outcome> {
        let now = chrono::Utc::now().timestamp_millis();
        if !self.0.store.record_dian_send(id, claim, now).await? {
            return Ok(Outcome::Unknown(Unknown::Request(
                "the claim lapsed".into(),
            )));
        }
        Ok(match emitter.submit(document, xml.as_bytes()).await {
            Outcome::Unknown(Unknown::AlreadyReceived(messages)) => {
                match emitter.status(key).await {
                    Outcome::Unknown(Unknown::NotFound) => {
                        tracing::warn!(document = %id, "DIAN holds this number under another document: rejected");
                        Outcome::Rejected {
                            status_code: crate::dian::soap::response::REFUSED.to_owned(),
                            messages,
                        }
                    }
                    other => other,
                }
            }
            other => other,
        })
    }

    /// The account's emitter, made again only when its certificate or address changed (the
    /// certificate read on the blocking pool).
    async fn emitter(
        &self,
        account: &AccountId,
        sandbox: bool,
        environment: Environment,
        secrets: &DianSecrets,
    ) -> Result<Arc<DianService>, String> {
        let address = if sandbox {
            &self.0.sandbox_address
        } else {
            match environment {
                Environment::Test => &self.0.test_address,
                Environment::Production => &self.0.production_address,
            }
        };
        let fingerprint = crate::secrets::sha256_hex(format!(
            "{address}\n{}\n{}",
            secrets.p12_base64, secrets.password
        ));
        if let Ok(emitters) = self.0.emitters.lock()
            && let Some((known, emitter)) = emitters.get(account)
            && *known == fingerprint
        {
            return Ok(Arc::clone(emitter));
        }
        let certificate =
            Certificate::read_off_the_workers(secrets.p12_base64.clone(), secrets.password.clone())
                .await
                .map_err(|err| err.to_string())?;
        let certificate = Arc::new(certificate);
        let client = SoapClient::new(address.clone(), Arc::clone(&certificate), self.0.timeout)
            .map_err(|err| err.to_string())?;
        let emitter = Arc::new(DianService::new(certificate, client));
        if let Ok(mut emitters) = self.0.emitters.lock() {
            emitters.insert(account.clone(), (fingerprint, Arc::clone(&emitter)));
        }
        Ok(emitter)
    }

    /// The documents waiting for an operator, by account and reason, each group with how long
    /// its oldest has waited (milliseconds, by its account's clock): the gauges' and the
    /// dashboard's.
    pub async fn waiting(&self) -> StoreResult<Vec<(WaitingGroup, i64)>> {
        let real_now = chrono::Utc::now().timestamp_millis();
        let mut groups = Vec::new();
        for group in self.0.store.dian_waiting_groups().await? {
            let now = self
                .0
                .clock
                .now_ms(&group.account_id)
                .await
                .unwrap_or(real_now);
            let waited = (now - group.oldest_since).max(0);
            groups.push((group, waited));
        }
        Ok(groups)
    }

    /// Sets each range's gauges (the share of its numbers used and the days it has left) and
    /// the waiting documents' (how many wait for an operator, for each reason, and for how
    /// long the oldest has: an alert past a day).
    pub async fn refresh_gauges(&self) -> StoreResult<()> {
        let mut waiting: HashMap<DianWaiting, (u64, i64)> =
            DianWaiting::ALL.iter().map(|w| (*w, (0, 0))).collect();
        for (group, waited_ms) in self.waiting().await? {
            let entry = waiting.entry(group.waiting).or_insert((0, 0));
            entry.0 += group.count;
            entry.1 = entry.1.max(waited_ms);
        }
        for (reason, (count, oldest_ms)) in waiting {
            let labels = [("reason", reason.as_str())];
            metrics::gauge!("dian_documents_waiting", &labels).set(count as f64);
            metrics::gauge!("dian_documents_waiting_oldest_seconds", &labels)
                .set((oldest_ms.max(0) / 1_000) as f64);
        }
        let today = colombian_date(chrono::Utc::now());
        for range in self.0.store.all_dian_ranges().await? {
            let used = RangeUse::of(
                range.range_from,
                range.range_to,
                range.next_number,
                range.valid_to_date(),
                today,
            );
            let labels = [
                ("account", range.account_id.to_string()),
                ("range", range.id.to_string()),
                ("prefix", range.prefix.clone()),
            ];
            metrics::gauge!("dian_range_used_ratio", &labels).set(used.used);
            metrics::gauge!("dian_range_days_left", &labels).set(used.days_left as f64);
        }
        Ok(())
    }
}

impl crate::background::Loop for Filing {
    fn run(
        self: Arc<Self>,
        stop: tokio::sync::watch::Receiver<()>,
    ) -> crate::background::BoxFuture<'static, ()> {
        let filing = (*self).clone();
        let interval = filing.0.interval;
        Box::pin(filing.run(interval, stop))
    }

    fn flush<'a>(
        &'a self,
        account: &'a AccountId,
    ) -> crate::background::BoxFuture<'a, StoreResult<()>> {
        Box::pin(Filing::flush(self, account))
    }
}
