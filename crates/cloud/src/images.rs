//! The stored images: documents of the collection [`IMAGES`], each under an id the
//! service assigns, with a unique name and a `version`. [`Images`] is the only code that
//! reads or writes them.
//!
//! Writes are serialized (one lock), so the checks that read other images (the names in
//! `virtualizedImages`, the users of an image being deleted) see what the write applies
//! to. A cloud has tens of images, not millions: lists run the query over every image
//! in memory, with the evaluator that defines list answers ([`ListQuery::run_positions`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use drover_domain::image::{Image, ImageChange, ImageKey, Problem};
use drover_query::{ListQuery, Page};
use drover_store::{DocumentStore, StoreError, Write};

use crate::catalog::{Catalog, Stored};

pub const IMAGES: &str = "images";

/// Why a lookup or a change was refused; the summary and reasons are what a client is
/// shown.
#[derive(Debug, thiserror::Error)]
pub enum CloudError {
    #[error("{summary}: {}", reasons.join("; "))]
    Invalid {
        summary: String,
        reasons: Vec<String>,
    },
    #[error("{0}")]
    NotFound(String),
    /// A taken name, a stale version, an image or template in use; `advice`, when
    /// given, says what to do.
    #[error("{summary}: {reason}")]
    Conflict {
        summary: String,
        reason: String,
        advice: Option<String>,
    },
    /// A stored document this service cannot read (a bug, or a hand-edited store).
    #[error("unreadable stored document {id}: {reason}")]
    Unreadable { id: String, reason: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

pub type Result<T, E = CloudError> = std::result::Result<T, E>;

/// An image with the id and version the store keeps.
pub type StoredImage = Stored<Image>;

/// The service of the stored images. Blocking.
pub struct Images {
    catalog: Catalog,
    /// Where boot paths are resolved ([`crate::boot::resolve`]).
    image_dir: PathBuf,
}

impl Images {
    /// Ensures the collection; new ids continue after the last stored one.
    pub fn open(store: Arc<dyn DocumentStore>, image_dir: PathBuf) -> Result<Self> {
        Ok(Self {
            catalog: Catalog::open(store, IMAGES, "image")?,
            image_dir,
        })
    }

    /// The images directory (`[cloud] image_dir`).
    pub fn image_dir(&self) -> &Path {
        &self.image_dir
    }

    /// The images `query` selects, sorted and paged, and how many match.
    pub fn list(&self, query: &ListQuery) -> Result<Page<StoredImage>> {
        self.catalog.list(query)
    }

    /// The image whose id, else name, is `key`.
    pub fn get(&self, key: &str) -> Result<StoredImage> {
        self.catalog.get(key)
    }

    /// Stores a new image under a new id; a taken name is a conflict.
    pub fn create(&self, change: &ImageChange) -> Result<StoredImage> {
        let summary = "The image was not created";
        let mut ids = self.catalog.lock();
        let (virtualized, missing) = self.resolve_keys(change, None)?;
        let image = checked(
            summary,
            Image::create(change, virtualized.unwrap_or_default()),
            missing,
        )?;
        let id = ids.next_id();
        let insert = self.catalog.put(&id, &image.name, &image, None);
        self.catalog.commit(&[insert], summary, &image.name)?;
        drop(ids);
        self.get(&id)
    }

    /// Applies `change` to the image `key`. A `version` other than the stored one, or a
    /// taken name, is a conflict.
    pub fn modify(&self, key: &str, change: &ImageChange) -> Result<StoredImage> {
        let summary = format!("The image {key} was not changed");
        let _writes = self.catalog.lock();
        let current = self.get(key)?;
        self.catalog
            .check_version(change.version, current.version, &summary)?;
        let (virtualized, missing) = self.resolve_keys(change, Some(&current.id))?;
        let image = checked(
            &summary,
            current.value.changed(change, virtualized),
            missing,
        )?;
        let update = self
            .catalog
            .put(&current.id, &image.name, &image, Some(current.version));
        self.catalog.commit(&[update], &summary, &image.name)?;
        self.get(&current.id)
    }

    /// Deletes the image `key`, unless another image uses it, or what `users_elsewhere`
    /// names (the VMs booted from it, described in a phrase) is not empty.
    pub fn remove(
        &self,
        key: &str,
        users_elsewhere: impl FnOnce(&StoredImage) -> Option<String>,
    ) -> Result<()> {
        let summary = format!("The image {key} was not deleted");
        let _writes = self.catalog.lock();
        let current = self.get(key)?;
        let users: Vec<String> = self
            .catalog
            .all::<Image>()?
            .into_iter()
            .filter(|other| other.value.virtualized_images.contains(&current.id))
            .map(|other| other.value.name)
            .collect();
        if let Some(users) = users_elsewhere(&current) {
            return Err(CloudError::Conflict {
                summary,
                reason: format!("the image is in use: {users}; remove them first"),
                advice: None,
            });
        }
        // Service templates will also count here (#28).
        if !users.is_empty() {
            return Err(CloudError::Conflict {
                summary,
                reason: format!(
                    "the image is in use: the virtualizedImages of {} name it; remove it there first",
                    users.join(", ")
                ),
                advice: None,
            });
        }
        self.catalog.store.write(&[Write::Delete {
            collection: IMAGES.into(),
            id: current.id,
            expected_version: Some(current.version),
        }])?;
        Ok(())
    }

    /// The ids of the images `change.virtualized_images` names (`None`: not given), and
    /// a problem for each entry that names no image. `itself`: the id of the image being
    /// changed, which cannot name itself.
    fn resolve_keys(
        &self,
        change: &ImageChange,
        itself: Option<&str>,
    ) -> Result<(Option<Vec<String>>, Vec<Problem>)> {
        let Some(keys) = &change.virtualized_images else {
            return Ok((None, Vec::new()));
        };
        let mut ids: Vec<String> = Vec::new();
        let mut problems = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            let found = match key {
                ImageKey::Id(id) => self.catalog.store.get(IMAGES, id)?,
                ImageKey::Name(name) => self.catalog.store.get_by_name(IMAGES, name)?,
            };
            let field = format!("virtualizedImages[{i}]");
            match found {
                None => problems.push(Problem::new(field, format!("no image with {key}"))),
                Some(d) if Some(d.id.as_str()) == itself => {
                    problems.push(Problem::new(field, "an image cannot virtualize itself"))
                }
                Some(d) if !ids.contains(&d.id) => ids.push(d.id),
                Some(_) => {}
            }
        }
        Ok((Some(ids), problems))
    }
}

/// The image `made`, unless it or the references to other images (`missing`) have
/// problems: then all of them in one refusal.
fn checked(
    summary: &str,
    made: Result<Image, Vec<Problem>>,
    mut missing: Vec<Problem>,
) -> Result<Image> {
    match made {
        Ok(image) if missing.is_empty() => Ok(image),
        Ok(_) => Err(invalid(summary, missing)),
        Err(problems) => {
            missing.extend(problems);
            Err(invalid(summary, missing))
        }
    }
}

fn invalid(summary: &str, problems: Vec<Problem>) -> CloudError {
    CloudError::Invalid {
        summary: summary.into(),
        reasons: problems.iter().map(Problem::to_string).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_store::SqliteStore;

    fn open() -> (tempfile::TempDir, Images) {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SqliteStore::open(&dir.path().join("d.db")).unwrap());
        let images = Images::open(store, dir.path().join("images")).unwrap();
        (dir, images)
    }

    fn change(name: &str) -> ImageChange {
        ImageChange {
            name: Some(name.into()),
            hypervisor: Some(false),
            os_type: Some("linux".into()),
            supports_physical_machine: Some(true),
            ..ImageChange::default()
        }
    }

    #[test]
    fn create_modify_and_the_users_of_an_image() {
        let (_dir, images) = open();
        let guest = images.create(&change("guest")).unwrap();
        assert_eq!(guest.version, 1);
        assert!(matches!(
            images.create(&change("guest")),
            Err(CloudError::Conflict { .. })
        ));
        let host = images
            .create(&ImageChange {
                hypervisor: Some(true),
                virtualized_images: Some(vec![ImageKey::Name("guest".into())]),
                ..change("host")
            })
            .unwrap();
        assert_eq!(
            host.value.virtualized_images,
            std::slice::from_ref(&guest.id)
        );
        assert!(host.id > guest.id);
        let missing = images
            .create(&ImageChange {
                hypervisor: Some(true),
                virtualized_images: Some(vec![
                    ImageKey::Name("nope".into()),
                    ImageKey::Id("0".into()),
                ]),
                ..change("other")
            })
            .unwrap_err();
        let CloudError::Invalid { reasons, .. } = missing else {
            panic!("{missing:?}")
        };
        assert_eq!(reasons.len(), 2, "{reasons:?}");

        // In use: not deleted.
        assert!(matches!(
            images.remove("guest", |_| None),
            Err(CloudError::Conflict { reason, .. }) if reason.contains("host")
        ));
        // A stale version is a conflict; the stored one changes the image.
        let stale = ImageChange {
            version: Some(7),
            ..ImageChange::default()
        };
        assert!(matches!(
            images.modify("host", &stale),
            Err(CloudError::Conflict { .. })
        ));
        let freed = ImageChange {
            version: Some(1),
            virtualized_images: Some(vec![]),
            ..ImageChange::default()
        };
        assert_eq!(images.modify(&host.id, &freed).unwrap().version, 2);
        images.remove("guest", |_| None).unwrap();
        assert!(matches!(images.get("guest"), Err(CloudError::NotFound(_))));
    }

    #[test]
    fn lists_run_the_query_over_id_and_version_too() {
        let (_dir, images) = open();
        for name in ["b", "a", "c"] {
            images.create(&change(name)).unwrap();
        }
        let query = ListQuery {
            filter: drover_query::Filter::parse_str(
                r#"{"version": 1, "name": {"$ne": "c"}}"#,
                &drover_domain::dates::WireDates::utc(),
            )
            .unwrap(),
            sort: drover_query::Sort::parse_str(r#"{"name": 1}"#).unwrap(),
            ..ListQuery::default()
        };
        let page = images.list(&query).unwrap();
        assert_eq!(page.total, 2);
        let names: Vec<&str> = page.items.iter().map(|i| i.value.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
    }
}
