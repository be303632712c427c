//! The `tokens` fuzz harness: arbitrary strings, and issued secrets mutated by the input, into
//! `Store::authenticate`: `Ok` only for a secret issued and still live (never for a revoked or
//! an expired one), with that token's tenant and role; anything else is `Unauthorized`; no
//! panic.
//!
//! Shared by the cargo-fuzz target (`fuzz/fuzz_targets/tokens.rs`) and by the test that replays
//! the seed corpus on stable (`tests/fuzz_corpus.rs`), so it uses only `spindle`, `sha2` and
//! std. [`run`] panics when an invariant is violated.
//!
//! The store is made once per process (in memory, on a manual clock): tenants `acme` and
//! `beta`, a live admin token of acme, a live reader of beta, one of acme revoked and one of
//! beta expired (the clock moved past its expiry).
//!
//! Input: the first byte chooses what is presented; the second picks an issued secret (of the
//! four) where one is used; the rest is the argument:
//! - 0: the rest as text (lossy UTF-8);
//! - 1: the secret with one character (at the third byte) replaced by the fourth byte;
//! - 2: the secret cut at the third byte;
//! - 3: the rest, then the secret; 4: the secret, then the rest;
//! - 5: `spn_`, the rest as the body, and the checksum the store would compute for that body
//!   (so the lookup runs, not only the shape check; computed as `src/auth.rs` does today);
//! - 6: the secret with its ASCII case flipped at the third byte;
//! - 7: the secret as it is (live ones must pass, dead ones not);
//! - 8: the secret with the character at the third byte removed.

use std::sync::OnceLock;

use sha2::{Digest, Sha256};
use spindle::{Error, ManualClock, Options, Role, Store};

/// What every token's secret starts with (`src/auth.rs`).
const PREFIX: &str = "spn_";
/// The digits of the checksum (`src/auth.rs`).
const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
/// Characters of the checksum.
const CHECKSUM_CHARS: usize = 6;
/// Most bytes of input looked at.
const INPUT_MAX: usize = 4096;

/// An issued secret and what it must open, if anything.
struct Issued {
    secret: String,
    /// The tenant and role of a live token; `None` for a revoked or expired one.
    live: Option<(&'static str, Role)>,
}

/// The store and its issued secrets, made once per process.
struct Fixture {
    store: Store,
    issued: Vec<Issued>,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let clock = ManualClock::new(1_000_000);
        let options = Options::default().clock(std::sync::Arc::new(clock.clone()));
        let store = Store::open_in_memory_with(options).expect("open the store");
        let mut issued = Vec::new();
        for tenant in ["acme", "beta"] {
            store.auth().create_tenant(tenant, tenant).expect("create a tenant");
        }
        let token = |tenant: &str, role: Role, expires: Option<i64>| {
            let view = store.tenant(tenant).expect("a tenant's view");
            let (secret, info) = view.auth().create_token("fuzz", role, expires).expect("token");
            (secret.expose().to_owned(), info.id)
        };
        let (secret, _) = token("acme", Role::Admin, None);
        issued.push(Issued { secret, live: Some(("acme", Role::Admin)) });
        let (secret, _) = token("beta", Role::Reader, None);
        issued.push(Issued { secret, live: Some(("beta", Role::Reader)) });
        let (secret, id) = token("acme", Role::Writer, None);
        store.tenant("acme").expect("acme").auth().revoke_token(&id).expect("revoke");
        issued.push(Issued { secret, live: None });
        let (secret, _) = token("beta", Role::Admin, Some(clock.now_ms() + 1_000));
        clock.advance_ms(2_000);
        issued.push(Issued { secret, live: None });
        Fixture { store, issued }
    })
}

/// Runs one input; panics if a secret opened what it must not, or a refusal was not
/// `Unauthorized`.
pub fn run(data: &[u8]) {
    let fixture = fixture();
    let data = &data[..data.len().min(INPUT_MAX)];
    let byte = |at: usize| data.get(at).copied().unwrap_or(0);
    let rest = String::from_utf8_lossy(data.get(2..).unwrap_or_default()).into_owned();
    let issued = &fixture.issued[usize::from(byte(1)) % fixture.issued.len()];
    let presented = present(byte(0), &issued.secret, &rest, byte(2), byte(3));
    let live = fixture.issued.iter().find(|issued| issued.secret == presented);
    let expected = live.and_then(|issued| issued.live);
    match (fixture.store.authenticate(&presented), expected) {
        (Ok(view), Some((tenant, role))) => {
            assert_eq!(view.tenant_id(), tenant, "the token's tenant");
            assert_eq!(view.role(), role, "the token's role");
        }
        (Ok(view), None) => panic!(
            "{presented:?} opened tenant {} as {:?}; issued: {}",
            view.tenant_id(),
            view.role(),
            live.is_some()
        ),
        (Err(Error::Unauthorized), None) => {}
        (Err(error), _) => panic!("{presented:?}: {error:?} (live: {expected:?})"),
    }
}

/// The string presented for the input's choice `how`.
fn present(how: u8, secret: &str, rest: &str, at: u8, with: u8) -> String {
    let chars: Vec<char> = secret.chars().collect();
    let at = usize::from(at) % (chars.len() + 1);
    match how % 9 {
        0 => rest.to_owned(),
        1 => {
            let mut chars = chars;
            if let Some(slot) = chars.get_mut(at) {
                *slot = char::from(with);
            }
            chars.into_iter().collect()
        }
        2 => chars[..at].iter().collect(),
        3 => format!("{rest}{secret}"),
        4 => format!("{secret}{rest}"),
        5 => format!("{PREFIX}{rest}{}", checksum_of(rest)),
        6 => {
            let mut chars = chars;
            if let Some(slot) = chars.get_mut(at) {
                *slot = if slot.is_ascii_lowercase() {
                    slot.to_ascii_uppercase()
                } else {
                    slot.to_ascii_lowercase()
                };
            }
            chars.into_iter().collect()
        }
        7 => secret.to_owned(),
        _ => {
            let mut chars = chars;
            if at < chars.len() {
                chars.remove(at);
            }
            chars.into_iter().collect()
        }
    }
}

/// The checksum the store computes for `body` (`src/auth.rs`: the first 4 bytes of the
/// SHA-256 of `spn_<body>`, in 6 base62 digits, most significant first).
fn checksum_of(body: &str) -> String {
    let digest = Sha256::digest(format!("{PREFIX}{body}").as_bytes());
    let mut number = digest[..4].to_vec();
    let mut digits = Vec::with_capacity(CHECKSUM_CHARS);
    for _ in 0..CHECKSUM_CHARS {
        let mut remainder = 0_u32;
        for byte in &mut number {
            let value = (remainder << 8) | u32::from(*byte);
            *byte = u8::try_from(value / 62).expect("a quotient below 256");
            remainder = value % 62;
        }
        digits.push(char::from(BASE62[remainder as usize]));
    }
    digits.into_iter().rev().collect()
}
