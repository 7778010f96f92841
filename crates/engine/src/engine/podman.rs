//! What Podman's service does differently from Docker, where quarry has to
//! act on it (the rest of the Docker API behaves the same, see docs/engines.md):
//!
//! - CDI device names are resolved only by Podman's own endpoint
//!   (`POST /libpod/containers/create`, Podman 4.1+); its Docker-compatible
//!   create refuses them as paths and ignores `DeviceRequests`. A container
//!   with CDI devices is therefore created through libpod: bollard speaks
//!   only the Docker API, so the compatible request it builds is redirected
//!   to that endpoint with the same container described as Podman's
//!   `SpecGenerator` (both answer `{"Id", "Warnings"}`).
//! - Podman asks for nofile/nproc limits of 1048576 by default (see
//!   `limits`); it prepares a container when it is attached, so refused
//!   limits surface there, not at start (see `session`).

use bollard::models::{ContainerCreateBody, ContainerCreateResponse};
use bollard::query_parameters::CreateContainerOptionsBuilder;
use bollard::Docker;
use serde_json::{json, Map, Value};

const LIBPOD_CREATE: &str = "/v4.0.0/libpod/containers/create";

/// Podman's `SpecGenerator` for the container `body` describes (the fields
/// quarry's containers use).
fn spec_generator(name: &str, body: &ContainerCreateBody) -> Value {
    let host = body.host_config.clone().unwrap_or_default();
    let mut s = Map::new();
    let mut put = |k: &str, v: Value| {
        s.insert(k.to_string(), v);
    };
    put("name", json!(name));
    put("image", json!(body.image));
    if let Some(cmd) = &body.cmd {
        put("command", json!(cmd));
    }
    if let Some(ep) = &body.entrypoint {
        put("entrypoint", json!(ep));
    }
    let env: Map<String, Value> =
        body.env.iter().flatten().filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.to_string(), json!(v)))).collect();
    put("env", Value::Object(env));
    put("labels", json!(body.labels.clone().unwrap_or_default()));
    if let Some(w) = &body.working_dir {
        put("work_dir", json!(w));
    }
    if let Some(u) = &body.user {
        put("user", json!(u));
    }
    put("terminal", json!(false));
    put("stdin", json!(false));
    // CDI names and plain device mappings alike are `path` entries ("src:dst:perms").
    let mut devices: Vec<Value> = host
        .devices
        .iter()
        .flatten()
        .map(|d| {
            let src = d.path_on_host.clone().unwrap_or_default();
            let dst = d.path_in_container.clone().unwrap_or_else(|| src.clone());
            json!({ "path": format!("{src}:{dst}:{}", d.cgroup_permissions.as_deref().unwrap_or("rwm")) })
        })
        .collect();
    for r in host.device_requests.iter().flatten().filter(|r| r.driver.as_deref() == Some("cdi")) {
        devices.extend(r.device_ids.iter().flatten().map(|id| json!({ "path": id })));
    }
    put("devices", json!(devices));
    if let Some(groups) = &host.group_add {
        put("groups", json!(groups));
    }
    let ns = |mode: &str| json!({ "nsmode": if mode.is_empty() { "private" } else { mode } });
    put("netns", ns(host.network_mode.as_deref().unwrap_or("none")));
    if let Some(ipc) = &host.ipc_mode {
        put("ipcns", ns(ipc));
    }
    if let Some(size) = host.shm_size {
        put("shm_size", json!(size));
    }
    if host.security_opt.iter().flatten().any(|o| o == "seccomp=unconfined") {
        put("seccomp_profile_path", json!("unconfined"));
    }
    if let Some(caps) = &host.cap_add {
        put("cap_add", json!(caps));
    }
    let rlimits: Vec<Value> = host
        .ulimits
        .iter()
        .flatten()
        // Podman's limits are unsigned: unlimited is RLIM_INFINITY, not -1.
        .map(|u| {
            let n = |v: Option<i64>| v.filter(|v| *v >= 0).map(|v| v as u64).unwrap_or(u64::MAX);
            json!({ "type": u.name, "soft": n(u.soft), "hard": n(u.hard) })
        })
        .collect();
    if !rlimits.is_empty() {
        put("r_limits", json!(rlimits));
    }
    let mounts: Vec<Value> = host
        .binds
        .iter()
        .flatten()
        .filter_map(|b| {
            let mut parts = b.split(':');
            let (src, dst) = (parts.next()?, parts.next()?);
            let mut options = vec!["rbind"];
            if parts.next() == Some("ro") {
                options.push("ro");
            }
            Some(json!({ "type": "bind", "source": src, "destination": dst, "options": options }))
        })
        .collect();
    if !mounts.is_empty() {
        put("mounts", json!(mounts));
    }
    Value::Object(s)
}

/// Create the container `body` describes through Podman's own endpoint
/// (see the module docs).
pub async fn create(
    docker: &Docker,
    name: &str,
    body: &ContainerCreateBody,
) -> Result<ContainerCreateResponse, bollard::errors::Error> {
    let payload = bytes::Bytes::from(spec_generator(name, body).to_string());
    let redirected = docker.clone().with_request_modifier(move |mut req| {
        if req.uri().path().ends_with("/containers/create") {
            // Libpod's routes need a version prefix of their own API (4.0.0, Podman 4's first).
            let mut parts = req.uri().clone().into_parts();
            parts.path_and_query = Some(hyper::http::uri::PathAndQuery::from_static(LIBPOD_CREATE));
            if let Ok(uri) = hyper::Uri::from_parts(parts) {
                *req.uri_mut() = uri;
                req.headers_mut().remove(hyper::header::CONTENT_LENGTH);
                *req.body_mut() = bollard::body_full(payload.clone());
            }
        }
        req
    });
    let opts = CreateContainerOptionsBuilder::default().name(name).build();
    redirected.create_container(Some(opts), body.clone()).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::{DeviceMapping, DeviceRequest, HostConfig, ResourcesUlimits};

    #[test]
    fn spec_generator_carries_cdi_names_groups_and_limits() {
        let body = ContainerCreateBody {
            image: Some("img:1".into()),
            cmd: Some(vec!["id".into()]),
            env: Some(vec!["A=1=2".into()]),
            host_config: Some(HostConfig {
                devices: Some(vec![DeviceMapping {
                    path_on_host: Some("/d/kfd".into()),
                    path_in_container: Some("/dev/kfd".into()),
                    cgroup_permissions: Some("rwm".into()),
                }]),
                device_requests: Some(vec![DeviceRequest {
                    driver: Some("cdi".into()),
                    device_ids: Some(vec!["amd.com/gpu=1".into()]),
                    ..Default::default()
                }]),
                group_add: Some(vec!["4243".into()]),
                ipc_mode: Some("host".into()),
                network_mode: Some("none".into()),
                security_opt: Some(vec!["seccomp=unconfined".into()]),
                ulimits: Some(vec![ResourcesUlimits {
                    name: Some("nofile".into()),
                    soft: Some(1024),
                    hard: Some(2048),
                }]),
                binds: Some(vec!["/h:/c:ro".into()]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let s = spec_generator("quarry-1", &body);
        assert_eq!(s["devices"], json!([{"path": "/d/kfd:/dev/kfd:rwm"}, {"path": "amd.com/gpu=1"}]));
        assert_eq!(s["env"]["A"], "1=2");
        assert_eq!(s["groups"], json!(["4243"]));
        assert_eq!(s["netns"]["nsmode"], "none");
        assert_eq!(s["ipcns"]["nsmode"], "host");
        assert_eq!(s["seccomp_profile_path"], "unconfined");
        assert_eq!(s["r_limits"], json!([{"type": "nofile", "soft": 1024, "hard": 2048}]));
        let unlimited = ResourcesUlimits { name: Some("memlock".into()), soft: Some(-1), hard: Some(-1) };
        let mut b = body.clone();
        b.host_config.as_mut().unwrap().ulimits = Some(vec![unlimited]);
        assert_eq!(spec_generator("q", &b)["r_limits"][0]["soft"], json!(u64::MAX));
        assert_eq!(s["mounts"][0]["options"], json!(["rbind", "ro"]));
    }
}
