//! Bridging the synchronous writers (tar builders, the docker-archive
//! exporter) to the request bodies bollard streams: the writer runs on a
//! blocking thread and hands chunks over a bounded channel, so memory stays
//! flat and the engine reads while the archive is produced.

use bytes::Bytes;
use futures_util::Stream;
use std::io::{self, Write};
use tokio::sync::mpsc;

const CHUNK: usize = 1 << 20;

/// A `Write` that sends full chunks down a channel; blocks when the
/// consumer is behind (at most `depth` chunks in flight).
pub struct ChannelWriter {
    tx: mpsc::Sender<io::Result<Bytes>>,
    buf: Vec<u8>,
}

impl ChannelWriter {
    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK)));
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the engine stopped reading the stream"))
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(CHUNK - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}

/// Run `produce` on a blocking thread; returns the byte stream it writes
/// and a handle yielding its result. A failing producer ends the stream
/// with an error, so the engine sees a broken upload, never a short one.
pub fn from_writer<T, E, F>(
    produce: F,
) -> (impl Stream<Item = io::Result<Bytes>> + Send + 'static, tokio::task::JoinHandle<Result<T, E>>)
where
    F: FnOnce(&mut ChannelWriter) -> Result<T, E> + Send + 'static,
    T: Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let (tx, mut rx) = mpsc::channel::<io::Result<Bytes>>(4);
    let handle = tokio::task::spawn_blocking(move || {
        let mut w = ChannelWriter { tx: tx.clone(), buf: Vec::with_capacity(CHUNK) };
        let r = produce(&mut w);
        match &r {
            Ok(_) => {
                if let Err(e) = w.send() {
                    let _ = tx.blocking_send(Err(e));
                }
            }
            Err(e) => {
                let _ = tx.blocking_send(Err(io::Error::other(e.to_string())));
            }
        }
        r
    });
    let stream = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
    (stream, handle)
}
