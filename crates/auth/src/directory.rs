//! The directory (LDAP) configuration, as `/rest/diag/ldap` shows it. Logins against the
//! directory come with issue #9; the bind password is never shown or logged.

use serde::Deserialize;

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
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
