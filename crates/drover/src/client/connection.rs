//! Where the server is, who we are, and HTTP to it. Settings come from flags, then the
//! environment, then `client.toml` in the user's configuration directory. Passwords and
//! tokens are secrets: never flags (they would show in `ps` and shell history).

use std::io::{BufRead, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::tls::unreachable;
use super::{tls, trusted_file};

/// Why a command did not do its work; each kind has its own exit code.
#[derive(Debug)]
pub enum Failure {
    /// The server answered with a refusal: its messages.
    Refused(Vec<String>),
    /// The command line or the client's configuration is wrong.
    Usage(String),
    /// No answer from the server.
    Unreachable(String),
    /// The server did not accept who we said we are.
    Authentication(Vec<String>),
}

impl Failure {
    pub fn exit_code(&self) -> i32 {
        match self {
            Failure::Refused(_) => 1,
            Failure::Usage(_) => 2,
            Failure::Unreachable(_) => 3,
            Failure::Authentication(_) => 4,
        }
    }

    /// Prints the failure to standard error and gives its exit code.
    pub fn report(&self) -> i32 {
        match self {
            Failure::Refused(messages) | Failure::Authentication(messages) => {
                for message in messages {
                    eprintln!("drover: {message}");
                }
            }
            Failure::Usage(message) | Failure::Unreachable(message) => {
                eprintln!("drover: {message}")
            }
        }
        self.exit_code()
    }
}

/// Flags shared by every client command.
#[derive(clap::Args)]
#[command(next_help_heading = "Connection (client commands)")]
pub struct ConnectionFlags {
    /// The server's address, e.g. http://127.0.0.1:8080 (else DROVER_URL, then `url` in
    /// the client configuration file).
    #[arg(long, global = true, value_name = "URL")]
    pub url: Option<String>,
    /// The user to log in as (else DROVER_USER, `user` in the file, then your login name).
    /// (`--user` is taken: it is the filter of `drover jobs`.)
    #[arg(long, global = true, value_name = "NAME")]
    pub login: Option<String>,
    /// The client configuration file (default: $XDG_CONFIG_HOME/drover/client.toml or
    /// ~/.config/drover/client.toml).
    #[arg(long, global = true, value_name = "FILE")]
    pub client_config: Option<PathBuf>,
    /// A CA to trust besides the system's, for a server whose certificate your site's own
    /// CA signed: its PEM file (else DROVER_CA_FILE, then `ca_file` in the file).
    #[arg(long, global = true, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
}

/// `client.toml`.
#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileSettings {
    url: Option<String>,
    user: Option<String>,
    password: Option<String>,
    token: Option<String>,
    /// Relative to the file's directory.
    ca_file: Option<PathBuf>,
}

fn default_config_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("drover").join("client.toml"))
}

/// Reads `client.toml`, which only its user may read or change: its `url` says where the
/// password goes. Only a file named on the command line must exist.
fn read_config(path: &Path, named: bool) -> Result<FileSettings, Failure> {
    let bytes = match trusted_file::read(path, &trusted_file::CONFIG)? {
        Some(bytes) => bytes,
        None if !named => return Ok(FileSettings::default()),
        None => {
            return Err(Failure::Usage(format!(
                "cannot read {}: no such file",
                path.display()
            )));
        }
    };
    let text = String::from_utf8(bytes)
        .map_err(|_| Failure::Usage(format!("{}: not UTF-8 text", path.display())))?;
    let mut settings: FileSettings =
        toml::from_str(&text).map_err(|e| Failure::Usage(format!("{}: {e}", path.display())))?;
    let directory = path.parent().unwrap_or(Path::new("."));
    settings.ca_file = settings.ca_file.map(|file| directory.join(file));
    Ok(settings)
}

fn environment(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// A server to talk to, with the `Authorization` header to send.
pub struct Server {
    base: String,
    authorization: String,
    agent: ureq::Agent,
}

impl Server {
    pub fn connect(flags: &ConnectionFlags) -> Result<Server, Failure> {
        let file = match &flags.client_config {
            Some(path) => read_config(path, true)?,
            None => match default_config_path() {
                Some(path) => read_config(&path, false)?,
                None => FileSettings::default(),
            },
        };
        let url = flags
            .url
            .clone()
            .or_else(|| environment("DROVER_URL"))
            .or(file.url)
            .ok_or_else(|| {
                Failure::Usage(
                    "no server: give --url, set DROVER_URL, or put url = \"...\" in client.toml"
                        .into(),
                )
            })?;
        if !url.starts_with("http://") && !url.starts_with("https://") {
            return Err(Failure::Usage(format!(
                "the server's address must start with http:// or https://: {url}"
            )));
        }
        let ca_file = flags
            .ca_file
            .clone()
            .or_else(|| environment("DROVER_CA_FILE").map(PathBuf::from))
            .or(file.ca_file);
        // Before a password is asked for: a bad CA file stops the command first.
        let agent = tls::agent(ca_file.as_deref())?;
        let named_user = flags.login.clone().or_else(|| environment("DROVER_USER"));
        let token = environment("DROVER_TOKEN").or(if named_user.is_none() {
            file.token
        } else {
            None
        });
        // Once per command, and before a password is typed: the user may stop here.
        tls::warn_if_plain(&url, if token.is_some() { "token" } else { "password" });
        let authorization = match token {
            Some(token) => format!("Bearer {token}"),
            None => {
                let user = named_user
                    .or(file.user)
                    .or_else(|| environment("USER"))
                    .ok_or_else(|| {
                        Failure::Usage("no user: give --login or set DROVER_USER".into())
                    })?;
                let password = match environment("DROVER_PASSWORD").or(file.password) {
                    Some(password) => password,
                    None => ask_password(&user)?,
                };
                use base64::Engine as _;
                let pair =
                    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
                format!("Basic {pair}")
            }
        };
        Ok(Server {
            base: url.trim_end_matches('/').to_string(),
            authorization,
            agent,
        })
    }

    fn url(&self, path: &str, query: &[(&str, String)]) -> String {
        let mut url = format!("{}{path}", self.base);
        if !query.is_empty() {
            let mut encoded = form_urlencoded::Serializer::new(String::new());
            for (name, value) in query {
                encoded.append_pair(name, value);
            }
            url.push('?');
            url.push_str(&encoded.finish());
        }
        url
    }

    pub fn get(&self, path: &str, query: &[(&str, String)]) -> Result<Value, Failure> {
        let url = self.url(path, query);
        let answer = self
            .agent
            .get(&url)
            .header("Authorization", &self.authorization)
            .header("Accept", "application/json")
            .call();
        self.answer(&url, answer)
    }

    /// POST, PUT or DELETE with an optional JSON body and extra headers.
    pub fn change(
        &self,
        method: &str,
        path: &str,
        query: &[(&str, String)],
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> Result<Value, Failure> {
        let url = self.url(path, query);
        let text = body.map(Value::to_string);
        let answer = match method {
            "DELETE" => {
                let mut request = self
                    .agent
                    .delete(&url)
                    .header("Authorization", &self.authorization);
                for (name, value) in headers {
                    request = request.header(*name, *value);
                }
                request.call()
            }
            _ => {
                let mut request = match method {
                    "POST" => self.agent.post(&url),
                    _ => self.agent.put(&url),
                }
                .header("Authorization", &self.authorization)
                .header("Content-Type", "application/json");
                for (name, value) in headers {
                    request = request.header(*name, *value);
                }
                match text {
                    Some(text) => request.send(text.as_bytes()),
                    None => request.send_empty(),
                }
            }
        };
        self.answer(&url, answer)
    }

    /// Opens a long-lived GET (an event stream): its body as lines. `resume_after` is
    /// the last event id already seen (`Last-Event-ID`).
    pub fn stream(
        &self,
        path: &str,
        query: &[(&str, String)],
        resume_after: Option<&str>,
    ) -> Result<Box<dyn BufRead + Send>, Failure> {
        let url = self.url(path, query);
        let mut request = self
            .agent
            .get(&url)
            .header("Authorization", &self.authorization)
            .header("Accept", "text/event-stream");
        if let Some(id) = resume_after {
            request = request.header("Last-Event-ID", id);
        }
        let answer = request.call();
        let response = answer.map_err(|e| unreachable(&url, e))?;
        let status = response.status().as_u16();
        let mut body = response.into_body();
        if !(200..300).contains(&status) {
            let text = body.read_to_string().unwrap_or_default();
            return Err(refusal(status, &text));
        }
        Ok(Box::new(std::io::BufReader::new(body.into_reader())))
    }

    fn answer(
        &self,
        url: &str,
        answer: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<Value, Failure> {
        let mut response = answer.map_err(|e| unreachable(url, e))?;
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .with_config()
            .limit(256 * 1024 * 1024)
            .read_to_string()
            .map_err(|e| Failure::Unreachable(format!("{url}: the answer was cut short: {e}")))?;
        if !(200..300).contains(&status) {
            return Err(refusal(status, &text));
        }
        if text.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text)
            .map_err(|e| Failure::Refused(vec![format!("{url} answered what is not JSON: {e}")]))
    }
}

/// The server's `messages`, else its status.
fn refusal(status: u16, text: &str) -> Failure {
    let mut messages: Vec<String> = serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|v| v.get("messages").and_then(Value::as_array).cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|m| m.as_str().map(str::to_string))
        .collect();
    if messages.is_empty() {
        let reason = match status {
            401 => "authentication failed (wrong user, password or token)",
            403 => "permission denied",
            404 => "not found",
            429 => "too many requests",
            _ => "the request was refused",
        };
        messages.push(format!("{reason} (HTTP {status})"));
    }
    match status {
        401 => Failure::Authentication(messages),
        _ => Failure::Refused(messages),
    }
}

/// Reads a password from the terminal without echo; without a terminal there is none to
/// ask, and the user is told where else a password may come from.
fn ask_password(user: &str) -> Result<String, Failure> {
    let no_terminal = || {
        Failure::Authentication(vec![format!(
            "no password for {user}: set DROVER_PASSWORD or DROVER_TOKEN, or put it in \
             client.toml (mode 600); passwords are not taken on the command line"
        )])
    };
    if !std::io::stdin().is_terminal() {
        return Err(no_terminal());
    }
    let mut tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .map_err(|_| no_terminal())?;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&tty);
    // Echo off, and Ctrl-C read as a byte rather than a signal: a signal would end us
    // with the terminal left silent. Before the prompt: a password typed (or pasted) as
    // soon as the prompt shows would otherwise be echoed.
    // SAFETY: termios is plain data, read and written on our own open terminal.
    let saved = unsafe {
        let mut saved: libc::termios = std::mem::zeroed();
        if libc::tcgetattr(fd, &mut saved) != 0 {
            return Err(no_terminal());
        }
        let mut quiet = saved;
        quiet.c_lflag &= !(libc::ECHO | libc::ISIG);
        libc::tcsetattr(fd, libc::TCSANOW, &quiet);
        saved
    };
    let _ = write!(tty, "Password for {user}: ");
    let _ = tty.flush();
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    let mut interrupted = false;
    while let Ok(1) = tty.read(&mut byte) {
        match byte[0] {
            b'\n' | b'\r' => break,
            // Ctrl-C, Ctrl-D
            3 | 4 => {
                interrupted = true;
                break;
            }
            other => line.push(other),
        }
    }
    // SAFETY: as above; restores what was there.
    unsafe {
        libc::tcsetattr(fd, libc::TCSANOW, &saved);
    }
    if interrupted {
        let _ = writeln!(tty);
        std::process::exit(130);
    }
    let _ = writeln!(tty);
    let password =
        String::from_utf8(line).map_err(|_| Failure::Usage("the password is not UTF-8".into()))?;
    Ok(password)
}
