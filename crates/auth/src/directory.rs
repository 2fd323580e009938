//! The directory (LDAP): its configuration, as `/rest/diag/ldap` shows it (the bind
//! password is never shown or logged), and logins checked against it.
//!
//! A login is checked in four steps on one connection: bind as the configured service
//! user (or anonymously), find the one entry of the user's object class whose name
//! attribute is the login name under the base DNs, bind as that entry with the given
//! password, and read the groups that list the entry (`member`, `uniqueMember`) or the
//! name (`memberUid`). The groups and the entry's organizational units are what
//! principals name as `LDAPGROUP` and `LDAPOU`.

use std::time::Duration;

use ldap3::{LdapConnAsync, LdapConnSettings, LdapError, SearchEntry, ldap_escape};
use native_tls::{Certificate, TlsConnector};
use serde::Deserialize;

use crate::roles::Member;
use crate::{Identity, Origin};

/// How long a connection and each operation may take before the directory counts as down.
const TIMEOUT: Duration = Duration::from_secs(5);
/// LDAP result code of a wrong password.
const INVALID_CREDENTIALS: u32 = 49;

/// How the connection to the directory is secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SecurityType {
    #[default]
    None,
    #[serde(alias = "start_tls", alias = "start-tls")]
    StartTls,
    #[serde(alias = "ssl")]
    Ldaps,
}

impl SecurityType {
    pub fn as_str(self) -> &'static str {
        match self {
            SecurityType::None => "NONE",
            SecurityType::StartTls => "STARTTLS",
            SecurityType::Ldaps => "LDAPS",
        }
    }
}

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirectoryConfig {
    pub server: String,
    /// Defaults to 636 for LDAPS, else 389.
    pub port: Option<u16>,
    #[serde(default)]
    pub security_type: SecurityType,
    #[serde(default)]
    pub base_dns: Vec<String>,
    pub bind_user: Option<String>,
    pub bind_password: Option<String>,
    #[serde(default = "default_object_class")]
    pub user_object_class: String,
    #[serde(default = "default_name_attribute")]
    pub user_name_attribute: String,
    /// A CA certificate (PEM) trusted for StartTLS and LDAPS besides the system's (a
    /// directory with a certificate of the site's own CA).
    pub ca_file: Option<std::path::PathBuf>,
}

fn default_object_class() -> String {
    "inetOrgPerson".into()
}

fn default_name_attribute() -> String {
    "uid".into()
}

impl DirectoryConfig {
    pub fn port(&self) -> u16 {
        self.port.unwrap_or(match self.security_type {
            SecurityType::Ldaps => 636,
            _ => 389,
        })
    }
}

/// Why a directory login did not give an identity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DirectoryError {
    /// Unknown user, ambiguous user, or wrong password: the caller learns no more.
    #[error("the directory did not accept the login")]
    Refused,
    /// The directory could not be asked (down, unreachable, the service bind refused).
    #[error("{0}")]
    Unavailable(String),
}

fn unavailable(step: &str) -> impl Fn(LdapError) -> DirectoryError + '_ {
    move |e| DirectoryError::Unavailable(format!("{step}: {e}"))
}

impl DirectoryConfig {
    pub fn url(&self) -> String {
        let scheme = match self.security_type {
            SecurityType::Ldaps => "ldaps",
            _ => "ldap",
        };
        format!("{scheme}://{}:{}", self.server, self.port())
    }

    /// Checks `name` and `password` against the directory.
    pub async fn login(&self, name: &str, password: &str) -> Result<Identity, DirectoryError> {
        tokio::time::timeout(TIMEOUT * 4, self.login_steps(name, Some(password)))
            .await
            .unwrap_or_else(|_| Err(DirectoryError::Unavailable("no answer in time".into())))
    }

    /// The identity of `name` without a password (for a proxied user): found and its
    /// groups read with the service user's bind.
    pub async fn lookup(&self, name: &str) -> Result<Identity, DirectoryError> {
        tokio::time::timeout(TIMEOUT * 4, self.login_steps(name, None))
            .await
            .unwrap_or_else(|_| Err(DirectoryError::Unavailable("no answer in time".into())))
    }

    async fn login_steps(
        &self,
        name: &str,
        password: Option<&str>,
    ) -> Result<Identity, DirectoryError> {
        // An empty password would make an unauthenticated bind, which succeeds. Spaces
        // around a name are insignificant to the directory's match, so ` lena` would
        // be lena under another name (and another user's limits).
        if password.is_some_and(str::is_empty) || name.is_empty() || name.trim() != name {
            return Err(DirectoryError::Refused);
        }
        let mut settings = LdapConnSettings::new()
            .set_conn_timeout(TIMEOUT)
            .set_starttls(self.security_type == SecurityType::StartTls);
        if let Some(path) = &self.ca_file {
            settings = settings.set_connector(self.tls_connector(path)?);
        }
        let (connection, mut ldap) = LdapConnAsync::with_settings(settings, &self.url())
            .await
            .map_err(unavailable("cannot connect"))?;
        ldap3::drive!(connection);
        ldap.with_timeout(TIMEOUT);
        let (bind_dn, bind_password) = match &self.bind_user {
            Some(user) => (user.as_str(), self.bind_password.as_deref().unwrap_or("")),
            None => ("", ""),
        };
        ldap.simple_bind(bind_dn, bind_password)
            .await
            .and_then(|r| r.success())
            .map_err(unavailable("the service bind failed"))?;
        let filter = format!(
            "(&(objectClass={})({}={}))",
            ldap_escape(&self.user_object_class),
            self.user_name_attribute,
            ldap_escape(name)
        );
        let mut found = Vec::new();
        for base in &self.base_dns {
            let (entries, _) = ldap
                .search(
                    base,
                    ldap3::Scope::Subtree,
                    &filter,
                    vec![self.user_name_attribute.as_str()],
                )
                .await
                .and_then(|r| r.success())
                .map_err(unavailable("the user search failed"))?;
            found.extend(entries.into_iter().map(SearchEntry::construct));
        }
        let [entry] = found.as_slice() else {
            // A bind that must fail, so an unknown name costs what a wrong password does
            // (timing does not tell which names exist).
            if let (Some(password), Some(base)) = (password, self.base_dns.first()) {
                let decoy = format!(
                    "{}=drover-no-such-user-{},{base}",
                    self.user_name_attribute,
                    crate::password::generate()
                );
                let _ = ldap.simple_bind(&decoy, password).await;
            }
            return Err(DirectoryError::Refused);
        };
        let dn = &entry.dn;
        // The user is named as the directory names them, not as typed: `LENA` is lena.
        let name = canonical_name(entry, &self.user_name_attribute, name);
        let name = name.as_str();
        if let Some(password) = password {
            match ldap
                .simple_bind(dn, password)
                .await
                .and_then(|r| r.success())
            {
                Ok(_) => {}
                Err(LdapError::LdapResult { result }) if result.rc == INVALID_CREDENTIALS => {
                    return Err(DirectoryError::Refused);
                }
                Err(e) => return Err(unavailable("the user bind failed")(e)),
            }
        }
        let groups_filter = format!(
            "(|(member={0})(uniqueMember={0})(memberUid={1}))",
            ldap_escape(dn),
            ldap_escape(name)
        );
        let mut groups: Vec<Member> = organizational_units(dn)
            .into_iter()
            .map(|ou| Member::new("LDAPOU", &ou))
            .collect();
        for base in &self.base_dns {
            let (entries, _) = ldap
                .search(base, ldap3::Scope::Subtree, &groups_filter, vec!["cn"])
                .await
                .and_then(|r| r.success())
                .map_err(unavailable("the group search failed"))?;
            for entry in entries {
                let entry = SearchEntry::construct(entry);
                for cn in entry.attrs.get("cn").into_iter().flatten() {
                    groups.push(Member::new("LDAPGROUP", cn));
                }
            }
        }
        groups.sort();
        groups.dedup();
        let _ = ldap.unbind().await;
        Ok(Identity {
            name: name.to_string(),
            admin: false,
            origin: Origin::Directory,
            groups,
        })
    }
}

impl DirectoryConfig {
    /// A TLS connector that also trusts the CA certificate in `path`.
    fn tls_connector(&self, path: &std::path::Path) -> Result<TlsConnector, DirectoryError> {
        let failed =
            |why: String| DirectoryError::Unavailable(format!("ca_file {}: {why}", path.display()));
        let pem = std::fs::read(path).map_err(|e| failed(e.to_string()))?;
        let certificate = Certificate::from_pem(&pem).map_err(|e| failed(e.to_string()))?;
        TlsConnector::builder()
            .add_root_certificate(certificate)
            .build()
            .map_err(|e| failed(e.to_string()))
    }
}

/// The name the directory gives the user it found for `typed`: the value of its name
/// attribute that matches what was typed (the directory's match ignores case; a user may
/// have several values), else its first value, else what was typed.
fn canonical_name(entry: &SearchEntry, attribute: &str, typed: &str) -> String {
    let values = entry
        .attrs
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(attribute))
        .map(|(_, values)| values.as_slice())
        .unwrap_or_default();
    values
        .iter()
        .find(|v| v.to_lowercase() == typed.to_lowercase())
        .or(values.first())
        .map_or_else(|| typed.to_string(), Clone::clone)
}

/// The `ou=` values of a DN, nearest first (`uid=a,ou=x,ou=y,dc=o` gives `x`, `y`).
fn organizational_units(dn: &str) -> Vec<String> {
    dn.split(',')
        .filter_map(|rdn| {
            let (attribute, value) = rdn.trim().split_once('=')?;
            attribute
                .eq_ignore_ascii_case("ou")
                .then(|| value.trim().to_string())
        })
        .collect()
}

impl std::fmt::Debug for DirectoryConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectoryConfig")
            .field("server", &self.server)
            .field("port", &self.port())
            .field("security_type", &self.security_type)
            .field("base_dns", &self.base_dns)
            .field("bind_user", &self.bind_user)
            .field(
                "bind_password",
                &self.bind_password.as_ref().map(|_| "<hidden>"),
            )
            .field("user_object_class", &self.user_object_class)
            .field("user_name_attribute", &self.user_name_attribute)
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn organizational_units_come_from_the_dn() {
        assert_eq!(
            organizational_units("uid=a,ou=people,OU=east,dc=example,dc=org"),
            ["people", "east"]
        );
        assert!(organizational_units("cn=admin,dc=example,dc=org").is_empty());
    }

    #[test]
    fn users_are_named_as_the_directory_names_them() {
        let entry = |values: &[&str]| SearchEntry {
            dn: "uid=lena,dc=x".into(),
            attrs: [(
                "uid".to_string(),
                values.iter().map(|v| v.to_string()).collect(),
            )]
            .into(),
            bin_attrs: Default::default(),
        };
        assert_eq!(canonical_name(&entry(&["lena"]), "uid", "LENA"), "lena");
        assert_eq!(
            canonical_name(&entry(&["l", "Lena"]), "UID", "lena"),
            "Lena"
        );
        assert_eq!(canonical_name(&entry(&["x"]), "uid", "lena"), "x");
        assert_eq!(canonical_name(&entry(&[]), "uid", "lena"), "lena");
    }

    #[test]
    fn debug_output_hides_the_bind_password() {
        let config: DirectoryConfig = toml::from_str(
            "server = \"ldap.example.org\"\nsecurity_type = \"ldaps\"\nbind_password = \"s3cret\"",
        )
        .unwrap();
        assert_eq!(config.port(), 636);
        let shown = format!("{config:?}");
        assert!(
            !shown.contains("s3cret") && shown.contains("<hidden>"),
            "{shown}"
        );
    }
}
