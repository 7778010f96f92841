use crate::cli::image_arg::{self, ImageArg};
use crate::engine::gpu::GpuMode;
use crate::engine::run::{parse_copy_in, parse_copy_out, parse_env, parse_mount, Network, RunOptions};
use crate::engine::Engine;
use crate::engine::{cdi, endpoint};
use crate::progress::Progress;

#[derive(clap::Args)]
pub struct Args {
    /// An OCI layout directory, an image definition (.toml, built and loaded first) or an engine image
    image: String,
    /// GPUs: `auto` passes AMD GPUs when /dev/kfd exists
    #[arg(long, value_parser = crate::cli::values::gpu_mode(), default_value = "auto")]
    gpu: GpuMode,
    /// Only these GPUs: render nodes (renderD128), their paths, indexes (0,1), or CDI names (amd.com/gpu=0, amd.com/gpu=all); comma-separated
    #[arg(long = "gpu-devices", value_delimiter = ',')]
    gpu_devices: Vec<String>,
    /// Bind-mount a host path: SRC:DST[:ro] (repeatable)
    #[arg(long)]
    mount: Vec<String>,
    /// Copy a host file or directory in before the command runs: SRC:DST (repeatable)
    #[arg(long = "copy-in")]
    copy_in: Vec<String>,
    /// Copy a container path out after the command ends: SRC:DST (repeatable)
    #[arg(long = "copy-out")]
    copy_out: Vec<String>,
    /// Set an environment variable: K=V, or K to pass quarry's own value (repeatable)
    #[arg(long)]
    env: Vec<String>,
    /// Working directory in the container
    #[arg(long)]
    workdir: Option<String>,
    /// User in the container (NAME, UID or UID:GID)
    #[arg(long)]
    user: Option<String>,
    /// Network of the container
    #[arg(long, value_parser = crate::cli::values::network(), default_value = "none")]
    network: Network,
    /// Print the equivalent `docker` command line and exit
    #[arg(long)]
    print_docker: bool,
    #[command(flatten)]
    def: super::DefinitionArgs,
    /// The command to run (after `--`); the image's own when absent
    #[arg(last = true)]
    cmd: Vec<String>,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    // Notes (which GPUs were passed, and why) and warnings on stderr; the
    // container's own output stays on stdout.
    super::set_output_mode(false, false);
    let mut opts = RunOptions {
        image: String::new(),
        cmd: a.cmd.clone(),
        env: a.env.iter().map(|e| parse_env(e)).collect::<Result<_, _>>()?,
        mounts: a.mount.iter().map(|m| parse_mount(m)).collect::<Result<_, _>>()?,
        copy_in: a.copy_in.iter().map(|c| parse_copy_in(c)).collect::<Result<_, _>>()?,
        copy_out: a.copy_out.iter().map(|c| parse_copy_out(c)).collect::<Result<_, _>>()?,
        workdir: a.workdir.clone(),
        user: a.user.clone(),
        network: a.network,
        // A CDI name this machine lacks is an error unless the engine is elsewhere.
        gpu: cdi::plan(a.gpu, &a.gpu_devices, endpoint::resolve().map(|e| !e.is_remote()).unwrap_or(true))?,
    };
    let arg = image_arg::classify(&a.image)?;
    if a.print_docker {
        opts.image = match &arg {
            ImageArg::Layout(d) => image_arg::layout_tag(d)?,
            ImageArg::Definition(f) => {
                let img = crate::definition::load_image(
                    f,
                    &crate::definition::parse_sets(&a.def.sets).map_err(|e| anyhow::anyhow!(e))?,
                )?;
                format!("{}:{}", img.name.to_lowercase(), img.tag)
            }
            ImageArg::Reference(r) => r.clone(),
        };
        outln!("{}", opts.docker_command());
        return Ok(0);
    }
    let opened = a.def.cache.open()?;
    let layout = match arg {
        ImageArg::Layout(d) => {
            let tag = image_arg::layout_tag(&d)?;
            Some((d, tag))
        }
        ImageArg::Definition(f) => {
            Some(image_arg::build_for_engine(&f, &a.def.sets, &opened, Progress::new(false, false))?)
        }
        ImageArg::Reference(r) => {
            opts.image = r;
            None
        }
    };
    let engine = Engine::connect()?;
    if let Some((dir, tag)) = layout {
        engine.load_layout(&dir, &tag, &opened.tmp_dir())?;
        opts.image = tag;
    }
    // The container's own status is the answer; a command that could not
    // start (126, 127) or a signal (130, 143) is an error with its status.
    Ok(engine.run(&opts)?)
}
