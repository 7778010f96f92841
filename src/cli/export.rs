use crate::export::{write_docker_archive, write_oci_archive};
use std::io::Write;
use std::path::PathBuf;

#[derive(Clone, Copy, clap::ValueEnum)]
enum Format {
    OciArchive,
    DockerArchive,
}

#[derive(clap::Args)]
pub struct Args {
    /// The OCI layout directory written by `quarry build`
    oci_dir: PathBuf,
    /// Archive format
    #[arg(long, value_enum)]
    format: Format,
    /// Output file
    #[arg(short, long)]
    output: PathBuf,
    /// Name for docker-archive's RepoTags (NAME:TAG) [default: the layout's name and tag]
    #[arg(long)]
    tag: Option<String>,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let parent = a.output.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    std::fs::create_dir_all(parent)?;
    // Written beside the output and renamed: no half-written archive is left.
    let mut tmp = tempfile::Builder::new().prefix(".quarry-export-").tempfile_in(parent)?;
    {
        let mut w = std::io::BufWriter::with_capacity(1 << 20, tmp.as_file_mut());
        match a.format {
            Format::OciArchive => write_oci_archive(&a.oci_dir, &mut w)?,
            Format::DockerArchive => {
                let tag = match &a.tag {
                    Some(t) => t.clone(),
                    None => super::image_arg::layout_tag(&a.oci_dir)?,
                };
                write_docker_archive(&a.oci_dir, None, &tag, &mut w, &|_| false)?;
            }
        }
        w.flush()?;
    }
    // A temporary file is made 0600; an archive is for sharing, as any file
    // the user makes: 0666 less the umask.
    use std::os::unix::fs::PermissionsExt;
    tmp.as_file().set_permissions(std::fs::Permissions::from_mode(crate::export::new_file_mode()))?;
    tmp.persist(&a.output).map_err(|e| e.error)?;
    Ok(0)
}
