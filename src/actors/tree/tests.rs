//! The supervision tree: spawning under shards, restarts, forgetting stopped actors, pages.

use super::*;
use tokio::sync::oneshot;

/// An actor that stops as a subscription actor does after a charge's outcome (it leaves
/// its registry, asks ractor to stop it, and finishes its message), but finishes that
/// message only when the test lets it: until then ractor still holds its name.
struct Lingering;

struct StopSlowly {
    registry: Arc<KindRegistry<StopSlowly>>,
    stopping: oneshot::Sender<()>,
    release: oneshot::Receiver<()>,
}

impl Actor for Lingering {
    type Msg = StopSlowly;
    type State = String;
    type Arguments = String;

    async fn pre_start(
        &self,
        _: ActorRef<StopSlowly>,
        id: String,
    ) -> Result<String, ActorProcessingErr> {
        Ok(id)
    }

    async fn handle(
        &self,
        myself: ActorRef<StopSlowly>,
        message: StopSlowly,
        id: &mut String,
    ) -> Result<(), ActorProcessingErr> {
        message.registry.forget(id, myself.get_id(), false);
        myself.stop(None);
        let _ = message.stopping.send(());
        let _ = message.release.await;
        Ok(())
    }
}

#[tokio::test]
async fn a_spawn_waits_for_a_stopping_actor_to_let_go_of_its_name() {
    let tree = Tree::start().await.expect("tree");
    let registry = tree.register::<StopSlowly>("lingering");
    // Ractor's names are process-wide: one no other test uses.
    let id = format!("sub_lingering_{}", uuid::Uuid::new_v4().simple());
    let make = |_| (Lingering, id.clone());
    let (old, _) = registry.get_or_spawn(&id, make).await.expect("spawn");
    let (stopping, stopped) = oneshot::channel();
    let (release, released) = oneshot::channel();
    old.cast(StopSlowly {
        registry: Arc::clone(&registry),
        stopping,
        release: released,
    })
    .expect("send");
    stopped.await.expect("the old actor began to stop");
    assert!(
        registry.get(&id).is_none(),
        "the old actor left the registry"
    );

    // Its name is still taken: the spawn must wait for it rather than fail (a failure
    // here was answered 500 and kept for the request's Idempotency-Key).
    let mut spawning = Box::pin(registry.get_or_spawn(&id, make));
    let first_try = tokio::select! {
        biased;
        spawned = &mut spawning => Some(spawned.map(|(actor, _)| actor.get_id())),
        () = std::future::ready(()) => None,
    };
    assert!(
        first_try.is_none(),
        "the spawn did not wait for the old actor: {first_try:?}"
    );
    release.send(()).expect("release");
    let (new, _) = spawning.await.expect("spawned once the old actor let go");
    assert_ne!(new.get_id(), old.get_id());
    assert_eq!(
        registry.get(&id).map(|(actor, _)| actor.get_id()),
        Some(new.get_id())
    );
    tree.stop().await;
}
