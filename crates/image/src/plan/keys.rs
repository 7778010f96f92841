//! The cache keys of a plan's nodes, each an explicit encoding of named
//! fields (see `store::key`). A node has its *own* key (what the layer
//! itself is made of) and its *chained* key (own key + the chained key of
//! the node below + the layer format), so a change anywhere rebuilds that
//! layer and everything above it. Bump a schema's version whenever what it
//! encodes changes meaning.

use crate::cache::key::{Key, KeyEncoder};
use crate::definition::{ConfigDef, PackageSet, PackagesBase, Platform, RunDef};
use crate::distro::pins::PackagePins;
use crate::oci::Digest;

/// Where every image's chain starts: its platform and the build's epoch.
pub fn chain_start(platform: &Platform, source_date_epoch: u64) -> Key {
    let mut k = KeyEncoder::new("chain-start", 1);
    k.str("platform", &platform.to_string()).u64("source_date_epoch", source_date_epoch);
    k.finish()
}

/// A layer's chained key.
pub fn chained(prev: &Key, own: &Key, format: &str) -> Key {
    let mut k = KeyEncoder::new("chain", 1);
    k.key("prev", prev).key("own", own).str("format", format);
    k.finish()
}

/// Where an image built on another definition continues the chain: the
/// base image's last key and its config (which steps above it run with).
pub fn image_base(start: &Key, base_last: &Key, base_config: &Key) -> Key {
    let mut k = KeyEncoder::new("image-base", 1);
    k.key("start", start).key("base", base_last).key("config", base_config);
    k.finish()
}

/// An image definition's `[config]`, field by field.
pub fn config(c: &ConfigDef) -> Key {
    let mut k = KeyEncoder::new("image-config", 1);
    k.map("env", &c.env);
    match &c.entrypoint {
        Some(e) => k.str("entrypoint", "some").list("entrypoint", e),
        None => k.str("entrypoint", "none"),
    };
    match &c.cmd {
        Some(e) => k.str("cmd", "some").list("cmd", e),
        None => k.str("cmd", "none"),
    };
    k.opt_str("workdir", c.workdir.as_deref()).opt_str("user", c.user.as_deref());
    k.map("labels", &c.labels).list("exposed_ports", &c.exposed_ports).list("volumes", &c.volumes);
    k.opt_str("stop_signal", c.stop_signal.as_deref());
    k.finish()
}

/// The pinned files, and the index Priority apt's automatic marks follow.
fn encode_pins(k: &mut KeyEncoder, pins: &PackagePins) {
    k.u64("packages", pins.packages.len() as u64);
    for p in &pins.packages {
        k.str("package", &p.name).str("sha256", &p.sha256).opt_str("priority", p.priority.as_deref());
    }
    k.opt_str("below", pins.below.as_deref());
}

/// Where and how the scripts run: the sandbox's rules version (a fix to
/// them rebuilds), and what the image's apt sources name: each suite's
/// mirror, the components, the keyring.
fn encode_configure(k: &mut KeyEncoder, set: &PackageSet, mirrors: &[(String, String)]) {
    k.str("configure", set.configure.as_str()).str("scripts", crate::distro::configure::RULES);
    k.u64("suites", mirrors.len() as u64);
    for (suite, mirror) in mirrors {
        k.str("suite", suite).str("mirror", mirror);
    }
    k.list("components", &set.components).str("keyring", &set.keyring.image_path().to_string_lossy());
}

/// A `[base.packages]` rootfs: the pinned files and what the base adds.
/// The quarry version is in it: how packages are unpacked and the dpkg
/// database written may change between versions.
pub fn packages_base(base: &PackagesBase, pins: &PackagePins, mirrors: &[(String, String)]) -> Key {
    let mut k = KeyEncoder::new("packages-base", 3);
    k.str("quarry", env!("CARGO_PKG_VERSION")).str("architecture", &base.architecture);
    k.str("variant", base.variant.as_str());
    encode_configure(&mut k, base, mirrors);
    encode_pins(&mut k, pins);
    k.u64("groups", base.groups.len() as u64);
    for (name, gid) in &base.groups {
        k.str("group", name).u64("gid", *gid as u64);
    }
    k.u64("users", base.users.len() as u64);
    for u in &base.users {
        k.str("user", &u.name).u64("uid", u.uid as u64).opt_str("gid", u.gid.map(|g| g.to_string()).as_deref());
        k.list("groups", &u.groups).opt_str("shell", u.shell.as_deref()).opt_str("home", u.home.as_deref());
        k.bool("sudo", u.sudo);
    }
    k.finish()
}

/// A packages layer: the pinned files over the dpkg status below.
pub fn packages_layer(name: &str, set: &PackageSet, pins: &PackagePins, mirrors: &[(String, String)]) -> Key {
    let mut k = KeyEncoder::new("packages-layer", 3);
    k.str("quarry", env!("CARGO_PKG_VERSION")).str("name", name).str("architecture", &set.architecture);
    encode_configure(&mut k, set, mirrors);
    encode_pins(&mut k, pins);
    k.finish()
}

/// A step: its script and settings, the image config it runs with, and the
/// content of every input.
pub fn step(name: &str, run: &RunDef, image: &ConfigDef, inputs: &[(String, Digest)]) -> Key {
    let mut k = KeyEncoder::new("step", 1);
    k.str("name", name).str("script", &run.script).bool("network", run.network).map("env", &run.env);
    k.opt_str("user", run.user.as_deref()).opt_str("workdir", run.workdir.as_deref());
    match &run.shell {
        Some(s) => k.str("shell", "some").list("shell", s),
        None => k.str("shell", "none"),
    };
    k.map("image_env", &image.env).opt_str("image_user", image.user.as_deref());
    k.opt_str("image_workdir", image.workdir.as_deref());
    for (dest, content) in inputs {
        k.str("input", dest).digest("content", content);
    }
    k.finish()
}

/// An OCI layout base, by its manifest.
pub fn oci_base(manifest: &Digest) -> Key {
    let mut k = KeyEncoder::new("oci-base", 1);
    k.digest("manifest", manifest);
    k.finish()
}

/// A registry base, by its pinned reference (which holds the digest).
pub fn registry_base(reference: &str, platform: &Platform) -> Key {
    let mut k = KeyEncoder::new("registry-base", 1);
    k.str("reference", reference).str("platform", &platform.to_string());
    k.finish()
}
