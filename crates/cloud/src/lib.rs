//! The cloud layer beside the scheduler (ARCHITECTURE: "Where the cloud layer will
//! live"). This first step holds the images: [`Images`] owns the stored collection
//! `images` (spec 2.2), and [`boot::resolve`] is the one way an image's boot paths become
//! files, always inside the images directory (`[cloud] image_dir`). VMs and provisioners
//! come next.
//!
//! Every call blocks on the store; async callers use `spawn_blocking`.

pub mod boot;
pub mod images;

pub use images::{CloudError, IMAGES, Images, StoredImage};
