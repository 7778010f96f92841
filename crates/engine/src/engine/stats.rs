//! What a container has used so far, from the engine's stats endpoint.
//! A build's compile work in CPU seconds, which a busy machine does not
//! inflate as it does wall time (the compiles run in the container's
//! cgroup, not in quarry's process, so quarry's own CPU time misses them).

use super::session::Session;
use bollard::query_parameters::StatsOptionsBuilder;
use futures_util::StreamExt;

impl Session<'_> {
    /// CPU seconds (user and system) the processes of container `id` have
    /// used; None when the engine does not say (best effort: a report
    /// field, never a reason to fail a build).
    pub async fn cpu_seconds(&self, id: &str) -> Option<f64> {
        // one-shot: the current counters at once, without the second sample
        // the engine otherwise waits about a second for.
        let options = StatsOptionsBuilder::default().stream(false).one_shot(true).build();
        let mut stream = self.engine.docker.stats(id, Some(options));
        let stats = match stream.next().await? {
            Ok(s) => s,
            Err(e) => {
                log::debug!("stats of container {id}: {e}");
                return None;
            }
        };
        let total_ns = stats.cpu_stats?.cpu_usage?.total_usage?;
        Some(total_ns as f64 / 1e9)
    }
}
