//! `quarry gc`: remove what killed quarry processes left in the engine:
//! containers labelled [`LABEL_MANAGED`], committed step images (they carry
//! the same label) and partial step images (tagged `quarry-step-PID-...`).
//! Objects of a quarry process that is still running are kept unless `all`;
//! so are those made by quarry on another machine (an engine reached over
//! TCP or ssh serves several), whose processes cannot be seen from here.

use super::{describe, Engine, EngineError, LABEL_HOST, LABEL_MANAGED, LABEL_PID};
use bollard::query_parameters::{
    ListContainersOptionsBuilder, ListImagesOptionsBuilder, RemoveContainerOptionsBuilder, RemoveImageOptionsBuilder,
};
use std::collections::HashMap;

#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct GcReport {
    pub containers_removed: Vec<String>,
    pub images_removed: Vec<String>,
    /// Objects kept because the quarry process that made them still runs.
    pub kept_live: usize,
    /// Objects kept because quarry on another machine made them.
    pub kept_other_hosts: usize,
}

/// Why an object stays: its process runs, or it belongs to another host.
fn keep(labels: Option<&HashMap<String, String>>, pid: &str, all: bool, report: &mut GcReport) -> bool {
    if all {
        return false;
    }
    let host = labels.and_then(|l| l.get(LABEL_HOST)).map(String::as_str).unwrap_or_default();
    if !host.is_empty() && host != super::host_name() {
        report.kept_other_hosts += 1;
        return true;
    }
    if alive(pid) {
        report.kept_live += 1;
        return true;
    }
    false
}

fn alive(pid: &str) -> bool {
    let Ok(n) = pid.parse::<i32>() else {
        return false;
    };
    if n as u32 == std::process::id() {
        return true;
    }
    rustix::process::Pid::from_raw(n).map(|p| rustix::process::test_kill_process(p).is_ok()).unwrap_or(false)
}

/// `quarry-step-PID-...` -> PID.
fn step_tag_pid(tag: &str) -> Option<&str> {
    tag.strip_prefix("quarry-step-")?.split('-').next()
}

impl Engine {
    pub fn gc(&self, all: bool) -> Result<GcReport, EngineError> {
        self.rt.block_on(async {
            let d = &self.docker;
            let mut report = GcReport::default();
            let filters: HashMap<&str, Vec<String>> = HashMap::from([("label", vec![format!("{LABEL_MANAGED}=true")])]);
            let containers = d
                .list_containers(Some(ListContainersOptionsBuilder::default().all(true).filters(&filters).build()))
                .await
                .map_err(|e| EngineError::api("listing containers", e))?;
            for c in containers {
                let id = c.id.unwrap_or_default();
                let pid = c.labels.as_ref().and_then(|l| l.get(LABEL_PID)).cloned().unwrap_or_default();
                if keep(c.labels.as_ref(), &pid, all, &mut report) {
                    continue;
                }
                let opts = RemoveContainerOptionsBuilder::default().force(true).v(true).build();
                match d.remove_container(&id, Some(opts)).await {
                    Ok(()) => report.containers_removed.push(id),
                    Err(e) => log::warn!("cannot remove container {id}: {}", describe(&e)),
                }
            }
            let images = d
                .list_images(Some(ListImagesOptionsBuilder::default().all(false).build()))
                .await
                .map_err(|e| EngineError::api("listing images", e))?;
            for img in images {
                // A labelled (committed) image is removed by id; a partial one by its tags.
                let mut targets: Vec<(String, String)> = Vec::new();
                let labels = Some(&img.labels);
                if img.labels.get(LABEL_MANAGED).map(|v| v == "true").unwrap_or(false) {
                    let pid = img.labels.get(LABEL_PID).cloned().unwrap_or_default();
                    if img.repo_tags.iter().all(|t| t == "<none>:<none>" || step_tag_pid(t).is_some()) {
                        targets.push((img.id.clone(), pid));
                    }
                }
                for t in &img.repo_tags {
                    if let Some(pid) = step_tag_pid(t) {
                        targets.push((t.clone(), pid.to_string()));
                    }
                }
                for (target, pid) in targets {
                    if keep(labels, &pid, all, &mut report) {
                        continue;
                    }
                    let opts = RemoveImageOptionsBuilder::default().force(false).build();
                    match d.remove_image(&target, Some(opts), None).await {
                        Ok(_) => report.images_removed.push(target),
                        Err(e) if super::is_not_found(&e) => {}
                        Err(e) => log::warn!("cannot remove image {target}: {}", describe(&e)),
                    }
                }
            }
            Ok(report)
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn step_tags() {
        assert_eq!(super::step_tag_pid("quarry-step-123-ab0:partial"), Some("123"));
        assert_eq!(super::step_tag_pid("debian:12"), None);
    }
}
