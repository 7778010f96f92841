//! How a source's definition enters its layer's key: the fields that
//! shape the layer, by name (a file of its own to keep `source/mod.rs`
//! within its budget).

use crate::cache::key::KeyEncoder;
use crate::definition::{Source, SourceKind};

/// The definition fields of a source that shape the layer, by name. Host
/// paths are not among them: where a checkout or an artifacts directory
/// sits on a machine does not change the layer (its content is keyed), and
/// keys must agree between machines that share a cache.
pub(super) fn encode_source(h: &mut KeyEncoder, s: &Source) {
    h.str("dest", &s.dest).opt_str("owner", s.owner.map(|(u, g)| format!("{u}:{g}")).as_deref());
    h.list("remove", &s.remove);
    match &s.kind {
        SourceKind::Dir(d) => {
            h.str("kind", "dir");
            h.list("include", &d.include).list("exclude", &d.exclude).bool("devices", d.devices);
        }
        SourceKind::File(f) => {
            h.str("kind", "file");
            h.opt_str("mode", f.mode.map(|m| format!("{m:o}")).as_deref()).opt_digest("sha256", f.sha256.as_ref());
        }
        SourceKind::Archive(a) => {
            h.str("kind", "archive");
            h.opt_digest("sha256", a.sha256.as_ref()).u64("strip_components", a.strip_components as u64);
            h.map("map", &a.map).bool("devices", a.devices);
        }
        SourceKind::RocmArtifacts(r) | SourceKind::Rocm(r) => {
            let kind = if matches!(s.kind, SourceKind::Rocm(_)) { "rocm" } else { "rocm_artifacts" };
            h.str("kind", kind);
            h.list("components", &r.components).list("targets", &r.targets);
        }
        SourceKind::Pypi(p) => {
            h.str("kind", "pypi").str("requirement", &p.request.requirement).str("format", p.request.format.as_str());
            h.opt_str("platform", p.request.platform.as_deref()).opt_str("python", p.request.python.as_deref());
            h.opt_digest("sha256", p.sha256.as_ref()).str("site_packages", &p.site_packages).map("bin", &p.bin);
        }
        SourceKind::Wheels(w) => {
            h.str("kind", "wheels").opt_str("extra", w.extra.as_deref());
            h.str("site_packages", &w.site_packages).map("bin", &w.bin);
        }
        SourceKind::Remove => {
            h.str("kind", "remove");
        }
    }
}
