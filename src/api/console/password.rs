//! Passwords: argon2id with the argon2 crate's defaults (19 MiB, 2 passes, 1 lane: OWASP's
//! minimum), as PHC strings (salt and parameters inside). Hashing costs a few tens of
//! milliseconds and 19 MiB, so it runs on the blocking pool, at most `AT_ONCE` at a time on a
//! node: a flood of logins queues here and cannot take the async workers or the memory.
//! A sign-in with an unknown e-mail address is verified against a hash of nothing, so it costs
//! what a known one costs.

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use std::sync::LazyLock;
use tokio::sync::Semaphore;

/// Fewest characters a password may have (NIST SP 800-63B asks at least 8; a console that
/// refunds money asks more).
pub const MIN_CHARS: usize = 12;
/// Most bytes a password may have: more is refused before anything is hashed.
pub const MAX_BYTES: usize = 256;

const AT_ONCE: usize = 2;
static SLOTS: LazyLock<Semaphore> = LazyLock::new(|| Semaphore::new(AT_ONCE));

/// A PHC string of no password anyone has, verified when no person has the address.
static NOBODY: LazyLock<String> =
    LazyLock::new(|| hash_now(&crate::secrets::random_token("nobody_", 32)).unwrap_or_default());

/// Why a password is not taken, in the words a page shows.
pub fn refusal(password: &str) -> Option<&'static str> {
    if password.len() > MAX_BYTES {
        Some("too_long")
    } else if password.chars().count() < MIN_CHARS {
        Some("too_short")
    } else {
        None
    }
}

fn hash_now(password: &str) -> Option<String> {
    let salt = SaltString::encode_b64(&rand::random::<[u8; 16]>()).ok()?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .ok()
        .map(|hash| hash.to_string())
}

fn verify_now(phc: &str, password: &str) -> bool {
    PasswordHash::new(phc).is_ok_and(|parsed| {
        Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok()
    })
}

/// The PHC string of `password`; `None` if the blocking pool is gone.
pub async fn hash(password: String) -> Option<String> {
    let _slot = SLOTS.acquire().await.ok()?;
    tokio::task::spawn_blocking(move || hash_now(&password))
        .await
        .ok()
        .flatten()
}

/// Whether `password` is the one `phc` was made of (`None`: nobody's, costing the same).
pub async fn verify(phc: Option<String>, password: String) -> bool {
    if password.len() > MAX_BYTES {
        return false;
    }
    let Ok(_slot) = SLOTS.acquire().await else {
        return false;
    };
    tokio::task::spawn_blocking(move || match phc {
        Some(phc) => verify_now(&phc, &password),
        None => {
            let _ = verify_now(&NOBODY, &password);
            false
        }
    })
    .await
    .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_hash_verifies_its_password_and_no_other() {
        let phc = hash("correct horse battery".into()).await.expect("hash");
        assert!(phc.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{phc}");
        assert!(verify(Some(phc.clone()), "correct horse battery".into()).await);
        assert!(!verify(Some(phc.clone()), "correct horse batterz".into()).await);
        assert!(!verify(None, "correct horse battery".into()).await);
        assert!(!verify(Some("not a hash".into()), "x".into()).await);
        let again = hash("correct horse battery".into()).await.expect("hash");
        assert_ne!(phc, again, "each hash has its own salt");
    }

    #[test]
    fn short_and_huge_passwords_are_refused() {
        assert_eq!(refusal("eleven char"), Some("too_short"));
        assert_eq!(refusal("twelve chars"), None);
        assert_eq!(refusal("ñandú ñandú ñ"), None);
        assert_eq!(refusal(&"x".repeat(MAX_BYTES + 1)), Some("too_long"));
    }
}
