//! Password hashes (argon2id, PHC string format) and generated passwords.

use argon2::password_hash::{PasswordHash, SaltString};
use argon2::{Algorithm, Argon2, Params, PasswordHasher, PasswordVerifier, Version};

use crate::AuthError;

/// How expensive a new hash is. Verification always uses the cost recorded in the hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cost {
    /// The argon2 crate's defaults (argon2id, 19 MiB, 2 passes): tens of milliseconds.
    Standard,
    /// The cheapest valid parameters, for test fixtures only.
    Minimal,
}

fn random_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).expect("the operating system's random source works");
    bytes
}

/// Hashes `password` with a fresh random salt.
pub fn hash(password: &str, cost: Cost) -> String {
    let params = match cost {
        Cost::Standard => Params::default(),
        Cost::Minimal => Params::new(Params::MIN_M_COST.max(8), 1, 1, None).expect("valid"),
    };
    let salt = SaltString::encode_b64(&random_bytes::<16>()).expect("16 bytes is a valid salt");
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
        .hash_password(password.as_bytes(), &salt)
        .expect("hashing with valid parameters succeeds")
        .to_string()
}

/// Checks that `hash` is an argon2 hash this program can verify against.
pub fn validate(hash: &str) -> Result<(), AuthError> {
    let parsed = PasswordHash::new(hash)
        .map_err(|e| AuthError::Invalid(format!("not a password hash: {e}")))?;
    if !parsed.algorithm.as_str().starts_with("argon2") {
        return Err(AuthError::Invalid(format!(
            "password hashes must be argon2, not {}",
            parsed.algorithm
        )));
    }
    Ok(())
}

/// Whether `password` is the one `hash` was made from (argon2 compares in constant time).
pub fn verify(hash: &str, password: &str) -> bool {
    match PasswordHash::new(hash) {
        Ok(parsed) => Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok(),
        Err(_) => false,
    }
}

/// A strong password: 24 characters from a 62-letter alphabet (about 143 bits).
pub fn generate() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut out = String::with_capacity(24);
    while out.len() < 24 {
        for byte in random_bytes::<32>() {
            // Rejection sampling keeps every letter equally likely.
            if (byte as usize) < 256 - 256 % ALPHABET.len() && out.len() < 24 {
                out.push(ALPHABET[byte as usize % ALPHABET.len()] as char);
            }
        }
    }
    out
}

/// A digest of `secret` under `key` (BLAKE2b-512), compared in constant time.
pub(crate) fn keyed_digest(key: &[u8; 32], parts: &[&[u8]]) -> [u8; 64] {
    use blake2::Digest;
    let mut hasher = blake2::Blake2b512::new();
    hasher.update(key);
    for part in parts {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
    hasher.finalize().into()
}

pub(crate) fn random_key() -> [u8; 32] {
    random_bytes()
}

pub(crate) fn same(a: &[u8; 64], b: &[u8; 64]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hash_verifies_its_password_only() {
        let h = hash("correct horse", Cost::Minimal);
        assert!(h.starts_with("$argon2id$"), "{h}");
        assert!(verify(&h, "correct horse"));
        assert!(!verify(&h, "correct horsE"));
        assert!(!verify("not a hash", "correct horse"));
        validate(&h).unwrap();
        assert!(validate("plaintext").is_err());
    }

    #[test]
    fn salts_differ_and_standard_cost_is_the_default() {
        let a = hash("pw", Cost::Standard);
        assert_ne!(a, hash("pw", Cost::Standard));
        assert!(a.contains("m=19456,t=2,p=1"), "{a}");
    }

    #[test]
    fn generated_passwords_are_long_and_different() {
        let a = generate();
        assert_eq!(a.len(), 24);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(a, generate());
    }
}
