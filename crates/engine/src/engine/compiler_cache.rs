//! A compiler cache (ccache) inside a build container.
//!
//! The cache directory is copied in at [`CCACHE_DIR`] (from the cache's
//! `compiler-objects` bucket: the container keeps its network off) and
//! copied out after a successful build. Compiles reach ccache through the
//! hooks the build systems honour, nothing else: CMake's
//! `CMAKE_{C,CXX,HIP}_COMPILER_LAUNCHER` (read from the environment since
//! CMake 3.17) and hipcc's `HIP_CLANG_LAUNCHER` (Debian 13's hipcc runs
//! `ccache clang++ ...` then). ccache 4.11 caches clang's HIP compiles
//! (`-x hip --offload-arch=...`) like any other: every offload target's
//! code is part of the object it stores. `CCACHE_BASEDIR` makes the source
//! path relative in its keys, so another machine (or a new copy of the
//! source) hits too.

use super::exec::ExecOutput;
use super::session::Session;
use super::EngineError;
use std::path::Path;

/// Where the compiler cache lives in a build container.
pub const CCACHE_DIR: &str = "/quarry/ccache";

/// `--compiler-cache`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// On when the image has ccache.
    Auto,
    /// On; an image without ccache is an error.
    On,
    Off,
}

/// What ccache did during one build (`ccache --print-stats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stats {
    /// Compiles answered from the cache.
    pub hits: u64,
    /// Compiles that ran the compiler (and were stored).
    pub misses: u64,
    /// Calls ccache passed through (links, preprocessing only...).
    pub uncacheable: u64,
}

impl Stats {
    /// Parse `ccache --print-stats` (`name<TAB>value` lines).
    pub fn parse(text: &str) -> Stats {
        let mut s = Stats::default();
        for line in text.lines() {
            let mut parts = line.split('\t');
            let (Some(name), Some(value)) = (parts.next(), parts.next()) else { continue };
            let Ok(n) = value.trim().parse::<u64>() else { continue };
            match name {
                "direct_cache_hit" | "preprocessed_cache_hit" | "remote_storage_hit" => s.hits += n,
                "cache_miss" => s.misses += n,
                "called_for_link"
                | "called_for_preprocessing"
                | "compiler_produced_no_output"
                | "could_not_use_modules"
                | "multiple_source_files"
                | "no_input_file"
                | "unsupported_code_directive"
                | "unsupported_compiler_option"
                | "unsupported_source_language" => s.uncacheable += n,
                _ => {}
            }
        }
        s
    }
}

/// The variables that send compiles through ccache. `base_dir` is where
/// the sources are (paths under it are keyed relative to it).
pub fn env(base_dir: &str) -> Vec<String> {
    vec![
        format!("CCACHE_DIR={CCACHE_DIR}"),
        format!("CCACHE_BASEDIR={base_dir}"),
        // The working directory is not part of a key (debug info aside,
        // which CCACHE_BASEDIR already makes relative).
        "CCACHE_NOHASHDIR=1".into(),
        "CMAKE_C_COMPILER_LAUNCHER=ccache".into(),
        "CMAKE_CXX_COMPILER_LAUNCHER=ccache".into(),
        "CMAKE_HIP_COMPILER_LAUNCHER=ccache".into(),
        "HIP_CLANG_LAUNCHER=ccache".into(),
    ]
}

impl Session<'_> {
    /// Get the container `id` ready to use ccache as its user: false when
    /// it has no ccache (an error with [`Mode::On`]).
    pub async fn prepare_compiler_cache(&self, id: &str, mode: Mode) -> Result<bool, EngineError> {
        if mode == Mode::Off {
            return Ok(false);
        }
        let sh = |s: String| vec!["sh".to_string(), "-c".to_string(), s];
        // Two execs, each a round trip to the engine: the image's user (and
        // whether it has ccache), then as root an empty-stats cache it owns.
        let (code, user) = self
            .exec(
                id,
                sh("command -v ccache >/dev/null && echo $(id -u):$(id -g)".into()),
                vec![],
                None,
                ExecOutput::Capture,
            )
            .await?;
        if code != 0 {
            if mode == Mode::On {
                return Err(EngineError::Invalid(
                    "--compiler-cache on: the image has no `ccache`; install it in the image (hip-builder-debian13 has it) or use --compiler-cache off".into(),
                ));
            }
            return Ok(false);
        }
        let user = String::from_utf8_lossy(&user).trim().to_string();
        let own = format!("mkdir -p {CCACHE_DIR} && ccache -z >/dev/null && chown -R {user} {CCACHE_DIR}");
        let (code, _) = self.exec_as(id, Some("0"), sh(own), env("/"), None, ExecOutput::Capture).await?;
        if code != 0 {
            log::warn!("could not prepare the compiler cache in the build container; building without it");
            return Ok(false);
        }
        Ok(true)
    }

    /// What ccache did since [`Session::prepare_compiler_cache`].
    pub async fn compiler_cache_stats(&self, id: &str) -> Result<Stats, EngineError> {
        let cmd = vec!["ccache".into(), "--print-stats".into()];
        let (code, out) = self.exec(id, cmd, env("/"), None, ExecOutput::Capture).await?;
        Ok(if code == 0 { Stats::parse(&String::from_utf8_lossy(&out)) } else { Stats::default() })
    }

    /// Copy the container's compiler cache out into `into` (an empty directory).
    pub async fn save_compiler_cache(&self, id: &str, into: &Path) -> Result<(), EngineError> {
        self.copy_out(id, CCACHE_DIR, into).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_count_hits_misses_and_passes() {
        let text = "stats_updated_timestamp\t1764085604\ndirect_cache_hit\t3\npreprocessed_cache_hit\t1\ncache_miss\t2\ncalled_for_link\t1\nfiles_in_cache\t12\n";
        assert_eq!(Stats::parse(text), Stats { hits: 4, misses: 2, uncacheable: 1 });
        assert_eq!(Stats::parse("garbage"), Stats::default());
    }

    #[test]
    fn the_launchers_name_ccache() {
        let e = env("/quarry/src");
        for v in ["CMAKE_C_COMPILER_LAUNCHER=ccache", "CMAKE_HIP_COMPILER_LAUNCHER=ccache", "HIP_CLANG_LAUNCHER=ccache"]
        {
            assert!(e.contains(&v.to_string()), "{v}");
        }
        assert!(e.contains(&"CCACHE_BASEDIR=/quarry/src".to_string()));
    }
}
