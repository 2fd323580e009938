//! Plugin types as Rhai scripts, run in a sandbox.
//!
//! Rhai has no file system, network or process access of its own; the only way out of a
//! script is the host functions [`Host`] provides, each checked by the host against the
//! plugin's user. Every call gets a fresh engine bounded in operations, call depth,
//! expression depth, string, array and map sizes, variables, wall time and memory, so a
//! runaway script ends with an error instead of holding a thread or the memory.
//!
//! The engine's own size limits count each value apart, and neither map keys nor what
//! values there are: a script holding 10,000 keys of 64 KiB grew to 660 MB. So what a
//! call holds in all is counted by the global allocator, per thread
//! (`drover_alloc::Metered`), and checked between operations with the wall time: every
//! way of growing (keys, strings, arrays, variables, the answers of host functions)
//! counts. Scripts run only in a binary whose allocator is metered.
//!
//! A script declares itself with `fn describe()`, which answers
//! `#{id, author, description, config: #{<key>: #{type, required, "default"}}, services: [..]}`
//! (`default` is a reserved word of Rhai: it is quoted).
//! The service calls, when the script defines them: `configure(config)` on every start and
//! configuration change (throwing refuses the configuration), `poll()` every poll,
//! `on_event(event)` for each event while started, and the functions `services` names for
//! the plugin's web services (`fn <name>(request)`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use rhai::{AST, Dynamic, Engine, EvalAltResult, Position};
use serde_json::{Map, Value};

/// What a script may reach: everything outside its own values. Implemented by the
/// service; every call is checked against the plugin's user there.
pub trait Host: Send + Sync {
    /// Runs host function `name` with `args` (JSON), answering JSON or why not, and
    /// stopping at `deadline`, the end of the script call's time: the engine checks its
    /// time only between operations, so a host function that waits (a program, a
    /// message to the engine) must not wait past it.
    fn call(&self, name: &str, args: Vec<Value>, deadline: Instant) -> Result<Value, String>;
    /// A line the script logged (`log`, `print`, `debug`).
    fn log(&self, level: &str, message: &str);
}

/// The host functions a script may call, and how many arguments each takes.
pub const HOST_FUNCTIONS: &[(&str, usize)] = &[
    ("nodes", 0),
    ("node", 1),
    ("jobs", 0),
    ("job", 1),
    ("vms", 0),
    ("reservations", 0),
    ("set_node", 2),
    ("submit_job", 1),
    ("modify_job", 2),
    ("cancel_job", 1),
    ("create_event", 1),
    ("post_sample", 2),
    ("data_get", 1),
    ("data_set", 2),
    ("config", 0),
    ("read_url", 1),
];

/// The bounds of one call.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub operations: u64,
    pub call_depth: usize,
    pub expression_depth: usize,
    pub string_bytes: usize,
    pub array_items: usize,
    pub map_items: usize,
    pub variables: usize,
    pub wall_time: Duration,
    /// The most bytes a call may come to hold, all values together.
    pub memory_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            operations: 2_000_000,
            call_depth: 32,
            expression_depth: 64,
            string_bytes: 64 * 1024,
            array_items: 10_000,
            map_items: 10_000,
            variables: 512,
            wall_time: Duration::from_secs(2),
            memory_bytes: 16 << 20,
        }
    }
}

/// The kind of a configuration value a type declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigKind {
    String,
    Integer,
    Number,
    Boolean,
    Any,
}

impl ConfigKind {
    fn parse(text: &str) -> Option<Self> {
        Some(match text.to_ascii_lowercase().as_str() {
            "string" => ConfigKind::String,
            "integer" | "int" => ConfigKind::Integer,
            "number" | "float" | "double" => ConfigKind::Number,
            "boolean" | "bool" => ConfigKind::Boolean,
            "any" => ConfigKind::Any,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ConfigKind::String => "string",
            ConfigKind::Integer => "integer",
            ConfigKind::Number => "number",
            ConfigKind::Boolean => "boolean",
            ConfigKind::Any => "any",
        }
    }

    /// Whether `value` is of this kind; strings that read as one are accepted (plugin
    /// configurations are "object of string values", spec 2.14).
    pub fn accepts(self, value: &Value) -> bool {
        match (self, value) {
            (ConfigKind::Any, _) => true,
            (ConfigKind::String, Value::String(_)) => true,
            (ConfigKind::Integer, Value::Number(n)) => n.is_i64() || n.is_u64(),
            (ConfigKind::Integer, Value::String(s)) => s.trim().parse::<i64>().is_ok(),
            (ConfigKind::Number, Value::Number(_)) => true,
            (ConfigKind::Number, Value::String(s)) => s.trim().parse::<f64>().is_ok(),
            (ConfigKind::Boolean, Value::Bool(_)) => true,
            (ConfigKind::Boolean, Value::String(s)) => matches!(s.as_str(), "true" | "false"),
            _ => false,
        }
    }
}

/// A configuration key a type declares.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigKey {
    pub name: String,
    pub kind: ConfigKind,
    pub required: bool,
    pub default: Option<Value>,
}

/// What a type says of itself.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Description {
    pub id: String,
    pub author: Option<String>,
    pub description: Option<String>,
    pub config: Vec<ConfigKey>,
    /// The functions its web services call.
    pub services: Vec<String>,
}

impl Description {
    /// `config` with the declared defaults added, or every problem with it. Keys the type
    /// does not declare are kept (a type may read what it likes).
    pub fn checked_config(
        &self,
        config: &Map<String, Value>,
    ) -> Result<Map<String, Value>, Vec<String>> {
        let mut out = config.clone();
        let mut problems = Vec::new();
        for key in &self.config {
            match config.get(&key.name) {
                Some(value) if !key.kind.accepts(value) => problems.push(format!(
                    "config.{}: expected {}, got {value}",
                    key.name,
                    key.kind.as_str()
                )),
                Some(_) => {}
                None => match &key.default {
                    Some(default) => {
                        out.insert(key.name.clone(), default.clone());
                    }
                    None if key.required => problems.push(format!(
                        "config.{}: required by the plugin type {}",
                        key.name, self.id
                    )),
                    None => {}
                },
            }
        }
        if problems.is_empty() {
            Ok(out)
        } else {
            Err(problems)
        }
    }
}

/// A compiled plugin type.
#[derive(Clone)]
pub struct Script {
    ast: Arc<AST>,
    pub description: Description,
}

impl std::fmt::Debug for Script {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Script")
            .field("description", &self.description)
            .finish()
    }
}

/// Why a script was not accepted: a sentence, and the line when the compiler gave one.
#[derive(Debug, Clone, PartialEq)]
pub struct CompileError {
    pub message: String,
    pub line: Option<usize>,
}

impl std::fmt::Display for CompileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(line) => write!(f, "line {line}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

const ACCEPTED: &str = "plugin types are Rhai scripts (https://rhai.rs) that define fn describe() \
                        answering #{id, author, description, config, services}; Groovy or Java \
                        classes are not accepted";

/// Compiles `source` and asks it to describe itself.
pub fn compile(source: &str, limits: &Limits) -> Result<Script, CompileError> {
    let engine = sandbox(limits, None, Instant::now() + limits.wall_time);
    let ast = engine.compile(source).map_err(|error| {
        let line = error.position().line();
        let mut message = error.err_type().to_string();
        if looks_like_a_class(source) {
            message = format!("{message}; {ACCEPTED}");
        }
        CompileError { message, line }
    })?;
    if !defines(&ast, "describe", 0) {
        return Err(CompileError {
            message: format!("the script defines no fn describe(): {ACCEPTED}"),
            line: None,
        });
    }
    let script = Script {
        ast: Arc::new(ast),
        description: Description::default(),
    };
    let described =
        call(&script, "describe", Vec::new(), None, limits).map_err(|e| CompileError {
            message: format!("describe() failed: {e}"),
            line: None,
        })?;
    let description = read_description(&described).map_err(|message| CompileError {
        message,
        line: None,
    })?;
    for service in &description.services {
        if !defines(&script.ast, service, 1) {
            return Err(CompileError {
                message: format!(
                    "describe() names the service '{service}', but there is no fn {service}(request)"
                ),
                line: None,
            });
        }
    }
    Ok(Script {
        description,
        ..script
    })
}

/// Whether the script defines `name` with `arity` parameters.
pub fn defines(ast: &AST, name: &str, arity: usize) -> bool {
    ast.iter_functions()
        .any(|f| f.name == name && f.params.len() == arity)
}

impl Script {
    pub fn defines(&self, name: &str, arity: usize) -> bool {
        defines(&self.ast, name, arity)
    }
}

fn looks_like_a_class(source: &str) -> bool {
    source.lines().map(str::trim_start).any(|line| {
        line.starts_with("package ")
            || line.starts_with("import ")
            || line.starts_with("class ")
            || line.starts_with("public class ")
            || line.contains(" extends ")
    })
}

fn read_description(value: &Value) -> Result<Description, String> {
    let Some(map) = value.as_object() else {
        return Err("describe() must answer a map #{id, author, description, config}".into());
    };
    let text = |key: &str| map.get(key).and_then(Value::as_str).map(String::from);
    let Some(id) = text("id") else {
        return Err("describe() must answer an id (a string)".into());
    };
    if let Some(why) = id_problem(&id) {
        return Err(format!("id '{id}': {why}"));
    }
    let mut config = Vec::new();
    if let Some(keys) = map.get("config") {
        let Some(keys) = keys.as_object() else {
            return Err(
                "describe().config must be a map of key: #{type, required, default}".into(),
            );
        };
        for (name, spec) in keys {
            let kind = match spec.get("type").and_then(Value::as_str) {
                None => ConfigKind::Any,
                Some(text) => ConfigKind::parse(text)
                    .ok_or_else(|| format!("config.{name}.type: '{text}' is not string, integer, number, boolean or any"))?,
            };
            config.push(ConfigKey {
                name: name.clone(),
                kind,
                required: spec
                    .get("required")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
                default: spec.get("default").cloned(),
            });
        }
    }
    let services = match map.get("services") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(names)) => names
            .iter()
            .map(|n| {
                n.as_str()
                    .map(String::from)
                    .ok_or("describe().services must be a list of function names")
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("describe().services must be a list of function names".into()),
    };
    Ok(Description {
        id,
        author: text("author"),
        description: text("description"),
        config,
        services,
    })
}

/// Why `id` cannot name a plugin type or a plugin: a letter first, then letters, digits,
/// `_`, `-` and `.`, at most 64 of them.
pub fn id_problem(id: &str) -> Option<&'static str> {
    if id.is_empty() || id.len() > 64 {
        return Some("it must have 1 to 64 characters");
    }
    if !id.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return Some("it must start with a letter");
    }
    if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    {
        return Some("only letters, digits, '_', '-' and '.' are allowed");
    }
    None
}

/// Calls `function` of `script` with `args`; answers what it returned, as JSON.
pub fn call(
    script: &Script,
    function: &str,
    args: Vec<Value>,
    host: Option<Arc<dyn Host>>,
    limits: &Limits,
) -> Result<Value, String> {
    if !drover_alloc::metering() {
        return Err(UNMETERED.into());
    }
    let deadline = Instant::now() + limits.wall_time;
    let engine = sandbox(limits, host, deadline);
    let args: Vec<Dynamic> = args
        .iter()
        .map(|a| rhai::serde::to_dynamic(a).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let mut scope = rhai::Scope::new();
    let options = rhai::CallFnOptions::new().eval_ast(true);
    let answer: Dynamic = engine
        .call_fn_with_options(options, &mut scope, &script.ast, function, args)
        .map_err(|e| describe_error(&e, limits))?;
    if answer.is_unit() {
        return Ok(Value::Null);
    }
    rhai::serde::from_dynamic::<Value>(&answer).map_err(|e| format!("its answer is not JSON: {e}"))
}

const UNMETERED: &str = "scripts run only where their memory is counted, and this \
                          program's allocator does not count it (drover_alloc::Metered)";

/// The tokens a call is stopped with (`ErrorTerminated`), told apart in its error.
const TIMEOUT: &str = "timeout";
const OUT_OF_MEMORY: &str = "memory";

fn describe_error(error: &EvalAltResult, limits: &Limits) -> String {
    match error {
        EvalAltResult::ErrorTerminated(why, _) if why.to_string() == OUT_OF_MEMORY => format!(
            "it held more than {} bytes and was stopped",
            limits.memory_bytes
        ),
        EvalAltResult::ErrorTerminated(_, _) => format!(
            "it ran past its {} ms and was stopped",
            limits.wall_time.as_millis()
        ),
        EvalAltResult::ErrorTooManyOperations(_) => {
            format!(
                "it ran past {} operations and was stopped",
                limits.operations
            )
        }
        EvalAltResult::ErrorStackOverflow(_) => {
            format!("it called functions deeper than {}", limits.call_depth)
        }
        EvalAltResult::ErrorDataTooLarge(what, _) => format!("{what} grew past its limit"),
        other => other.to_string(),
    }
}

/// An engine that can do nothing but compute, within `limits`, and call `host`.
fn sandbox(limits: &Limits, host: Option<Arc<dyn Host>>, deadline: Instant) -> Engine {
    let mut engine = Engine::new();
    engine.set_max_operations(limits.operations);
    engine.set_max_call_levels(limits.call_depth);
    engine.set_max_expr_depths(limits.expression_depth, limits.expression_depth);
    engine.set_max_string_size(limits.string_bytes);
    engine.set_max_array_size(limits.array_items);
    engine.set_max_map_size(limits.map_items);
    engine.set_max_variables(limits.variables);
    engine.set_max_functions(256);
    engine.disable_symbol("eval");
    // Counted from here: the engine itself is the same for every call.
    let (start, memory) = (drover_alloc::held_by_this_thread(), limits.memory_bytes);
    engine.on_progress(move |_| {
        if Instant::now() > deadline {
            Some(Dynamic::from(TIMEOUT))
        } else {
            let held = drover_alloc::held_by_this_thread().wrapping_sub(start);
            (held > memory as isize).then(|| Dynamic::from(OUT_OF_MEMORY))
        }
    });
    let Some(host) = host else {
        engine.on_print(|_| {});
        engine.on_debug(|_, _, _| {});
        return engine;
    };
    let printer = host.clone();
    engine.on_print(move |text| printer.log("info", text));
    let debugger = host.clone();
    engine.on_debug(move |text, _, _| debugger.log("debug", text));
    let logger = host.clone();
    engine.register_fn("log", move |level: &str, message: &str| {
        logger.log(level, message)
    });
    for &(name, arity) in HOST_FUNCTIONS {
        let call = HostCall {
            host: host.clone(),
            name,
            deadline,
        };
        match arity {
            0 => {
                engine.register_fn(name, move || call.run(vec![]));
            }
            1 => {
                engine.register_fn(name, move |a: Dynamic| call.run(vec![a]));
            }
            _ => {
                engine.register_fn(name, move |a: Dynamic, b: Dynamic| call.run(vec![a, b]));
            }
        }
    }
    engine
}

/// A host function as a script calls it, within the call's time.
struct HostCall {
    host: Arc<dyn Host>,
    name: &'static str,
    deadline: Instant,
}

impl HostCall {
    fn run(&self, args: Vec<Dynamic>) -> Result<Dynamic, Box<EvalAltResult>> {
        // Past the deadline the call ends as a runaway loop does, whatever the host
        // answered: a script cannot catch it and go on calling.
        let out_of_time = || {
            (Instant::now() >= self.deadline).then(|| {
                Box::new(EvalAltResult::ErrorTerminated(
                    Dynamic::from(TIMEOUT),
                    Position::NONE,
                ))
            })
        };
        if let Some(stop) = out_of_time() {
            return Err(stop);
        }
        let args: Vec<Value> = args
            .iter()
            .map(rhai::serde::from_dynamic::<Value>)
            .collect::<Result<_, _>>()?;
        let answer = self.host.call(self.name, args, self.deadline);
        if let Some(stop) = out_of_time() {
            return Err(stop);
        }
        let answer = answer.map_err(|why| {
            Box::new(EvalAltResult::ErrorRuntime(
                format!("{}: {why}", self.name).into(),
                Position::NONE,
            ))
        })?;
        rhai::serde::to_dynamic(&answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Mutex;

    const TYPE: &str = r#"
        fn describe() {
            #{ id: "Counter", author: "ops", description: "counts polls",
               config: #{ step: #{ type: "integer", "default": 1 }, url: #{ type: "string", required: true } },
               services: ["bump"] }
        }
        fn poll() { let n = data_get("n"); if n == () { n = 0 } data_set("n", n + 1); n + 1 }
        fn bump(request) { #{ got: request.params.by } }
    "#;

    struct Recording(Mutex<Map<String, Value>>);

    impl Host for Recording {
        fn call(&self, name: &str, args: Vec<Value>, _: Instant) -> Result<Value, String> {
            let mut data = self.0.lock().unwrap();
            match name {
                "data_get" => Ok(data
                    .get(args[0].as_str().unwrap())
                    .cloned()
                    .unwrap_or(Value::Null)),
                "data_set" => {
                    data.insert(args[0].as_str().unwrap().into(), args[1].clone());
                    Ok(Value::Null)
                }
                _ => Err("not here".into()),
            }
        }
        fn log(&self, _: &str, _: &str) {}
    }

    #[test]
    fn a_type_describes_itself_and_its_functions_run_with_the_host() {
        let limits = Limits::default();
        let script = compile(TYPE, &limits).unwrap();
        assert_eq!(script.description.id, "Counter");
        assert_eq!(script.description.services, ["bump"]);
        let config = script
            .description
            .checked_config(json!({"url": "x"}).as_object().unwrap())
            .unwrap();
        assert_eq!(config["step"], 1);
        let missing = script.description.checked_config(&Map::new()).unwrap_err();
        assert!(missing[0].contains("config.url"), "{missing:?}");
        let host: Arc<dyn Host> = Arc::new(Recording(Mutex::new(Map::new())));
        assert_eq!(
            call(&script, "poll", vec![], Some(host.clone()), &limits).unwrap(),
            1
        );
        assert_eq!(
            call(&script, "poll", vec![], Some(host.clone()), &limits).unwrap(),
            2
        );
        let answer = call(
            &script,
            "bump",
            vec![json!({"params": {"by": "3"}})],
            Some(host),
            &limits,
        )
        .unwrap();
        assert_eq!(answer, json!({"got": "3"}));
    }

    #[test]
    fn compile_errors_name_the_line_and_classes_are_told_what_is_accepted() {
        let limits = Limits::default();
        let error =
            compile("fn describe() {\n  #{ id: \"x\" \n}\nfn poll( {", &limits).unwrap_err();
        assert!(error.line.is_some(), "{error}");
        let groovy = "package x\nimport y.Z\nclass Native extends AbstractPlugin {\n}\n";
        let error = compile(groovy, &limits).unwrap_err();
        assert!(error.message.contains("Groovy"), "{error}");
        let error = compile("fn poll() { 1 }", &limits).unwrap_err();
        assert!(error.message.contains("describe"), "{error}");
    }

    #[test]
    fn the_example_types_compile() {
        for (source, id) in [
            (
                include_str!("../../../examples/plugins/node_health.rhai"),
                "NodeHealth",
            ),
            (
                include_str!("../../../examples/plugins/notifier.rhai"),
                "Notifier",
            ),
        ] {
            let script = compile(source, &Limits::default()).unwrap();
            assert_eq!(script.description.id, id);
        }
    }

    /// The default limits but a wall time of 300 ms.
    fn quick() -> Limits {
        Limits {
            wall_time: Duration::from_millis(300),
            ..Limits::default()
        }
    }

    #[test]
    fn runaway_scripts_are_stopped() {
        let limits = quick();
        let script = compile(
            r#"fn describe() { #{ id: "Bad" } }
               fn spin() { loop { } }
               fn grow() { let a = []; loop { a.push("xxxxxxxxxxxxxxxx" + a.len()); } }
               fn deep(n) { deep(n + 1) }
               fn big() { let s = "x"; loop { s += s; } }"#,
            &limits,
        )
        .unwrap();
        for (function, args, words) in [
            ("spin", vec![], "operations"),
            ("grow", vec![], "limit"),
            ("deep", vec![json!(0)], "deeper"),
            ("big", vec![], "limit"),
        ] {
            let started = Instant::now();
            let error = call(&script, function, args, None, &limits).unwrap_err();
            assert!(
                error.contains(words) || error.contains("stopped"),
                "{function}: {error}"
            );
            assert!(started.elapsed() < Duration::from_secs(5), "{function}");
        }
    }

    /// Every way of growing counts towards one bound for the whole call: map keys (the
    /// engine's own limits left them out), strings and arrays held in many variables;
    /// what a call allocates and frees again does not.
    #[test]
    fn what_a_call_holds_in_all_is_bounded() {
        let limits = Limits {
            memory_bytes: 4 << 20,
            // Generous: only the memory bound may stop these, however slow the machine.
            wall_time: Duration::from_secs(120),
            ..Limits::default()
        };
        let lets = |make: &str| -> String {
            (0..200)
                .map(|i| format!("let v{i} = {make}({i});\n"))
                .collect()
        };
        let source = format!(
            r#"fn describe() {{ #{{ id: "Greedy" }} }}
               fn text(n) {{ let s = "x"; while s.len() < 32768 {{ s += s; }} s + n }}
               fn list(n) {{ let a = []; a.pad(10000, n); a }}
               fn keys() {{ let k = text(0); let m = #{{}}; for i in 0..10000 {{ m[k + i] = i; }} m.len() }}
               fn strings() {{ {} 0 }}
               fn arrays() {{ {} 0 }}
               fn churn() {{ for i in 0..1000 {{ let s = text(i); }} 1 }}"#,
            lets("text"),
            lets("list")
        );
        let script = compile(&source, &limits).unwrap();
        for function in ["keys", "strings", "arrays"] {
            let error = call(&script, function, vec![], None, &limits).unwrap_err();
            assert!(
                error.contains("held more than 4194304 bytes"),
                "{function}: {error}"
            );
        }
        assert_eq!(call(&script, "churn", vec![], None, &limits).unwrap(), 1);
    }

    /// A host that waits as long as it is let: until the deadline it is given.
    struct Waiting(Mutex<Vec<Instant>>);

    impl Host for Waiting {
        fn call(&self, _: &str, _: Vec<Value>, deadline: Instant) -> Result<Value, String> {
            self.0.lock().unwrap().push(deadline);
            std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
            Err("timed out".into())
        }
        fn log(&self, _: &str, _: &str) {}
    }

    /// Host functions get the call's deadline, and a call whose host function ran to it
    /// ends with the deadline's error, even when the script catches the function's.
    #[test]
    fn host_functions_stop_at_the_calls_deadline() {
        let limits = quick();
        let script = compile(
            r#"fn describe() { #{ id: "Patient" } }
               fn wait() { for i in 0..3 { try { read_url("exec:///slow"); } catch (e) { } } "done" }"#,
            &limits,
        )
        .unwrap();
        let host = Arc::new(Waiting(Mutex::new(Vec::new())));
        let started = Instant::now();
        let error = call(&script, "wait", vec![], Some(host.clone()), &limits).unwrap_err();
        let ended = Instant::now();
        assert!(error.contains("ran past its 300 ms"), "{error}");
        let deadlines = host.0.lock().unwrap();
        assert_eq!(deadlines.len(), 1, "called again after the deadline");
        // The call's own deadline: its wall time from when it began.
        assert!(deadlines[0] >= started + limits.wall_time && deadlines[0] <= ended);
    }
}
