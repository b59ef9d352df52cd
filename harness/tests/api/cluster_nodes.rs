//! Several nodes on one PostgreSQL schema, started in this process: the shards split between
//! them, any node answers for any subscription (forwarding to the owner), a graceful shutdown
//! hands the shards over at once, and a node that lost a shard writes nothing to it. The
//! harness in `cluster.rs` runs the same against real processes with kills and pauses.

use crate::common::{
    ADMIN_TOKEN, Backend, TestApp, card_token, database_url, eventually, read, spawn_on_with,
};
use billing::processor::sandbox::{AdminAuth, SandboxConfig, serve_standalone};
use billing::store::ownership::{SHARDS, shard_of};
use reqwest::Method;
use serde_json::json;
use std::collections::BTreeSet;
use std::time::Duration;

fn held(epoch: i64) -> billing::store::ownership::Held {
    billing::store::ownership::Held {
        epoch,
        until: std::time::Instant::now() + Duration::from_secs(60),
    }
}

fn short_leases(config: &mut billing::config::Config) {
    config.lease_ttl_ms = 2_000;
    config.lease_renew_ms = 200;
}

/// Leases renewed as often, that a loaded machine's stall of a few seconds does not take away
/// (a test that no shard moves in, unlike the takeovers `short_leases` makes quick).
fn steady_leases(config: &mut billing::config::Config) {
    config.lease_ttl_ms = 10_000;
    config.lease_renew_ms = 200;
}

pub(crate) async fn owned(app: &TestApp) -> BTreeSet<u16> {
    let (status, body) = read(
        app.admin(Method::GET, "/admin/cluster")
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["shards_owned"]
        .as_array()
        .expect("shards")
        .iter()
        .map(|s| s.as_u64().expect("shard") as u16)
        .collect()
}

/// A sandbox processor of its own (so that every node charges through the same one), a
/// sandbox account using it whose events go to `events_to`'s ingress, a plan, a customer with
/// a 4242 card and a balance; returns the account as seen through `app`.
pub(crate) async fn shop(app: &TestApp, events_to: &TestApp) -> (TestApp, String, String, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let sandbox = format!("http://{}/v1", listener.local_addr().expect("addr"));
    let quick = SandboxConfig {
        settle_delay: Duration::from_millis(20),
        ..SandboxConfig::default()
    };
    tokio::spawn(serve_standalone(
        listener,
        quick,
        AdminAuth::from_token(ADMIN_TOKEN),
    ));
    let unique = uuid::Uuid::new_v4().simple().to_string();
    let keys = json!({"public_key": format!("pub_test_{unique}"),
        "private_key": format!("prv_test_{unique}"),
        "events_secret": format!("test_events_{unique}"),
        "integrity_secret": format!("test_integrity_{unique}")});
    let mut processor = keys.clone();
    processor["base_url"] = json!(sandbox);
    let (status, account) = read(
        app.admin(Method::POST, "/admin/accounts")
            .json(
                &json!({"name": "Two nodes", "sandbox": true, "processor": processor,
                "rate_limit_per_minute": 0}),
            )
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_eq!(status, 201, "{account}");
    let mut merchant = keys;
    merchant["events_url"] = json!(format!(
        "{}/webhooks/processor/{}",
        events_to.base,
        account["id"].as_str().expect("id")
    ));
    let response = reqwest::Client::new()
        .post(format!("{sandbox}/_sandbox/merchants"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&merchant)
        .send()
        .await
        .expect("send");
    assert!(response.status().is_success());
    let shop = app.as_account(&account);
    shop.top_up(100_000_000).await;
    let plan = shop.create_plan("Pro", 3_000_000, 30_000_000).await["id"]
        .as_str()
        .expect("plan")
        .to_owned();
    let (_, customer) = read(
        shop.post(
            "/v1/customers",
            json!({"email": "ana@example.co", "name": "Ana"}),
        )
        .await,
    )
    .await;
    let customer = customer["id"].as_str().expect("id").to_owned();
    let token = card_token(&shop, "4242424242424242").await;
    let (status, method) = read(
        shop.post(
            &format!("/v1/customers/{customer}/payment-methods"),
            token.payment_method(),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{method}");
    let method = method["id"].as_str().expect("id").to_owned();
    (shop, plan, customer, method)
}

/// The same account through another node.
pub(crate) fn through(shop: &TestApp, node: &TestApp) -> TestApp {
    let mut other = TestApp::attached(node.base.clone(), node.database_url.clone());
    other.api_key = shop.api_key.clone();
    other.account_id = shop.account_id.clone();
    other
}

#[tokio::test]
async fn two_nodes_split_the_shards_answer_for_each_other_and_hand_over_on_shutdown() {
    let Some(url) = database_url(Backend::Postgres).await else {
        return;
    };
    let a = spawn_on_with(url.clone(), short_leases).await;
    let b = spawn_on_with(url.clone(), short_leases).await;
    // Half each, disjoint.
    eventually(Duration::from_secs(20), || async {
        let (held_a, held_b) = (owned(&a).await, owned(&b).await);
        held_a.len() == 128 && held_b.len() == 128 && held_a.is_disjoint(&held_b)
    })
    .await;
    let (shop_a, plan, customer, method) = shop(&a, &a).await;
    let shop_b = through(&shop_a, &b);
    let (held_a, held_b) = (owned(&a).await, owned(&b).await);

    // Each node places the subscriptions it creates in its own shards, and charges their
    // first period itself.
    let mut created = Vec::new();
    for (node, held) in [(&shop_a, &held_a), (&shop_b, &held_b)] {
        for _ in 0..3 {
            let (status, sub) = read(
                node.post(
                    "/v1/subscriptions",
                    json!({"customer_id": customer, "plan_id": plan, "cycle": "monthly",
                        "payment_method_id": method}),
                )
                .await,
            )
            .await;
            assert_eq!(status, 201, "{sub}");
            let id = sub["id"].as_str().expect("id").to_owned();
            assert!(
                held.contains(&shard_of(&id)),
                "{id} placed outside its node"
            );
            created.push(id);
        }
    }
    // Any node acts on any subscription: the other node's are forwarded to their owner.
    for id in &created {
        for (node, action, status) in [
            (&shop_a, "pause", "paused"),
            (&shop_b, "resume", "active"),
            (&shop_a, "pause", "paused"),
        ] {
            let (code, body) = read(
                node.post(&format!("/v1/subscriptions/{id}/{action}"), json!({}))
                    .await,
            )
            .await;
            assert_eq!(code, 200, "{action} {id} at {}: {body}", node.base);
            assert_eq!(body["status"], status, "{body}");
        }
    }
    // A charge's outcome reaches its subscription's owner whichever ingress gets the event
    // (all events go to node A here): every first charge settled approved.
    for id in &created {
        let (_, sub) = read(shop_b.get(&format!("/v1/subscriptions/{id}")).await).await;
        assert_eq!(sub["status"], "paused", "{sub}");
    }
    eventually(Duration::from_secs(20), || async {
        let (_, page) = read(
            shop_a
                .get("/v1/events?type=charge.approved&limit=100")
                .await,
        )
        .await;
        page["data"]
            .as_array()
            .is_some_and(|d| d.len() == created.len())
    })
    .await;

    // Node A stops gracefully: B holds every shard long before A's leases would expire.
    drop(a);
    eventually(Duration::from_secs(5), || async {
        owned(&b).await.len() == usize::from(SHARDS)
    })
    .await;
    for id in &created {
        let (code, body) = read(
            shop_b
                .post(&format!("/v1/subscriptions/{id}/resume"), json!({}))
                .await,
        )
        .await;
        assert_eq!(code, 200, "{body}");
    }
    crate::common::assert_invariants(&shop_b).await;
}

/// A node paused past its lease finds, when it resumes, that its writes to the shard change
/// nothing: the store refuses before writing once the lease is no longer trusted, and a write
/// already under way is refused by the database once another node took the shard.
#[tokio::test]
async fn a_node_that_lost_its_shard_writes_nothing_to_it() {
    use billing::store::ownership::Ownership;
    use billing::store::{Store, StoreError};
    use std::sync::Arc;

    let Some(url) = database_url(Backend::Postgres).await else {
        return;
    };
    // A service to make the rows; it holds every shard under its own leases.
    let app = spawn_on_with(url.clone(), short_leases).await;
    let (shop, plan, customer, method) = shop(&app, &app).await;
    let start = (chrono::Utc::now() + chrono::Duration::days(10)).to_rfc3339();
    let (_, sub) = read(
        shop.post(
            "/v1/subscriptions",
            json!({"customer_id": customer, "plan_id": plan, "cycle": "monthly",
                "payment_method_id": method, "start_date": start}),
        )
        .await,
    )
    .await;
    let id = sub["id"].as_str().expect("id").to_owned();
    let shard = shard_of(&id);
    // Stopped, not only told to stop: its handover is done before we take the shard.
    app.stop().await;

    // Two nodes of our own, driven by hand: the old owner takes the shard, then the new one
    // takes it over once the old lease expired.
    let old = Arc::new(Ownership::clustered("node_old".into()));
    let new = Arc::new(Ownership::clustered("node_new".into()));
    let base = Store::connect(&url).await.expect("store");
    let old_store = base.clone().with_ownership(Arc::clone(&old));
    let new_store = base.clone().with_ownership(Arc::clone(&new));
    // The service's graceful stop gave its shards back.
    let epoch = old_store
        .acquire_shard("node_old", "http://old", shard, 300)
        .await
        .expect("acquire")
        .expect("free");
    old.hold(shard, held(epoch));
    let row = old_store
        .subscription_by_id(&billing::ids::SubscriptionId::parse(&id).expect("an id"))
        .await
        .expect("read")
        .expect("row");
    // The old owner's lease lasts 300 ms in the database; it still trusts it here (a node
    // paused after its last renewal would).
    // It begins a write and holds its fence lock...
    let txn = old_store.begin().await.expect("begin");
    let mut changed = row.clone();
    changed.metadata = Some("{\"written\":\"by the old owner\"}".into());
    let saved = txn.save_subscription(changed).await.expect("first write");
    // ... so a takeover, once the lease expired, leaves the shard alone until it is done.
    eventually(Duration::from_secs(5), || async {
        new_store
            .free_shards("node_new", "http://new", 256)
            .await
            .expect("free")
            .contains(&shard)
    })
    .await;
    let blocked = new_store
        .acquire_shard("node_new", "http://new", shard, 60_000)
        .await
        .expect("acquire");
    assert_eq!(blocked, None, "took the shard over a write in flight");
    txn.commit().await.expect("commit");
    let epoch = new_store
        .acquire_shard("node_new", "http://new", shard, 60_000)
        .await
        .expect("acquire")
        .expect("taken over");
    new.hold(shard, held(epoch));
    // The old owner still trusts its lease (it was paused, say): the database refuses.
    let txn = old_store.begin().await.expect("begin");
    let mut stale = saved.clone();
    stale.metadata = Some("{\"written\":\"after the takeover\"}".into());
    let refused = txn.save_subscription(stale).await;
    assert!(
        matches!(refused, Err(StoreError::Fenced(s)) if s == shard),
        "{refused:?}"
    );
    drop(txn);
    assert_eq!(old.epoch(shard), None, "the fenced node forgot the shard");
    // And before touching the database once it stopped trusting the lease.
    let txn = old_store.begin().await.expect("begin");
    assert!(matches!(
        txn.save_subscription(saved.clone()).await,
        Err(StoreError::Fenced(_))
    ));
    drop(txn);
    // The new owner writes.
    let txn = new_store.begin().await.expect("begin");
    let mut fresh = saved.clone();
    fresh.metadata = Some("{\"written\":\"by the new owner\"}".into());
    txn.save_subscription(fresh)
        .await
        .expect("new owner's write");
    txn.commit().await.expect("commit");
    let stored = base
        .subscription_by_id(&billing::ids::SubscriptionId::parse(&id).expect("an id"))
        .await
        .expect("read")
        .expect("row");
    assert_eq!(
        stored.metadata.as_deref(),
        Some("{\"written\":\"by the new owner\"}")
    );
}

/// SQLite is one process's file: one node holding every shard, and no internal routes.
#[tokio::test]
async fn a_sqlite_server_is_one_node_holding_every_shard() {
    let url = database_url(Backend::Sqlite).await.expect("sqlite");
    let app = spawn_on_with(url, crate::common::default_config).await;
    assert_eq!(owned(&app).await.len(), usize::from(SHARDS));
    let response = app
        .client
        .post(app.url("/internal/v1/broadcast"))
        .json(&json!({"type": "account", "account_id": "acct_x"}))
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), 404);
}

/// Two deployments in two schemas of one database are strangers: a write in flight in one
/// (holding its shard's fence shared) does not keep the other from taking the same shard
/// number. Advisory locks belong to the whole database; the fence's key includes the schema.
#[tokio::test]
async fn a_write_in_another_schema_does_not_hold_up_a_takeover() {
    use sea_orm::TransactionTrait;
    let (Some(first), Some(second)) = (
        database_url(Backend::Postgres).await,
        database_url(Backend::Postgres).await,
    ) else {
        return;
    };
    let mut stores = Vec::new();
    for url in [&first, &second] {
        let store = billing::store::Store::connect(url).await.expect("store");
        store.migrate().await.expect("migrate");
        stores.push(store);
    }
    let shard = 7;
    let writer = sea_orm::Database::connect(first.as_str())
        .await
        .expect("connect");
    let in_flight = writer.begin().await.expect("begin");
    billing::store::cluster::lock_shared(&in_flight, shard)
        .await
        .expect("fence");
    // In the schema of the write, the takeover waits for it (the next pass takes the shard)...
    let taken = stores[0]
        .acquire_shards("node-a", "http://127.0.0.1:1", &[shard], 10_000)
        .await
        .expect("acquire");
    assert!(
        taken.is_empty(),
        "a takeover must wait for a write in flight"
    );
    // ...in the other schema, nothing holds it.
    let taken = stores[1]
        .acquire_shards("node-b", "http://127.0.0.1:2", &[shard], 10_000)
        .await
        .expect("acquire");
    assert_eq!(
        taken.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        vec![shard],
        "another schema's write held the shard"
    );
    in_flight.rollback().await.expect("rollback");
}

/// Three nodes started at once on an empty database all come up (migrations take a lock), and
/// exactly one of them makes the first start's sandbox account.
#[tokio::test]
async fn three_nodes_started_together_on_an_empty_database() {
    let Some(url) = database_url(Backend::Postgres).await else {
        return;
    };
    let mut starts = tokio::task::JoinSet::new();
    let mut bases = Vec::new();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    for _ in 0..3 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        bases.push(format!("http://{}", listener.local_addr().expect("addr")));
        let mut config = billing::config::Config::new(url.clone());
        config.admin_token = Some(ADMIN_TOKEN.to_owned());
        short_leases(&mut config);
        let mut stopped = stopped.clone();
        starts.spawn(billing::run(config, listener, async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        }));
    }
    let client = reqwest::Client::new();
    for base in &bases {
        crate::common::wait_until_ready(&client, base, Duration::from_secs(60)).await;
    }
    let store = billing::store::Store::connect(&url).await.expect("store");
    assert_eq!(store.count_accounts().await.expect("count"), 1);
    // Between them they hold every shard.
    eventually(Duration::from_secs(20), || async {
        let mut all = BTreeSet::new();
        let mut total = 0;
        for base in &bases {
            let node = TestApp::attached(base.clone(), url.clone());
            let held = owned(&node).await;
            total += held.len();
            all.extend(held);
        }
        total == usize::from(SHARDS) && all.len() == usize::from(SHARDS)
    })
    .await;
    let _ = stop.send(true);
    for started in starts.join_all().await {
        started.expect("a node failed");
    }
}

/// An operator's change of an account's limits holds at once on every node: the node that took
/// the change tells the others, which drop their cached copy of the account.
#[tokio::test]
async fn a_new_rate_limit_holds_at_once_on_every_node() {
    let Some(url) = database_url(Backend::Postgres).await else {
        return;
    };
    let a = spawn_on_with(url, short_leases).await;
    let b = crate::common::spawn_node(&a).await;
    // Node B has the account cached, unlimited.
    a.lift_rate_limit().await;
    for _ in 0..3 {
        assert_eq!(b.get("/v1/account").await.status(), 200);
    }
    let response = a
        .admin(Method::PATCH, &format!("/admin/accounts/{}", a.account_id))
        .json(&json!({"rate_limit_per_minute": 2}))
        .send()
        .await
        .expect("send");
    assert_eq!(response.status(), 200);
    let statuses = [
        b.get("/v1/account").await.status().as_u16(),
        b.get("/v1/account").await.status().as_u16(),
        b.get("/v1/account").await.status().as_u16(),
    ];
    assert_eq!(statuses, [200, 200, 429], "node B kept the old limit");
}

/// The routes nodes call on each other answer only the cluster's secret: without it, or with
/// another, they look like an unknown path.
#[tokio::test]
async fn the_internal_routes_answer_only_the_clusters_secret() {
    let Some(url) = database_url(Backend::Postgres).await else {
        return;
    };
    let app = spawn_on_with(url.clone(), short_leases).await;
    let store = billing::store::Store::connect(&url).await.expect("store");
    let secret = store
        .setting(billing::actors::forward::SECRET_SETTING)
        .await
        .expect("read")
        .expect("the first node made one");
    let broadcast = |secret: Option<String>| {
        let mut request = app
            .client
            .post(app.url("/internal/v1/broadcast"))
            .json(&json!({"type": "released"}));
        if let Some(secret) = secret {
            request = request.header(billing::actors::forward::SECRET_HEADER, secret);
        }
        async move { request.send().await.expect("send").status().as_u16() }
    };
    assert_eq!(broadcast(None).await, 404);
    assert_eq!(broadcast(Some(format!("{secret}x"))).await, 404);
    assert_eq!(broadcast(Some(secret.clone())).await, 204);
    let message = app
        .client
        .post(app.url("/internal/v1/actors/sub_x/messages"))
        .header(billing::actors::forward::SECRET_HEADER, "cls_wrong")
        .header(billing::actors::forward::EPOCH_HEADER, "1")
        .json(&json!({"type": "due"}))
        .send()
        .await
        .expect("send");
    assert_eq!(message.status(), 404);
}

/// The internal calls a node receives, counted by a proxy in front of it (its `--node-url`):
/// how many in all, and the most under way at once.
#[derive(Clone, Default)]
struct Calls {
    now: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    most: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    total: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// Calls whose path holds this text are answered 503, not forwarded, this many times.
    refuse: std::sync::Arc<std::sync::Mutex<Option<(String, usize)>>>,
}

impl Calls {
    fn reset(&self) {
        use std::sync::atomic::Ordering::SeqCst;
        self.most.store(self.now.load(SeqCst), SeqCst);
        self.total.store(0, SeqCst);
    }

    /// Answers the next `times` calls whose path holds `about` 503 without forwarding them, as
    /// a node does while the shard they are about moves.
    fn refuse(&self, about: &str, times: usize) {
        *self.refuse.lock().expect("lock") = Some((about.to_owned(), times));
    }

    /// Whether this call is one to refuse (counting it off).
    fn refused(&self, path: &str) -> bool {
        let mut refuse = self.refuse.lock().expect("lock");
        match refuse.as_mut() {
            Some((about, left)) if *left > 0 && path.contains(about.as_str()) => {
                *left -= 1;
                true
            }
            _ => false,
        }
    }

    fn refusals_left(&self) -> usize {
        self.refuse
            .lock()
            .expect("lock")
            .as_ref()
            .map_or(0, |(_, left)| *left)
    }

    fn most(&self) -> usize {
        self.most.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn total(&self) -> usize {
        self.total.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Node B of two on `url`, reached by the other nodes through a proxy that counts their calls
/// (`calls`), started once node A (`a`) runs; answers when the shards are split between them.
/// Stop it by sending on the channel, then await the task.
async fn node_b_behind_a_proxy(
    a: &TestApp,
    url: &str,
    calls: &Calls,
    leases: fn(&mut billing::config::Config),
) -> (
    TestApp,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<anyhow::Result<()>>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let b_base = format!("http://{}", listener.local_addr().expect("addr"));
    let b_url = counting_proxy(b_base.clone(), calls.clone()).await;
    let mut config = billing::config::Config::new(url.to_owned());
    config.admin_token = Some(ADMIN_TOKEN.to_owned());
    config.actor_idle_secs = 120;
    config.node_url = Some(b_url);
    leases(&mut config);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(billing::run(config, listener, async move {
        let _ = stopped.await;
    }));
    crate::common::wait_until_ready(&a.client, &b_base, Duration::from_secs(30)).await;
    let b = TestApp::attached(b_base, url.to_owned());
    eventually(Duration::from_secs(20), || async {
        let (held_a, held_b) = (owned(a).await, owned(&b).await);
        held_a.len() == 128 && held_b.len() == 128 && held_a.is_disjoint(&held_b)
    })
    .await;
    (b, stop, served)
}

/// Node B's end as the test's result: an error (not a panic) names what ended it, on the last
/// line of the test's output, where a panic's message would sit above its backtrace.
fn ended_cleanly(served: Result<anyhow::Result<()>, tokio::task::JoinError>) -> Result<(), String> {
    match served {
        Ok(Ok(())) => Ok(()),
        Ok(Err(err)) => Err(format!("node B's service returned an error: {err:#}")),
        Err(err) if err.is_panic() => {
            let payload = err.into_panic();
            let message = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .unwrap_or("(a payload that is not text)");
            Err(format!("node B's service panicked: {message}"))
        }
        Err(err) => Err(format!("node B's service task ended: {err}")),
    }
}

/// A proxy forwarding every request to `target`, counting them; its URL.
async fn counting_proxy(target: String, calls: Calls) -> String {
    use axum::body::Body;
    use axum::extract::Request;
    use axum::response::Response;
    use std::sync::atomic::Ordering::SeqCst;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let client = reqwest::Client::new();
    let relay = move |request: Request| {
        let (target, client, calls) = (target.clone(), client.clone(), calls.clone());
        async move {
            let under_way = calls.now.fetch_add(1, SeqCst) + 1;
            calls.most.fetch_max(under_way, SeqCst);
            calls.total.fetch_add(1, SeqCst);
            let (parts, body) = request.into_parts();
            let body = axum::body::to_bytes(body, usize::MAX)
                .await
                .unwrap_or_default();
            let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
            if calls.refused(path) {
                calls.now.fetch_sub(1, SeqCst);
                return Response::builder()
                    .status(503)
                    .body(Body::empty())
                    .expect("response");
            }
            let method =
                reqwest::Method::from_bytes(parts.method.as_str().as_bytes()).expect("method");
            let mut forward = client.request(method, format!("{target}{path}"));
            for (name, value) in &parts.headers {
                if name != "host" && name != "content-length" {
                    forward = forward.header(name.as_str(), value.as_bytes());
                }
            }
            let answer = match forward.body(body).send().await {
                Ok(answer) => {
                    let status = answer.status().as_u16();
                    let kind = answer
                        .headers()
                        .get("content-type")
                        .map(|v| v.as_bytes().to_vec());
                    let bytes = answer.bytes().await.unwrap_or_default();
                    let mut response = Response::builder().status(status);
                    if let Some(kind) = kind {
                        response = response.header("content-type", kind);
                    }
                    response.body(Body::from(bytes)).expect("response")
                }
                Err(_) => Response::builder()
                    .status(502)
                    .body(Body::empty())
                    .expect("response"),
            };
            calls.now.fetch_sub(1, SeqCst);
            answer
        }
    };
    let router = axum::Router::new().fallback(relay);
    tokio::spawn(async move { axum::serve(listener, router).await });
    url
}

/// A top-up of an account with many subscriptions paused for balance on another node's shards
/// sends that node one message, not one per subscription (a hundred thousand woken would be
/// as many internal calls at once): the rows carry their timers, and the owner's scheduler,
/// nudged once, resumes every one the balance covers.
#[tokio::test]
async fn a_top_up_tells_each_other_node_once_however_many_subscriptions_it_wakes()
-> Result<(), String> {
    const COUNT: usize = 80;
    let Some(url) = database_url(Backend::Postgres).await else {
        return Ok(());
    };
    let a = spawn_on_with(url.clone(), steady_leases).await;
    // Node B, reached by the other nodes through a proxy that counts their calls.
    let calls = Calls::default();
    let (b, stop, served) = node_b_behind_a_proxy(&a, &url, &calls, steady_leases).await;
    // The processor's events go straight to B: none of B's charges' outcomes is forwarded.
    let (shop_a, _, customer, method) = shop(&a, &b).await;
    let shop_b = through(&shop_a, &b);
    // A plan whose fee (1.5 % of 10^10) the shop's balance (10^8) does not cover.
    let huge = shop_a
        .create_plan("Huge", 10_000_000_000, 10_000_000_000)
        .await["id"]
        .as_str()
        .expect("plan")
        .to_owned();
    let fee = 150_000_000;
    let held_b = owned(&b).await;
    let mut ids = Vec::new();
    for i in 0..COUNT {
        let node = if i % 2 == 0 { &shop_a } else { &shop_b };
        let (status, sub) = read(
            node.post(
                "/v1/subscriptions",
                json!({"customer_id": customer, "plan_id": huge, "cycle": "monthly",
                    "payment_method_id": method}),
            )
            .await,
        )
        .await;
        assert_eq!(status, 201, "{sub}");
        assert_eq!(sub["status"], "paused_insufficient_balance", "{sub}");
        ids.push(sub["id"].as_str().expect("id").to_owned());
    }
    let on_b = ids
        .iter()
        .filter(|id| held_b.contains(&shard_of(id)))
        .count();
    assert!(on_b >= COUNT / 2, "only {on_b} on node B");

    // Node A takes the top-up that covers them all.
    calls.reset();
    shop_a.top_up(COUNT as i64 * fee).await;
    let approved = || async {
        let (_, page) = read(
            shop_a
                .get("/v1/events?type=charge.approved&limit=100")
                .await,
        )
        .await;
        page["data"].as_array().map_or(0, Vec::len)
    };
    // The bound is for a loaded machine (the whole suite on two cores): a charge whose event
    // was lost is asked about once stale (30 s), a node that missed the nudge finds its rows
    // at its next full rescan (30 s); this test is about the calls, not the speed. A miss
    // says what each subscription became, to tell a slow machine from a lost wake.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    while approved().await < COUNT && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seen = approved().await;
    if seen != COUNT {
        let mut statuses = std::collections::BTreeMap::<String, Vec<String>>::new();
        for id in &ids {
            let (_, sub) = read(shop_a.get(&format!("/v1/subscriptions/{id}")).await).await;
            let node = if held_b.contains(&shard_of(id)) {
                "B"
            } else {
                "A"
            };
            statuses
                .entry(format!("{} on {node}", sub["status"]))
                .or_default()
                .push(id.clone());
        }
        panic!(
            "{seen} of {COUNT} charges approved within 300 s; subscriptions: {statuses:?}; \
             node B got {} internal calls",
            calls.total()
        );
    }
    for id in &ids {
        let (_, sub) = read(shop_a.get(&format!("/v1/subscriptions/{id}")).await).await;
        assert_eq!(sub["status"], "active", "{sub}");
    }
    assert!(
        calls.most() <= 2 && calls.total() <= 2,
        "node B got {} internal calls, {} at once, for {on_b} subscriptions woken",
        calls.total(),
        calls.most()
    );
    crate::common::assert_invariants(&shop_a).await;
    drop(a);
    let _ = stop.send(());
    ended_cleanly(served.await)
}

/// The resume of a subscription whose renewal date passed during the pause is one unit with
/// its new period's charge. Here the shard moves while that unit runs (a trigger in the
/// database takes the lease away as the charge is inserted): the write is fenced, the answer
/// is 503 with nothing changed, which is true (the subscription is still paused, no
/// `subscription.resumed`), and the retry with the same Idempotency-Key resumes it.
#[tokio::test]
async fn a_resume_fenced_with_its_charge_changes_nothing_and_its_retry_resumes() {
    use sea_orm::{ConnectionTrait, Database};

    let Some(url) = database_url(Backend::Postgres).await else {
        return;
    };
    let app = spawn_on_with(url.clone(), short_leases).await;
    let (shop, method) = crate::subscriptions::shop(&app, "4242424242424242").await;
    let sub = crate::subscriptions::subscribe(&app, &shop, &method, json!({})).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    crate::subscriptions::advance(&app, 1).await;
    let (status, _) = read(
        app.post(&format!("/v1/subscriptions/{sub}/pause"), json!({}))
            .await,
    )
    .await;
    assert_eq!(status, 200);
    crate::subscriptions::advance(&app, 45 * 86_400).await;
    let before = crate::subscriptions::get(&app, &sub).await;

    let db = Database::connect(url.as_str()).await.expect("connect");
    let shard = shard_of(&sub);
    for statement in [
        format!(
            "CREATE FUNCTION move_shard() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN UPDATE shard_leases SET epoch = epoch + 1 WHERE shard = {shard}; \
             RETURN NEW; END $$"
        ),
        "CREATE TRIGGER move_shard BEFORE INSERT ON charge_attempts \
         FOR EACH ROW EXECUTE FUNCTION move_shard()"
            .to_owned(),
    ] {
        db.execute_unprepared(&statement).await.expect("trigger");
    }
    let resume = || {
        app.request(Method::POST, &format!("/v1/subscriptions/{sub}/resume"))
            .header("Idempotency-Key", "resume-once")
            .json(&json!({}))
            .send()
    };
    let (status, body) = read(resume().await.expect("send")).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(
        crate::subscriptions::get(&app, &sub).await,
        before,
        "a 503 says nothing was changed"
    );
    let resumed = |events: Vec<serde_json::Value>| {
        events
            .iter()
            .filter(|e| e["type"] == "subscription.resumed")
            .count()
    };
    assert_eq!(resumed(crate::subscriptions::events(&app, &sub).await), 0);

    // The shard settles on this node again; the same request then runs, and resumes.
    db.execute_unprepared("DROP TRIGGER move_shard ON charge_attempts")
        .await
        .expect("drop");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let answer = loop {
        let answer = read(resume().await.expect("send")).await;
        if answer.0 != 503 || tokio::time::Instant::now() > deadline {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(answer.0, 200, "{}", answer.1);
    assert_eq!(answer.1["status"], "active");
    crate::subscriptions::advance(&app, 1).await;
    assert_eq!(resumed(crate::subscriptions::events(&app, &sub).await), 1);
    crate::common::assert_invariants(&app).await;
}

/// Issue 46: a new event's wake for a webhook endpoint another node holds is tried again when
/// that node does not take it (here its first three internal calls about the endpoint are
/// refused, as while the endpoint's shard moves): the delivery arrives within seconds, not at
/// the owner's 30-second sweep.
#[tokio::test]
async fn a_refused_wake_for_another_nodes_endpoint_is_tried_again() -> Result<(), String> {
    use crate::common::receiver::{Receiver, Reply};
    let Some(url) = database_url(Backend::Postgres).await else {
        return Ok(());
    };
    let a = spawn_on_with(url.clone(), short_leases).await;
    // Node B, reached by the other nodes through a proxy that counts their calls.
    let calls = Calls::default();
    let (b, stop, served) = node_b_behind_a_proxy(&a, &url, &calls, short_leases).await;
    let (shop_a, plan, customer, method) = shop(&a, &b).await;
    let held_b = owned(&b).await;
    let receiver = Receiver::start(&[], Reply::Status(200)).await;
    // An endpoint whose shard node B holds (others made on the way are deleted).
    let endpoint = loop {
        let (status, endpoint) = read(
            shop_a
                .post(
                    "/v1/webhook-endpoints",
                    json!({"url": receiver.url, "events": ["subscription.created"]}),
                )
                .await,
        )
        .await;
        assert_eq!(status, 201, "{endpoint}");
        let id = endpoint["id"].as_str().expect("id").to_owned();
        if held_b.contains(&shard_of(&id)) {
            break id;
        }
        let gone = shop_a
            .request(Method::DELETE, &format!("/v1/webhook-endpoints/{id}"))
            .send()
            .await
            .expect("send");
        assert!(gone.status().is_success());
    };
    calls.refuse(&endpoint, 3);
    let started = std::time::Instant::now();
    let (status, sub) = read(
        shop_a
            .post(
                "/v1/subscriptions",
                json!({"customer_id": customer, "plan_id": plan, "cycle": "monthly",
                    "payment_method_id": method}),
            )
            .await,
    )
    .await;
    assert_eq!(status, 201, "{sub}");
    eventually(Duration::from_secs(10), || async { receiver.count() >= 1 }).await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "delivered by the wake, not the sweep"
    );
    assert_eq!(calls.refusals_left(), 0, "node B refused the first wakes");
    drop(a);
    let _ = stop.send(());
    ended_cleanly(served.await)
}
