//! Operator commands that talk to a running server: `billing actors` prints the supervision
//! tree of `GET /admin/actors` in a terminal.

use anyhow::Context;
use serde_json::Value;
use std::fmt::Write;

/// Fetches the tree (following pages until `max_actors`) and renders it as text.
pub async fn actors_tree(
    base_url: &str,
    admin_token: &str,
    kind: Option<&str>,
    max_actors: usize,
) -> anyhow::Result<String> {
    let client = reqwest::Client::new();
    let mut cursor: Option<String> = None;
    let mut actors: Vec<Value> = Vec::new();
    loop {
        let limit = (max_actors - actors.len()).clamp(1, 100);
        let mut query = vec![("limit", limit.to_string())];
        if let Some(kind) = kind {
            query.push(("kind", kind.to_owned()));
        }
        if let Some(cursor) = &cursor {
            query.push(("cursor", cursor.clone()));
        }
        let response = client
            .get(format!("{}/admin/actors", base_url.trim_end_matches('/')))
            .bearer_auth(admin_token)
            .query(&query)
            .send()
            .await
            .with_context(|| format!("could not reach {base_url}"))?;
        let status = response.status();
        let body: Value = response.json().await.context("not JSON")?;
        if !status.is_success() {
            anyhow::bail!("{status}: {}", body["error"]["message"]);
        }
        actors.extend(body["children"].as_array().cloned().unwrap_or_default());
        let more = body["has_more"].as_bool().unwrap_or(false);
        cursor = body["next_cursor"].as_str().map(str::to_owned);
        if !more || cursor.is_none() || actors.len() >= max_actors {
            return Ok(render(&body["supervisor"], &actors, more));
        }
    }
}

/// The tree as text: the root with its counts per kind, each shard with its live children.
pub fn render(supervisor: &Value, actors: &[Value], truncated: bool) -> String {
    let mut out = String::new();
    let shards = supervisor["shards"].as_array().cloned().unwrap_or_default();
    let _ = writeln!(out, "root ({} shards)", shards.len());
    for kind in supervisor["kinds"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "  {}: {} live, {} restarts, {} queued",
            text(&kind["kind"]),
            kind["live"],
            kind["restarts"],
            kind["mailbox_backlog"]
        );
    }
    for (index, shard) in shards.iter().enumerate() {
        let last_shard = index + 1 == shards.len();
        let name = text(&shard["name"]);
        let counts: Vec<String> = shard["live"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(kind, n)| format!("{kind}={n}"))
            .collect();
        let _ = writeln!(
            out,
            "{} {name}  {}",
            if last_shard { "└─" } else { "├─" },
            counts.join(" ")
        );
        let children: Vec<&Value> = actors
            .iter()
            .filter(|a| a["shard"].as_str() == Some(name))
            .collect();
        for (i, actor) in children.iter().enumerate() {
            let _ = writeln!(
                out,
                "{}  {} {} {}  {}  mailbox {}  restarts {}  next due {}",
                if last_shard { "   " } else { "│  " },
                if i + 1 == children.len() {
                    "└─"
                } else {
                    "├─"
                },
                text(&actor["kind"]),
                text(&actor["id"]),
                text(&actor["state"]),
                actor["mailbox_len"],
                actor["restarts"],
                actor["next_due_at"].as_str().unwrap_or("-"),
            );
        }
    }
    if truncated {
        let _ = writeln!(out, "(more actors: raise --limit or filter with --kind)");
    }
    out
}

fn text(value: &Value) -> &str {
    value.as_str().unwrap_or("?")
}
