//! `quarry wheel build --test`: each wheel installed in a fresh virtualenv
//! in a fresh container of the build image, and a command run against it.

use super::{BuildError, BuildOptions, FIND_LINKS_DIR};
use crate::engine::copy::CopyIn;
use crate::engine::run::{Network, Output, RunOptions};
use crate::engine::Engine;
use std::path::Path;

const TEST_WHEELS_DIR: &str = "/quarry/wheels";

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BuildError + '_ {
    move |err| BuildError::Io { path: path.to_path_buf(), err }
}

/// Install `wheel` into a fresh virtualenv in a fresh container (network
/// off, from the output directory plus `--find-links`) and run `cmd` from a
/// temporary directory, so the source tree cannot be imported by mistake.
pub(super) fn test_wheel(
    engine: &Engine,
    image: &str,
    o: &BuildOptions,
    wheel: &Path,
    python: &str,
    cmd: &str,
) -> Result<(), BuildError> {
    let file = wheel.file_name().unwrap().to_string_lossy().into_owned();
    let mut copy_in = Vec::new();
    for e in std::fs::read_dir(&o.output).map_err(io(&o.output))? {
        let p = e.map_err(io(&o.output))?.path();
        if p.is_file() && p.extension().is_some_and(|x| x == "whl") {
            copy_in.push(CopyIn {
                dest: format!("{TEST_WHEELS_DIR}/{}", p.file_name().unwrap().to_string_lossy()),
                host: p,
            });
        }
    }
    let mut links = format!("--find-links {TEST_WHEELS_DIR}");
    if let Some(f) = &o.find_links {
        copy_in.push(CopyIn { host: f.clone(), dest: FIND_LINKS_DIR.into() });
        links.push_str(&format!(" --find-links {FIND_LINKS_DIR}"));
    }
    let script = format!(
        "set -e\n\"$QUARRY_PYTHON\" -m venv /tmp/quarry-venv\n\
         /tmp/quarry-venv/bin/python -m pip install --disable-pip-version-check -q --no-index {links} {TEST_WHEELS_DIR}/{file}\n\
         cd \"$(mktemp -d)\"\nexport PATH=/tmp/quarry-venv/bin:$PATH VIRTUAL_ENV=/tmp/quarry-venv\n\
         exec sh -c \"$QUARRY_TEST\"\n"
    );
    let opts = RunOptions {
        image: image.to_string(),
        cmd: vec!["sh".into(), "-c".into(), script],
        env: vec![format!("QUARRY_PYTHON={python}"), format!("QUARRY_TEST={cmd}")],
        network: Network::None,
        gpu: o.gpu.clone(),
        ..Default::default()
    };
    log::info!("testing {file}: {cmd}");
    let code = engine
        .guarded(async |s| {
            s.require_image(&opts.image).await?;
            let (id, code) = s
                .launch(
                    &|m| opts.body(m),
                    crate::engine::run::Memlock::Unset,
                    &copy_in,
                    Default::default(),
                    Output::Stderr,
                )
                .await?;
            s.remove_container(&id).await;
            Ok(code)
        })
        .map_err(BuildError::Engine)?;
    if code != 0 {
        return Err(BuildError::TestFailed { wheel: file, code });
    }
    Ok(())
}
