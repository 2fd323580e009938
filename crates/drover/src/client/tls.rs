//! HTTPS to the server through the system's OpenSSL (native-tls, which the LDAP client
//! links already), verifying the server's certificate and name against the system's
//! roots (/etc/ssl/certs) and, for a site's private CA, the certificates of a CA file.
//! Verification is never turned off. Plain HTTP beyond the loopback is warned of.

use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use ureq::tls::{Certificate, PemItem, RootCerts, TlsConfig, TlsProvider};

use super::connection::Failure;
use super::trusted_file;

/// The HTTP agent of every request of a command.
pub fn agent(ca_file: Option<&Path>) -> Result<ureq::Agent, Failure> {
    let tls = TlsConfig::builder()
        .provider(TlsProvider::NativeTls)
        .root_certs(roots(ca_file)?)
        .build();
    Ok(ureq::Agent::config_builder()
        .tls_config(tls)
        .http_status_as_error(false)
        .timeout_connect(Some(Duration::from_secs(10)))
        // A server that takes the request but never answers is as good as gone (3);
        // a stream's answer starts at once, and its body has no limit.
        .timeout_recv_response(Some(Duration::from_secs(120)))
        .build()
        .into())
}

/// The system's roots, and the CA file's. (ureq's native-tls trusts either the system's
/// roots or a list it is given, so with a CA file the system's bundle goes in the list.)
fn roots(ca_file: Option<&Path>) -> Result<RootCerts, Failure> {
    let Some(path) = ca_file else {
        return Ok(RootCerts::PlatformVerifier);
    };
    let pem = trusted_file::read(path, &trusted_file::CA)?.ok_or_else(|| {
        Failure::Usage(format!(
            "cannot read the CA file {}: no such file",
            path.display()
        ))
    })?;
    let extra = certificates(&pem);
    if extra.is_empty() {
        return Err(Failure::Usage(format!(
            "the CA file {} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            path.display()
        )));
    }
    let system = openssl_probe::probe()
        .cert_file
        .and_then(|bundle| std::fs::read(bundle).ok())
        .map(|pem| certificates(&pem))
        .unwrap_or_default();
    Ok(RootCerts::from(system.into_iter().chain(extra)))
}

fn certificates(pem: &[u8]) -> Vec<Certificate<'static>> {
    ureq::tls::parse_pem(pem)
        .filter_map(|item| match item {
            Ok(PemItem::Certificate(certificate)) => Some(certificate),
            _ => None,
        })
        .collect()
}

/// Why `url` could not be reached; a failed TLS handshake (most often a certificate
/// that no trusted CA signed) says how to trust a private CA.
pub fn unreachable(url: &str, error: ureq::Error) -> Failure {
    match error {
        ureq::Error::NativeTls(error) => Failure::Unreachable(format!(
            "cannot reach {url} securely: {error}; if your site's own CA signed the \
             server's certificate, name that CA's file with --ca-file, DROVER_CA_FILE or \
             ca_file in client.toml"
        )),
        error => Failure::Unreachable(format!("cannot reach {url}: {error}")),
    }
}

/// Warns (on standard error) that `secret` is about to cross the network in clear text:
/// plain HTTP to a host other than this one's loopback.
pub fn warn_if_plain(url: &str, secret: &str) {
    if let Some(host) = plain_to_another_host(url) {
        eprintln!(
            "drover: warning: sending your {secret} to {host} over plain HTTP, unencrypted: \
             anyone on the network between can read it; use an https:// address"
        );
    }
}

/// The host of a plain `http://` address that is not a loopback address.
fn plain_to_another_host(url: &str) -> Option<String> {
    if !url.starts_with("http://") {
        return None;
    }
    // An address that does not parse goes nowhere: ureq refuses it.
    let uri: ureq::http::Uri = url.parse().ok()?;
    let host = uri.host()?;
    let address = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = host.eq_ignore_ascii_case("localhost")
        || address.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    (!loopback).then(|| host.to_string())
}

#[cfg(test)]
mod tests {
    use super::plain_to_another_host;

    #[test]
    fn only_plain_http_beyond_the_loopback_is_warned_of() {
        for quiet in [
            "https://cluster.example:8443",
            "http://127.0.0.1:8080",
            "http://127.8.9.10/mws",
            "http://localhost:8080",
            "http://LOCALHOST",
            "http://[::1]:8080/",
        ] {
            assert_eq!(plain_to_another_host(quiet), None, "{quiet}");
        }
        for (url, host) in [
            ("http://192.0.2.1:1", "192.0.2.1"),
            ("http://cluster.example:8080/mws", "cluster.example"),
            ("http://[2001:db8::1]:80", "[2001:db8::1]"),
            ("http://localhost.example", "localhost.example"),
            ("http://0.0.0.0:8080", "0.0.0.0"),
        ] {
            assert_eq!(plain_to_another_host(url).as_deref(), Some(host), "{url}");
        }
    }
}
