//! Images (spec 2.2): what a machine boots, for physical machines, virtual machines or
//! both, and the rules an image must satisfy. The serde form is the stored one; its
//! field names are those of the wire (spec 2.2), so a list query reads it as it reads
//! the answers.
//!
//! Plain values and rules only: which other images exist (`virtualizedImages`, unique
//! names) is the cloud service's to check, and boot paths are resolved against the images
//! directory there.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// How an image is provisioned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageType {
    /// The default: the machine keeps its disk between boots.
    #[default]
    Stateful,
    Stateless,
    /// A copy-on-write clone of the template `templateName`.
    LinkedClone,
}

impl ImageType {
    pub const ALL: [ImageType; 3] = [
        ImageType::Stateful,
        ImageType::Stateless,
        ImageType::LinkedClone,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ImageType::Stateful => "stateful",
            ImageType::Stateless => "stateless",
            ImageType::LinkedClone => "linkedclone",
        }
    }

    /// Case-insensitive.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|t| t.as_str().eq_ignore_ascii_case(text))
    }
}

/// The boot material of an image: paths relative to the images directory
/// (`[cloud] image_dir`), for the provisioner. Empty: not given.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Boot {
    pub kernel: String,
    pub initramfs: String,
    pub disk: String,
    /// A line the guest prints on its serial console once it is up: a VM is Running
    /// only when it has (`GUEST-READY` for the default guest image). Empty: running as
    /// soon as the hypervisor runs it.
    #[serde(rename = "readyLine")]
    pub ready_line: String,
}

impl Boot {
    /// The fields and their paths.
    pub fn paths(&self) -> [(&'static str, &str); 3] {
        [
            ("kernel", &self.kernel),
            ("initramfs", &self.initramfs),
            ("disk", &self.disk),
        ]
    }
}

/// An image as stored (without its id and version, which the store keeps).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Image {
    pub name: String,
    pub active: bool,
    pub hypervisor: bool,
    pub os_type: String,
    #[serde(rename = "type")]
    pub kind: ImageType,
    pub supports_physical_machine: bool,
    pub supports_virtual_machine: bool,
    /// Empty unless `kind` is `linkedclone`.
    pub template_name: String,
    pub features: Vec<String>,
    /// The ids of the images a hypervisor image can run (`[{id}]` on the wire).
    #[serde(with = "id_refs")]
    pub virtualized_images: Vec<String>,
    /// One object per provisioning manager (see [`MANAGERS`]).
    pub extensions: Map<String, Value>,
    pub boot: Boot,
}

/// `virtualizedImages` as stored: `[{"id": ...}]`.
mod id_refs {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    struct Ref {
        id: String,
    }

    pub fn serialize<S: Serializer>(ids: &[String], s: S) -> Result<S::Ok, S::Error> {
        let refs: Vec<Ref> = ids.iter().map(|id| Ref { id: id.clone() }).collect();
        refs.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
        Ok(Vec::<Ref>::deserialize(d)?
            .into_iter()
            .map(|r| r.id)
            .collect())
    }
}

/// How a request names another image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageKey {
    Id(String),
    Name(String),
}

impl fmt::Display for ImageKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImageKey::Id(id) => write!(f, "id '{id}'"),
            ImageKey::Name(name) => write!(f, "name '{name}'"),
        }
    }
}

/// What a creation or a change gives (`None`: not given). A change replaces each list
/// and object it gives as a whole.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ImageChange {
    pub name: Option<String>,
    pub active: Option<bool>,
    pub hypervisor: Option<bool>,
    pub os_type: Option<String>,
    pub kind: Option<ImageType>,
    pub supports_physical_machine: Option<bool>,
    pub supports_virtual_machine: Option<bool>,
    pub template_name: Option<String>,
    pub features: Option<Vec<String>>,
    /// As named; the cloud service turns them into ids.
    pub virtualized_images: Option<Vec<ImageKey>>,
    pub extensions: Option<Map<String, Value>>,
    pub boot: Option<Boot>,
    /// The version the client read (only on a change).
    pub version: Option<i64>,
}

/// A rule an image or a request breaks: the field, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub field: String,
    pub text: String,
}

impl Problem {
    pub fn new(field: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            text: text.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.text)
    }
}

/// The properties a provisioning manager requires of an image's `extensions.<manager>`:
/// those of every image, and those a hypervisor image adds.
#[derive(Debug, Clone, Copy)]
pub struct ManagerProperties {
    pub manager: &'static str,
    pub always: &'static [&'static str],
    pub hypervisor: &'static [&'static str],
}

/// The provisioning managers this service knows: only `xcat`, the sample of spec 2.2.
/// The properties of a manager not listed here are kept as given, unchecked.
pub const MANAGERS: &[ManagerProperties] = &[ManagerProperties {
    manager: "xcat",
    always: &["os", "architecture", "profile"],
    hypervisor: &["hvType", "hvGroupName", "vmGroupName"],
}];

/// The longest name, feature, OS type, template name or boot path.
pub const MAX_TEXT: usize = 255;
pub const MAX_PATH: usize = 4096;

/// [`simple_name_problem`]'s rule as a regular expression (for the OpenAPI document).
pub const SIMPLE_NAME_PATTERN: &str = "^[A-Za-z0-9._-]{1,128}$";

/// Why `name` is not a name of spec part 8 (image and principal names): letters,
/// digits, period, dash, underscore, 1 to 128 of them.
pub fn simple_name_problem(name: &str) -> Option<String> {
    let fits = !name.is_empty()
        && name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    (!fits).then(|| {
        format!("'{name}' must be 1 to 128 letters, digits, periods, dashes and underscores")
    })
}

/// Why `name` cannot name an image: part 8's rule, and not the form of an id (24
/// lower-case hex digits), so that `/rest/images/<id|name>` is never ambiguous.
pub fn name_problem(name: &str) -> Option<String> {
    simple_name_problem(name).or_else(|| {
        (name.len() == 24 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
            .then(|| format!("'{name}' has the form of an image id; choose another name"))
    })
}

/// Why `path` cannot be a boot path: it must be relative, without `..` components or
/// NUL, at most [`MAX_PATH`] bytes. (Whether it exists, and stays inside the images
/// directory through symbolic links, is checked where it is resolved.)
pub fn boot_path_problem(path: &str) -> Option<&'static str> {
    if path.contains('\0') {
        Some("must not contain NUL")
    } else if path.len() > MAX_PATH {
        Some("is too long")
    } else if path.starts_with('/') {
        Some("must be relative to the images directory, not absolute")
    } else if path.split('/').any(|part| part == "..") {
        Some("must not contain '..'")
    } else {
        None
    }
}

impl Image {
    /// The image a creation makes, or every problem of it (the references to other
    /// images excepted: the caller resolves `virtualized`, the ids they name).
    pub fn create(change: &ImageChange, virtualized: Vec<String>) -> Result<Image, Vec<Problem>> {
        let mut problems = Vec::new();
        if change.version.is_some() {
            problems.push(Problem::new(
                "version",
                "is set by the service and cannot be given on create",
            ));
        }
        for (field, missing) in [
            ("name", change.name.is_none()),
            ("hypervisor", change.hypervisor.is_none()),
            ("osType", change.os_type.is_none()),
        ] {
            if missing {
                problems.push(Problem::new(field, "required"));
            }
        }
        let mut image = Image {
            name: String::new(),
            active: true,
            hypervisor: false,
            os_type: String::new(),
            kind: ImageType::default(),
            supports_physical_machine: false,
            supports_virtual_machine: false,
            template_name: String::new(),
            features: Vec::new(),
            virtualized_images: Vec::new(),
            extensions: Map::new(),
            boot: Boot::default(),
        };
        image.apply(change, Some(virtualized));
        if problems.is_empty() {
            image.check()?;
            Ok(image)
        } else {
            // Report the rules the given fields break too, but not those of the missing.
            let more: Vec<Problem> = image.check().err().unwrap_or_default();
            for p in more {
                if !problems.iter().any(|q| q.field == p.field) {
                    problems.push(p);
                }
            }
            Err(problems)
        }
    }

    /// This image with `change` applied (`virtualized`: the ids of the images it names,
    /// when it names them), or every problem of the result.
    pub fn changed(
        &self,
        change: &ImageChange,
        virtualized: Option<Vec<String>>,
    ) -> Result<Image, Vec<Problem>> {
        let mut image = self.clone();
        image.apply(change, virtualized);
        image.check()?;
        Ok(image)
    }

    fn apply(&mut self, change: &ImageChange, virtualized: Option<Vec<String>>) {
        let c = change.clone();
        if let Some(v) = c.name {
            self.name = v;
        }
        if let Some(v) = c.active {
            self.active = v;
        }
        if let Some(v) = c.hypervisor {
            self.hypervisor = v;
        }
        if let Some(v) = c.os_type {
            self.os_type = v;
        }
        if let Some(v) = c.kind {
            self.kind = v;
        }
        if let Some(v) = c.supports_physical_machine {
            self.supports_physical_machine = v;
        }
        if let Some(v) = c.supports_virtual_machine {
            self.supports_virtual_machine = v;
        }
        if let Some(v) = c.template_name {
            self.template_name = v;
        }
        if let Some(v) = c.features {
            self.features = v;
        }
        if let Some(v) = virtualized {
            self.virtualized_images = v;
        }
        if let Some(v) = c.extensions {
            self.extensions = v;
        }
        if let Some(v) = c.boot {
            self.boot = v;
        }
    }

    /// Every rule of spec 2.2 (and of part 8 for the name) this image breaks.
    pub fn check(&self) -> Result<(), Vec<Problem>> {
        let mut problems = Vec::new();
        let mut problem = |field: &str, text: String| problems.push(Problem::new(field, text));
        if let Some(why) = name_problem(&self.name) {
            problem("name", why);
        }
        if self.os_type.trim().is_empty() || self.os_type.len() > MAX_TEXT {
            problem("osType", format!("must be 1 to {MAX_TEXT} characters"));
        }
        if !self.supports_physical_machine && !self.supports_virtual_machine {
            problem(
                "supportsPhysicalMachine",
                "an image must support a physical machine, a virtual machine or both: \
                 set supportsPhysicalMachine or supportsVirtualMachine to true"
                    .into(),
            );
        }
        if !self.template_name.is_empty() && self.kind != ImageType::LinkedClone {
            problem(
                "templateName",
                format!(
                    "may be set only when type is linkedclone, not {}",
                    self.kind.as_str()
                ),
            );
        }
        if self.template_name.len() > MAX_TEXT {
            problem("templateName", format!("at most {MAX_TEXT} characters"));
        }
        for (i, feature) in self.features.iter().enumerate() {
            if feature.is_empty() || feature.len() > MAX_TEXT {
                problem(
                    &format!("features[{i}]"),
                    format!("must be 1 to {MAX_TEXT} characters"),
                );
            }
        }
        if !self.virtualized_images.is_empty() && !self.hypervisor {
            problem(
                "virtualizedImages",
                "accepted only for a hypervisor image (hypervisor: true)".into(),
            );
        }
        for (manager, properties) in &self.extensions {
            let field = format!("extensions.{manager}");
            let Some(properties) = properties.as_object() else {
                problem(
                    &field,
                    "expected an object of the manager's properties".into(),
                );
                continue;
            };
            let Some(known) = MANAGERS.iter().find(|m| m.manager == manager) else {
                continue;
            };
            let hypervisor = if self.hypervisor {
                known.hypervisor
            } else {
                &[]
            };
            for required in known.always.iter().chain(hypervisor) {
                let given = properties
                    .get(*required)
                    .is_some_and(|v| !v.is_null() && v != "");
                if !given {
                    let image = if self.hypervisor {
                        "a hypervisor"
                    } else {
                        "an"
                    };
                    problem(
                        &format!("{field}.{required}"),
                        format!("required by the {manager} manager for {image} image"),
                    );
                }
            }
        }
        for (field, path) in self.boot.paths() {
            if let Some(why) = boot_path_problem(path) {
                problem(&format!("boot.{field}"), why.to_string());
            }
        }
        let ready = &self.boot.ready_line;
        if ready.len() > MAX_TEXT || ready.chars().any(char::is_control) {
            problem(
                "boot.readyLine",
                format!("must be one line of at most {MAX_TEXT} characters"),
            );
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn minimal() -> ImageChange {
        ImageChange {
            name: Some("centos-7".into()),
            hypervisor: Some(false),
            os_type: Some("linux".into()),
            supports_physical_machine: Some(true),
            ..ImageChange::default()
        }
    }

    fn fields(problems: Vec<Problem>) -> Vec<String> {
        problems.into_iter().map(|p| p.field).collect()
    }

    #[test]
    fn a_minimal_image_takes_the_defaults() {
        let image = Image::create(&minimal(), vec![]).unwrap();
        assert!(image.active);
        assert_eq!(image.kind, ImageType::Stateful);
        assert_eq!(image.template_name, "");
        let stored = serde_json::to_value(&image).unwrap();
        assert_eq!(stored["type"], "stateful");
        assert_eq!(stored["osType"], "linux");
        assert_eq!(stored["virtualizedImages"], json!([]));
        let back: Image = serde_json::from_value(stored).unwrap();
        assert_eq!(back, image);
    }

    #[test]
    fn creation_needs_name_hypervisor_and_os_type_and_refuses_a_version() {
        let problems = Image::create(
            &ImageChange {
                version: Some(3),
                supports_virtual_machine: Some(true),
                ..ImageChange::default()
            },
            vec![],
        )
        .unwrap_err();
        assert_eq!(
            fields(problems),
            ["version", "name", "hypervisor", "osType"]
        );
    }

    #[test]
    fn the_rules_of_an_image() {
        let cases: Vec<(&str, ImageChange)> = vec![
            (
                "name",
                ImageChange {
                    name: Some("a b".into()),
                    ..minimal()
                },
            ),
            (
                "name",
                ImageChange {
                    name: Some("".into()),
                    ..minimal()
                },
            ),
            (
                "name",
                ImageChange {
                    name: Some("0123456789abcdef01234567".into()),
                    ..minimal()
                },
            ),
            (
                "osType",
                ImageChange {
                    os_type: Some(" ".into()),
                    ..minimal()
                },
            ),
            (
                "supportsPhysicalMachine",
                ImageChange {
                    supports_physical_machine: Some(false),
                    ..minimal()
                },
            ),
            (
                "templateName",
                ImageChange {
                    template_name: Some("t".into()),
                    ..minimal()
                },
            ),
            (
                "features[1]",
                ImageChange {
                    features: Some(vec!["a".into(), "".into()]),
                    ..minimal()
                },
            ),
            (
                "extensions.xcat.profile",
                ImageChange {
                    extensions: Some(
                        json!({"xcat": {"os": "rhel", "architecture": "x86_64"}})
                            .as_object()
                            .cloned()
                            .unwrap(),
                    ),
                    ..minimal()
                },
            ),
            (
                "extensions.other",
                ImageChange {
                    extensions: json!({"other": 1}).as_object().cloned(),
                    ..minimal()
                },
            ),
            (
                "boot.kernel",
                ImageChange {
                    boot: Some(Boot {
                        kernel: "/boot/vmlinuz".into(),
                        ..Boot::default()
                    }),
                    ..minimal()
                },
            ),
            (
                "boot.disk",
                ImageChange {
                    boot: Some(Boot {
                        disk: "a/../../etc".into(),
                        ..Boot::default()
                    }),
                    ..minimal()
                },
            ),
        ];
        for (field, change) in cases {
            let problems = Image::create(&change, vec![]).unwrap_err();
            assert_eq!(fields(problems), [field], "{change:?}");
        }
        // virtualizedImages only for a hypervisor.
        let problems = Image::create(&minimal(), vec!["x".into()]).unwrap_err();
        assert_eq!(fields(problems), ["virtualizedImages"]);
        let hv = ImageChange {
            hypervisor: Some(true),
            ..minimal()
        };
        assert!(Image::create(&hv, vec!["x".into()]).is_ok());
    }

    #[test]
    fn known_managers_require_their_properties_and_others_are_kept() {
        let xcat = json!({"xcat": {"os": "rhel", "architecture": "x86_64", "profile": "compute"},
                          "mine": {"anything": [1]}});
        let plain = ImageChange {
            extensions: xcat.as_object().cloned(),
            ..minimal()
        };
        let image = Image::create(&plain, vec![]).unwrap();
        assert_eq!(image.extensions["mine"], json!({"anything": [1]}));
        let hv = ImageChange {
            hypervisor: Some(true),
            ..plain
        };
        assert_eq!(
            fields(Image::create(&hv, vec![]).unwrap_err()),
            [
                "extensions.xcat.hvType",
                "extensions.xcat.hvGroupName",
                "extensions.xcat.vmGroupName"
            ]
        );
    }

    #[test]
    fn a_change_is_checked_as_a_whole() {
        let linked = ImageChange {
            kind: Some(ImageType::LinkedClone),
            template_name: Some("gold".into()),
            ..minimal()
        };
        let image = Image::create(&linked, vec![]).unwrap();
        // Leaving linkedclone while the template name stays is refused...
        let change = ImageChange {
            kind: Some(ImageType::Stateless),
            ..ImageChange::default()
        };
        assert_eq!(
            fields(image.changed(&change, None).unwrap_err()),
            ["templateName"]
        );
        // ...and allowed when it is cleared.
        let change = ImageChange {
            template_name: Some(String::new()),
            ..change
        };
        assert_eq!(
            image.changed(&change, None).unwrap().kind,
            ImageType::Stateless
        );
    }

    #[test]
    fn boot_paths() {
        for ok in ["vmlinuz", "centos/7/initrd.img", "./disk.qcow2", "a..b/c"] {
            assert_eq!(boot_path_problem(ok), None, "{ok}");
        }
        for bad in ["/vmlinuz", "..", "a/../b", "a/..", "a\0b"] {
            assert!(boot_path_problem(bad).is_some(), "{bad:?}");
        }
    }

    #[test]
    fn types_parse_case_insensitively() {
        assert_eq!(
            ImageType::parse("LinkedClone"),
            Some(ImageType::LinkedClone)
        );
        assert_eq!(ImageType::parse("cloned"), None);
    }
}
