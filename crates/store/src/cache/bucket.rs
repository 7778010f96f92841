//! The cache's named buckets: what kind of thing an entry is, where the
//! local tier keeps it, and whether a registry tier shares it.

/// A kind of cached thing (in JSON: its [`Bucket::name`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Bucket {
    /// Packed layers: a record per key, the blob in the content store.
    Layers,
    /// Pulled base images' manifests, configs and layers (content by digest).
    Images,
    /// A kernel build's output tree, by the build's key.
    Kernels,
    /// Built (labelled, repaired) wheels of one `wheel build`, by its key.
    Wheels,
    /// A compiler cache directory (ccache), by image, targets and project.
    CompilerObjects,
    /// Pinned tools quarry runs (its patchelf), by the program's sha256.
    Tools,
    /// Files from Python package indexes, by their sha256.
    Pypi,
    /// Debian packages, by their sha256.
    Debs,
    /// Debian archive indexes, by their sha256.
    Indexes,
    /// quarry's own bookkeeping (stat memos, where registry blobs were seen).
    Notes,
}

/// How a bucket's entries sit in its local directory (what `cache du` and
/// `cache prune` walk).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// A record per key naming a blob of the content store (layers).
    Records,
    /// Blobs of the content store no record names (pulled images).
    Blobs,
    /// One file or directory per entry.
    Entries,
    /// A directory per kind, an entry per name in it (notes).
    Kinds,
}

impl Bucket {
    pub const ALL: [Bucket; 10] = [
        Bucket::Layers,
        Bucket::Images,
        Bucket::Kernels,
        Bucket::Wheels,
        Bucket::CompilerObjects,
        Bucket::Tools,
        Bucket::Pypi,
        Bucket::Debs,
        Bucket::Indexes,
        Bucket::Notes,
    ];

    /// The bucket's directory in the local tier.
    pub(crate) fn dir(self) -> &'static str {
        match self {
            Bucket::Layers => "layers",
            // Content lives in the OCI blob directory; see `Local`.
            Bucket::Images => "blobs",
            Bucket::Kernels => "kernels",
            Bucket::Wheels => "wheels",
            Bucket::CompilerObjects => "ccache",
            Bucket::Tools => "tools",
            Bucket::Pypi => "pypi",
            Bucket::Debs => "debs",
            Bucket::Indexes => "indexes",
            Bucket::Notes => "notes",
        }
    }

    /// How its entries sit in [`Bucket::dir`].
    pub(crate) fn shape(self) -> Shape {
        match self {
            Bucket::Layers => Shape::Records,
            Bucket::Images => Shape::Blobs,
            Bucket::Notes => Shape::Kinds,
            Bucket::Kernels
            | Bucket::Wheels
            | Bucket::CompilerObjects
            | Bucket::Tools
            | Bucket::Pypi
            | Bucket::Debs
            | Bucket::Indexes => Shape::Entries,
        }
    }

    /// The name people and `--json` see.
    pub fn name(self) -> &'static str {
        match self {
            Bucket::Layers => "layers",
            Bucket::Images => "images",
            Bucket::Kernels => "kernel-outputs",
            Bucket::Wheels => "wheels",
            Bucket::CompilerObjects => "compiler-objects",
            Bucket::Tools => "tools",
            Bucket::Pypi => "pypi-files",
            Bucket::Debs => "debs",
            Bucket::Indexes => "indexes",
            Bucket::Notes => "notes",
        }
    }

    /// The tag prefix of the bucket's entries in a registry tier; None for
    /// buckets that are not shared (their content comes pinned from its
    /// own source, or is this machine's bookkeeping).
    pub fn tag_prefix(self) -> Option<&'static str> {
        match self {
            Bucket::Layers => Some("layer"),
            Bucket::Kernels => Some("kernel"),
            Bucket::Wheels => Some("wheel"),
            Bucket::CompilerObjects => Some("ccache"),
            _ => None,
        }
    }

    /// Whether an entry's content may change under the same key (a
    /// compiler cache grows with every build); others are written once.
    pub fn mutable(self) -> bool {
        self == Bucket::CompilerObjects
    }

    pub fn from_tag_prefix(p: &str) -> Option<Bucket> {
        Bucket::ALL.into_iter().find(|b| b.tag_prefix() == Some(p))
    }
}

impl serde::Serialize for Bucket {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl std::fmt::Display for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_buckets_have_distinct_tag_prefixes() {
        let shared: Vec<Bucket> = Bucket::ALL.into_iter().filter(|b| b.tag_prefix().is_some()).collect();
        assert_eq!(shared, [Bucket::Layers, Bucket::Kernels, Bucket::Wheels, Bucket::CompilerObjects]);
        for b in shared {
            assert_eq!(Bucket::from_tag_prefix(b.tag_prefix().unwrap()), Some(b));
        }
        let dirs: std::collections::BTreeSet<&str> = Bucket::ALL.iter().map(|b| b.dir()).collect();
        assert_eq!(dirs.len(), Bucket::ALL.len(), "one directory per bucket");
    }
}
