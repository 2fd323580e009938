//! `drover submit`: a job from flags, or from a script whose leading `#DROVER` comment
//! lines hold options, like `#SBATCH` lines (flags on the command line win over them).

use std::path::{Path, PathBuf};

use clap::Parser;
use serde_json::{Map, Value, json};

use super::connection::{Failure, Server};
use super::output;

#[derive(clap::Args)]
pub struct SubmitArgs {
    /// A script to run; its `#DROVER` lines give options (e.g. `#DROVER --processors 4`).
    /// A program (e.g. /bin/hostname) runs as the command.
    pub script: Option<PathBuf>,
    /// Arguments for the script: everything after it (options go before the script).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub script_args: Vec<String>,
    #[command(flatten)]
    pub options: SubmitOptions,
    /// Print the server's whole answer (JSON) instead of the id.
    #[arg(long)]
    pub json: bool,
    /// A key that makes a retried submission create the job once (Idempotency-Key).
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
}

/// What a job asks for; the same options on the command line and in `#DROVER` lines.
#[derive(clap::Args, Default)]
pub struct SubmitOptions {
    /// The program to run (when no script is given).
    #[arg(long, short = 'c')]
    pub command: Option<String>,
    /// Its arguments, as one string (split by the server like a shell would).
    #[arg(long, allow_hyphen_values = true)]
    pub args: Option<String>,
    /// The working directory (default: the current one).
    #[arg(long, short = 'D')]
    pub dir: Option<PathBuf>,
    /// How many processors.
    #[arg(long, short = 'n', value_parser = clap::value_parser!(u32).range(1..))]
    pub processors: Option<u32>,
    /// The time limit (seconds, 30m, 2h, HH:MM:SS, D-HH:MM:SS).
    #[arg(long, short = 't', value_parser = super::output::parse_duration)]
    pub time: Option<i64>,
    /// The account to charge.
    #[arg(long, short = 'A')]
    pub account: Option<String>,
    /// The job's name.
    #[arg(long, short = 'J')]
    pub name: Option<String>,
    /// The queue (class).
    #[arg(long, short = 'q')]
    pub queue: Option<String>,
    /// The quality of service.
    #[arg(long)]
    pub qos: Option<String>,
    /// Where standard output goes.
    #[arg(long, short = 'o')]
    pub output: Option<String>,
    /// Where standard error goes.
    #[arg(long, short = 'e')]
    pub error: Option<String>,
    /// An environment variable for the job, NAME=VALUE (repeatable).
    #[arg(long, value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// Submit held: the job waits until `drover job release`.
    #[arg(long, short = 'H')]
    pub hold: bool,
}

impl SubmitOptions {
    /// These options, with `script`'s filling what these leave unsaid.
    fn over(self, script: SubmitOptions) -> SubmitOptions {
        SubmitOptions {
            command: self.command.or(script.command),
            args: self.args.or(script.args),
            dir: self.dir.or(script.dir),
            processors: self.processors.or(script.processors),
            time: self.time.or(script.time),
            account: self.account.or(script.account),
            name: self.name.or(script.name),
            queue: self.queue.or(script.queue),
            qos: self.qos.or(script.qos),
            output: self.output.or(script.output),
            error: self.error.or(script.error),
            env: [script.env, self.env].concat(),
            hold: self.hold || script.hold,
        }
    }
}

/// The `#DROVER` lines' options, parsed like the command line's.
#[derive(Parser)]
#[command(name = "#DROVER", no_binary_name = true, disable_help_flag = true)]
struct ScriptLines {
    #[command(flatten)]
    options: SubmitOptions,
}

/// The options in the leading comment block of `script` (sbatch's rule: they end at the
/// first line that is neither blank nor a comment).
fn script_options(script: &Path, text: &str) -> Result<SubmitOptions, Failure> {
    let mut words = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with("#!") {
            continue;
        }
        if !line.starts_with('#') {
            break;
        }
        if let Some(rest) = line.strip_prefix("#DROVER") {
            words.extend(shell_words(rest).map_err(|e| {
                Failure::Usage(format!("{}: in its #DROVER lines: {e}", script.display()))
            })?);
        }
    }
    ScriptLines::try_parse_from(words)
        .map(|lines| lines.options)
        .map_err(|e| {
            Failure::Usage(format!(
                "{}: in its #DROVER lines: {}",
                script.display(),
                e.render().to_string().trim()
            ))
        })
}

/// Splits a `#DROVER` line into words as a shell would, quotes and backslashes
/// included, so that `--name "nightly build"` is one value.
fn shell_words(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut characters = line.chars();
    while let Some(c) = characters.next() {
        match c {
            c if c.is_whitespace() => words.extend(word.take()),
            '\'' => {
                let text = word.get_or_insert_default();
                loop {
                    match characters.next() {
                        Some('\'') => break,
                        Some(c) => text.push(c),
                        None => return Err(format!("unclosed ' in: {}", line.trim())),
                    }
                }
            }
            '"' => {
                let text = word.get_or_insert_default();
                loop {
                    match characters.next() {
                        Some('"') => break,
                        Some('\\') => text.extend(characters.next()),
                        Some(c) => text.push(c),
                        None => return Err(format!("unclosed \" in: {}", line.trim())),
                    }
                }
            }
            '\\' => word.get_or_insert_default().extend(characters.next()),
            c => word.get_or_insert_default().push(c),
        }
    }
    words.extend(word);
    Ok(words)
}

fn absolute(path: &Path) -> Result<PathBuf, Failure> {
    std::path::absolute(path)
        .map_err(|e| Failure::Usage(format!("cannot resolve {}: {e}", path.display())))
}

pub fn submit(server: &Server, args: SubmitArgs) -> Result<(), Failure> {
    let (options, command, arguments) = match &args.script {
        Some(script) => {
            let bytes = std::fs::read(script)
                .map_err(|e| Failure::Usage(format!("cannot read {}: {e}", script.display())))?;
            // A program (not text) given where a script may be runs as the command, as
            // with `srun`: it has no `#DROVER` lines to read.
            let text = String::from_utf8(bytes).unwrap_or_default();
            let options = args.options.over(script_options(script, &text)?);
            if options.command.is_some() {
                return Err(Failure::Usage(
                    "give a script or --command, not both".into(),
                ));
            }
            // The server runs the script itself: it needs the whole path.
            let command = absolute(script)?.display().to_string();
            let arguments = match (&options.args, args.script_args.is_empty()) {
                (Some(_), false) => {
                    return Err(Failure::Usage(
                        "give the script's arguments after it or with --args, not both".into(),
                    ));
                }
                (Some(line), true) => Some(json!(line)),
                (None, false) => Some(json!(args.script_args)),
                (None, true) => None,
            };
            (options, command, arguments)
        }
        None => {
            let options = args.options;
            let Some(command) = options.command.clone() else {
                return Err(Failure::Usage(
                    "submit: give a script, or --command PROGRAM".into(),
                ));
            };
            let arguments = options.args.clone().map(Value::from);
            (options, command, arguments)
        }
    };
    let body = submission(options, command, arguments)?;
    let mut headers = Vec::new();
    if let Some(key) = &args.idempotency_key {
        headers.push(("Idempotency-Key", key.as_str()));
    }
    let answer = server.change("POST", "/rest/jobs", &[], Some(&body), &headers)?;
    if args.json {
        output::print_json(&answer);
    } else {
        println!("{}", output::text(&answer["id"]));
    }
    Ok(())
}

/// The version-1 submission body.
fn submission(
    options: SubmitOptions,
    command: String,
    arguments: Option<Value>,
) -> Result<Value, Failure> {
    let directory = match options.dir {
        Some(dir) => absolute(&dir)?,
        None => std::env::current_dir()
            .map_err(|e| Failure::Usage(format!("no current directory: {e}; give --dir")))?,
    };
    let mut body = Map::new();
    body.insert("commandFile".into(), json!(command));
    body.insert(
        "initialWorkingDirectory".into(),
        json!(directory.display().to_string()),
    );
    let mut put = |name: &str, value: Option<Value>| {
        if let Some(value) = value {
            body.insert(name.into(), value);
        }
    };
    put("commandLineArguments", arguments);
    put("name", options.name.map(Value::from));
    put("account", options.account.map(Value::from));
    put("queue", options.queue.map(Value::from));
    put("qosRequested", options.qos.map(Value::from));
    put("durationRequested", options.time.map(Value::from));
    put("standardOutputFilePath", options.output.map(Value::from));
    put("standardErrorFilePath", options.error.map(Value::from));
    put(
        "requirements",
        options
            .processors
            .map(|n| json!({ "requiredProcessorCountMinimum": n })),
    );
    put("holds", options.hold.then(|| json!(["USER"])));
    if !options.env.is_empty() {
        let mut environment = Map::new();
        for pair in &options.env {
            let Some((name, value)) = pair.split_once('=').filter(|(n, _)| !n.is_empty()) else {
                return Err(Failure::Usage(format!(
                    "--env takes NAME=VALUE, not '{pair}'"
                )));
            };
            environment.insert(name.into(), json!(value));
        }
        body.insert("environmentVariables".into(), Value::Object(environment));
    }
    Ok(Value::Object(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drover_lines_in_the_leading_comments_are_options() {
        let script = "#!/bin/sh\n#DROVER --processors 2 --time 10m\n# a comment\n\
                      #DROVER -J build\n\necho hi\n#DROVER --account late\n";
        let options = script_options(Path::new("s.sh"), script).unwrap();
        assert_eq!(options.processors, Some(2));
        assert_eq!(options.time, Some(600));
        assert_eq!(options.name.as_deref(), Some("build"));
        assert_eq!(options.account, None);
        let quoted = script_options(
            Path::new("s.sh"),
            "#DROVER --name \"nightly build\" --args 'a b'\n",
        );
        let quoted = quoted.unwrap();
        assert_eq!(quoted.name.as_deref(), Some("nightly build"));
        assert_eq!(quoted.args.as_deref(), Some("a b"));
        assert!(shell_words("--name 'open").is_err());
        assert_eq!(
            shell_words(r#"a\ b "c\"d" ''"#).unwrap(),
            ["a b", "c\"d", ""]
        );
        let bad = script_options(Path::new("s.sh"), "#DROVER --processors none\n");
        assert!(matches!(bad, Err(Failure::Usage(m)) if m.contains("s.sh")));
    }
}
