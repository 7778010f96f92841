//! An image's inventory read off its plan: the base, every pinned Debian
//! package, every PyPI file and every local source, each with the layer it
//! went into. A plan already holds all of it (resolved inputs, with their
//! pins and content digests), so describing an image builds nothing.

use super::{BaseImage, BaseKind, DebPackage, Distro, Inventory, LocalKind, LocalSource, PypiFile, SbomError};
use crate::definition::{Base, Image};
use crate::oci::Digest;
use crate::plan::{NodeKind, Plan};

/// The inventory of `plan`'s image; `image_digest` when it is built.
pub fn inventory(plan: &Plan, image_digest: Option<&Digest>, created_epoch: u64) -> Result<Inventory, SbomError> {
    let mut inv = Inventory {
        image_name: plan.name.clone(),
        image_tag: plan.tag.clone(),
        image_digest: image_digest.map(|d| d.to_string()),
        created_epoch,
        base: None,
        debs: Vec::new(),
        pypi: Vec::new(),
        local: Vec::new(),
    };
    let top = &plan.top().image;
    inv.base = match &top.base {
        Base::Scratch | Base::Packages(_) => None,
        Base::Rootfs(r) => Some(BaseImage {
            kind: BaseKind::Rootfs,
            reference: relative(top, &r.path),
            digest: plan
                .layers
                .iter()
                .find(|n| n.kind == NodeKind::Rootfs && n.scope == plan.scopes.len() - 1)
                .and_then(|n| n.inputs.first())
                .and_then(|i| i.pin.clone()),
        }),
        Base::Oci { path, .. } => Some(BaseImage {
            kind: BaseKind::Oci,
            reference: relative(top, path),
            digest: plan
                .layers
                .iter()
                .find(|n| n.kind == NodeKind::Oci)
                .and_then(|n| n.inputs.first())
                .and_then(|i| i.pin.clone()),
        }),
        Base::Registry { reference } => Some(BaseImage {
            kind: BaseKind::Registry,
            reference: reference.clone(),
            digest: reference.rsplit_once('@').map(|(_, d)| d.to_string()),
        }),
        Base::Image(inner) => {
            Some(BaseImage { kind: BaseKind::Image, reference: relative(top, &inner.file), digest: None })
        }
    };
    for n in &plan.layers {
        let image = &plan.scopes[n.scope].image;
        if let Some(pins) = &n.pins {
            for p in &pins.packages {
                inv.debs.push(DebPackage {
                    name: p.name.clone(),
                    version: p.version.clone(),
                    architecture: p.architecture.clone(),
                    sha256: p.sha256.clone(),
                    distro: distro_of(image),
                    suite: Some(pins.suite().to_string()),
                    layer: n.name.clone(),
                });
            }
            continue;
        }
        for input in &n.inputs {
            let Some(pin) = &input.pin else { continue };
            match input.kind {
                "pypi" => {
                    let sha = pin.strip_prefix(Digest::PREFIX).unwrap_or(pin);
                    match PypiFile::from_file_name(&input.reference, sha, &n.name) {
                        Ok(f) => inv.pypi.push(f),
                        // Pinned by the definition only and never fetched here: the requirement names it.
                        Err(_) => match input.reference.split_once("==") {
                            Some((name, version)) => inv.pypi.push(PypiFile {
                                name: name.trim().to_string(),
                                version: version.trim().to_string(),
                                file: String::new(),
                                sha256: sha.to_string(),
                                layer: n.name.clone(),
                            }),
                            None => log::warn!(
                                "SBOM: `{}` (layer `{}`) is left out: no file name or exact version is known for it",
                                input.reference,
                                n.name
                            ),
                        },
                    }
                }
                "file" | "dir" | "archive" | "rocm" | "rocm_artifacts" => inv.local.push(LocalSource {
                    kind: match input.kind {
                        "file" => LocalKind::File,
                        "dir" => LocalKind::Dir,
                        "archive" => LocalKind::Archive,
                        _ => LocalKind::Rocm,
                    },
                    path: input.reference.clone(),
                    digest: pin.clone(),
                    layer: n.name.clone(),
                }),
                _ => {}
            }
        }
    }
    Ok(inv)
}

/// Ubuntu when the image's package sets are signed by Ubuntu's keyring.
pub fn distro_of(image: &Image) -> Distro {
    let ubuntu = image.first_package_set().is_some_and(|s| s.keyring.image_path().to_string_lossy().contains("ubuntu"));
    if ubuntu {
        Distro::Ubuntu
    } else {
        Distro::Debian
    }
}

fn relative(image: &Image, path: &std::path::Path) -> String {
    let dir = image.file.parent().unwrap_or(std::path::Path::new(""));
    path.strip_prefix(dir).unwrap_or(path).display().to_string()
}
