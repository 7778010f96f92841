//! A Kubernetes Indexed Job per group of cells (`completionMode: Indexed`,
//! `completions`, `parallelism`; each pod gets `JOB_COMPLETION_INDEX`),
//! resources as limits (`amd.com/gpu`, the ROCm device plugin's resource,
//! which mounts only the allocated GPUs), the matrix file from a ConfigMap
//! and the registry's credentials from a docker-config secret. Each index
//! may fail on its own without stopping the others (`backoffLimit` is the
//! number of cells). Paths the matrix names must exist in the runner image
//! (or use a `pypi` source); the pod reaches an engine the usual way
//! (`DOCKER_HOST`, a socket).

use super::{groups, yaml_str, EmitOptions};
use crate::matrix::definition::Matrix;
use crate::matrix::plan::MatrixPlan;

/// Slurm's memory spelling (`4G`: GiB; no suffix: MiB) as a Kubernetes
/// quantity (`4Gi`); the matrix definition checked the spelling.
fn quantity(memory: &str) -> String {
    let m = memory.trim();
    match m.chars().last() {
        Some(c @ ('K' | 'M' | 'G' | 'T')) => format!("{}{c}i", &m[..m.len() - 1]),
        _ => format!("{m}Mi"),
    }
}

/// A Kubernetes name from a matrix name: lowercase, `-` for anything else.
fn dns_name(s: &str) -> String {
    let n: String = s.to_ascii_lowercase().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    n.trim_matches('-').chars().take(50).collect()
}

pub(super) fn manifest(m: &Matrix, plan: &MatrixPlan, o: &EmitOptions) -> String {
    let name = dns_name(&m.name);
    let file = std::path::Path::new(&o.matrix_path).file_name().unwrap_or_default().to_string_lossy().into_owned();
    let matrix_text = std::fs::read_to_string(&m.file).unwrap_or_default();
    let mut s = format!(
        "# quarry matrix emit --format kubernetes: {} of {} cells of `{}`\n",
        plan.to_run,
        plan.cells.len(),
        m.name
    );
    s.push_str(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: quarry-matrix-{name}\ndata:\n  {}: |\n",
        yaml_str(&file)
    ));
    for line in matrix_text.lines() {
        s.push_str(&format!("    {line}\n"));
    }
    for (i, (needs, ids)) in groups(plan).iter().enumerate() {
        let n = ids.len();
        let parallel = o.parallel.unwrap_or(n).min(n);
        // Under `requests:` and `limits:` (14 spaces), not beside them.
        let mut limits = format!(
            "              cpu: {}\n              memory: {}\n",
            yaml_str(&needs.cpus.to_string()),
            yaml_str(&quantity(&needs.memory))
        );
        if needs.gpus > 0 {
            limits.push_str(&format!("              amd.com/gpu: {}\n", yaml_str(&needs.gpus.to_string())));
        }
        s.push_str(&format!(
            "---
apiVersion: batch/v1
kind: Job
metadata:
  name: quarry-{name}-{i}
  labels:
    app.kubernetes.io/managed-by: quarry
spec:
  completionMode: Indexed
  completions: {n}
  parallelism: {parallel}
  backoffLimit: {n}
  template:
    metadata:
      labels:
        app.kubernetes.io/managed-by: quarry
    spec:
      restartPolicy: Never
      containers:
        - name: cell
          image: {image}
          command: [{quarry}, \"matrix\", \"run\", {matrix}, \"-o\", {out}]
          env:
            - name: QUARRY_MATRIX_CELLS
              value: {cells}
            - name: QUARRY_CACHE_REGISTRY
              value: {registry}
            - name: DOCKER_CONFIG
              value: /quarry/registry-auth
          resources:
            requests:
{limits}            limits:
{limits}          volumeMounts:
            - name: matrix
              mountPath: /quarry/matrix
            - name: registry-auth
              mountPath: /quarry/registry-auth
              readOnly: true
      volumes:
        - name: matrix
          configMap:
            name: quarry-matrix-{name}
        - name: registry-auth
          secret:
            secretName: {secret}
            items:
              - key: .dockerconfigjson
                path: config.json
",
            image = yaml_str(&o.runner_image),
            quarry = yaml_str(&o.quarry),
            matrix = yaml_str(&format!("/quarry/matrix/{file}")),
            out = yaml_str(&o.out),
            cells = yaml_str(&ids.join(",")),
            registry = yaml_str(&plan.registry),
            secret = yaml_str(&o.registry_secret),
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_and_names() {
        assert_eq!(quantity("4G"), "4Gi");
        assert_eq!(quantity("512M"), "512Mi");
        assert_eq!(quantity("1000"), "1000Mi");
        assert_eq!(dns_name("Flash_Attention.2"), "flash-attention-2");
    }
}
