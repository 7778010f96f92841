//! The image config: the definition's `[config]` merged over the base's
//! (env by name, labels, ports and volumes added; entrypoint, cmd, workdir,
//! user and stop signal replaced when given), with the layers' diff_ids and
//! the history, stamped with SOURCE_DATE_EPOCH.

use crate::definition::Image;
use ocidir::oci_spec::image::{
    ConfigBuilder, History, HistoryBuilder, ImageConfiguration, ImageConfigurationBuilder, RootFsBuilder,
};
use std::collections::HashMap;

pub(super) fn rfc3339(epoch: u64) -> String {
    chrono::DateTime::from_timestamp(epoch as i64, 0)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// A history entry as quarry writes them.
pub(super) fn history(created_by: &str, epoch: u64) -> History {
    HistoryBuilder::default().created(rfc3339(epoch)).created_by(created_by).build().expect("all fields set")
}

/// Merge the base image's config with the definition's.
pub(super) fn image_config(
    image: &Image,
    base: Option<&ImageConfiguration>,
    layers: &[super::BuiltLayer],
    history: Vec<History>,
    epoch: u64,
) -> ImageConfiguration {
    let platform = &image.platform;
    let base_cfg = base.and_then(|b| b.config().clone());
    let mut env: Vec<(String, String)> = base_cfg
        .as_ref()
        .and_then(|c| c.env().clone())
        .unwrap_or_default()
        .into_iter()
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (kv, String::new()),
        })
        .collect();
    for (k, v) in &image.config.env {
        match env.iter_mut().find(|(ek, _)| ek == k) {
            Some(slot) => slot.1 = v.clone(),
            None => env.push((k.clone(), v.clone())),
        }
    }
    let mut labels: HashMap<String, String> = base_cfg.as_ref().and_then(|c| c.labels().clone()).unwrap_or_default();
    labels.extend(image.config.labels.clone());
    let c = &image.config;
    let pick = |ours: &Option<Vec<String>>, theirs: Option<Vec<String>>| ours.clone().or(theirs);
    let mut ports: Vec<String> = base_cfg.as_ref().and_then(|b| b.exposed_ports().clone()).unwrap_or_default();
    for p in &c.exposed_ports {
        let p = if p.contains('/') { p.clone() } else { format!("{p}/tcp") };
        if !ports.contains(&p) {
            ports.push(p);
        }
    }
    let mut volumes: Vec<String> = base_cfg.as_ref().and_then(|b| b.volumes().clone()).unwrap_or_default();
    for v in &c.volumes {
        if !volumes.contains(v) {
            volumes.push(v.clone());
        }
    }
    let mut cb = ConfigBuilder::default().env(env.into_iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>());
    if let Some(e) = pick(&c.entrypoint, base_cfg.as_ref().and_then(|b| b.entrypoint().clone())) {
        cb = cb.entrypoint(e);
    }
    // A new entrypoint resets an inherited cmd, as in Dockerfiles.
    let inherited_cmd = if c.entrypoint.is_some() { None } else { base_cfg.as_ref().and_then(|b| b.cmd().clone()) };
    if let Some(cmd) = pick(&c.cmd, inherited_cmd) {
        cb = cb.cmd(cmd);
    }
    if let Some(w) = c.workdir.clone().or(base_cfg.as_ref().and_then(|b| b.working_dir().clone())) {
        cb = cb.working_dir(w);
    }
    if let Some(u) = c.user.clone().or(base_cfg.as_ref().and_then(|b| b.user().clone())) {
        cb = cb.user(u);
    }
    if !labels.is_empty() {
        cb = cb.labels(labels);
    }
    if !ports.is_empty() {
        cb = cb.exposed_ports(ports);
    }
    if !volumes.is_empty() {
        cb = cb.volumes(volumes);
    }
    if let Some(s) = c.stop_signal.clone().or(base_cfg.as_ref().and_then(|b| b.stop_signal().clone())) {
        cb = cb.stop_signal(s);
    }
    let rootfs = RootFsBuilder::default()
        .typ("layers")
        .diff_ids(layers.iter().map(|l| l.diff_id.to_string()).collect::<Vec<_>>())
        .build()
        .expect("all fields set");
    let mut b = ImageConfigurationBuilder::default()
        .created(rfc3339(epoch))
        .architecture(platform.arch.oci())
        .os(platform.os.as_str())
        .config(cb.build().expect("all fields optional"))
        .rootfs(rootfs)
        .history(history);
    if let Some(v) = &platform.variant {
        b = b.variant(v.clone());
    }
    b.build().expect("all fields set")
}
