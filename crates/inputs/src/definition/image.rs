//! A validated image definition: its base, its layers in order, its config
//! and platform.

use super::layer::Layer;
use super::packages::PackagesBase;
use crate::oci::Digest;
use crate::platform::Platform;
use std::collections::BTreeMap;
use std::path::PathBuf;

pub use super::raw::ConfigDef;

#[derive(Debug, Clone, PartialEq)]
pub struct Image {
    pub file: PathBuf,
    pub name: String,
    pub tag: String,
    pub base: Base,
    pub layers: Vec<Layer>,
    pub config: ConfigDef,
    pub platform: Platform,
    /// Effective parameter values (defaults overridden by --set).
    pub params: BTreeMap<String, String>,
    /// `[family]`: the images `quarry build` makes of this definition.
    pub family: Option<Family>,
}

/// One image per value of `param` (a GPU target list, typically): the
/// members share every layer their value does not change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Family {
    pub param: String,
    pub values: Vec<String>,
}

/// Where an image's base comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Base {
    Scratch,
    /// A rootfs tarball turned into one normalized base layer.
    Rootfs(RootfsBase),
    /// An OCI layout directory or OCI archive; layers reused as they are.
    Oci {
        path: PathBuf,
        reference: Option<String>,
    },
    /// A registry reference pulled by digest.
    Registry {
        reference: String,
    },
    /// A rootfs made from a Debian/Ubuntu archive's packages.
    Packages(Box<PackagesBase>),
    /// Another image definition (`base = { image = "x.toml" }`), loaded with
    /// this image's parameters; built through the cache and used as the base.
    Image(Box<Image>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct RootfsBase {
    pub path: PathBuf,
    pub sha256: Option<Digest>,
    pub devices: bool,
}

impl Image {
    /// What `quarry lock` pins in this image's own lock: its packages base,
    /// its packages layers and its PyPI files.
    pub fn has_own_pins(&self) -> bool {
        matches!(self.base, Base::Packages(_))
            || self.layers.iter().any(|l| l.packages().is_some() || !l.pypi_requests().is_empty())
    }

    /// The package set whose archive a lock reads first: the base's, else
    /// the first packages layer's.
    pub fn first_package_set(&self) -> Option<&super::packages::PackageSet> {
        match &self.base {
            Base::Packages(p) => Some(&p.set),
            _ => self.layers.iter().find_map(|l| l.packages()),
        }
    }

    /// The image at the bottom of a chain of `image` bases (itself when its
    /// base is of another kind): the one whose base `quarry lock` pins.
    pub fn root_image(&self) -> &Image {
        match &self.base {
            Base::Image(inner) => inner.root_image(),
            _ => self,
        }
    }
}
