//! zstd compression of a whole connection, below the frames (`-z`).
//!
//! Each direction is one zstd stream that lives as long as the
//! connection: what was sent before is the context of what follows, so
//! small requests with similar paths compress as well as large bodies.
//! Every write of frames ends with a zstd flush, so the peer can decode
//! everything it was sent without waiting for more.
//!
//! The reader decodes only as much as the frame reader asks for, into the
//! frame reader's own buffer, and refuses windows above `WINDOW_LOG`: a
//! hostile peer's "decompression bomb" costs it bandwidth and us a
//! bounded amount of memory.

use std::io::{self, Read, Write};
use zstd::stream::raw::{CParameter, DParameter, Decoder, Encoder, Operation, OutBuffer};

/// Largest zstd window either side uses or accepts (8 MiB).
const WINDOW_LOG: u32 = 23;
/// Size of the compressed-input and compressed-output buffers.
const BUF: usize = 64 << 10;

/// The default level of `-z`, which is for links slower than the
/// compressor: zstd 6 makes about 100 MB/s on one core of a small machine
/// (four times zlib 6, rsync -z's default) and shrinks literal data 5%
/// more than zstd's own default of 3 (a real binary update: 2.01 MB on the
/// wire instead of 2.13 MB).
pub const DEFAULT_LEVEL: i32 = 6;

/// A writer that compresses everything written to it into `inner`.
pub struct ZstdWriter {
    inner: Box<dyn Write + Send>,
    enc: Encoder<'static>,
    out: Vec<u8>,
}

impl ZstdWriter {
    pub fn new(inner: Box<dyn Write + Send>, level: i32) -> io::Result<ZstdWriter> {
        let mut enc = Encoder::new(level)?;
        enc.set_parameter(CParameter::WindowLog(WINDOW_LOG.min(22)))?;
        Ok(ZstdWriter {
            inner,
            enc,
            out: vec![0; BUF],
        })
    }
}

impl Write for ZstdWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            let st = self.enc.run_on_buffers(&buf[done..], &mut self.out)?;
            self.inner.write_all(&self.out[..st.bytes_written])?;
            done += st.bytes_read;
        }
        Ok(buf.len())
    }

    /// End the current zstd block so the peer can decode all of it, then
    /// flush the transport.
    fn flush(&mut self) -> io::Result<()> {
        loop {
            let mut ob = OutBuffer::around(&mut self.out[..]);
            let left = self.enc.flush(&mut ob)?;
            let n = ob.pos();
            self.inner.write_all(&self.out[..n])?;
            if left == 0 {
                break;
            }
        }
        self.inner.flush()
    }
}

/// A reader that decompresses what `inner` delivers.
pub struct ZstdReader {
    inner: Box<dyn Read + Send>,
    dec: Decoder<'static>,
    input: Vec<u8>,
    start: usize,
    end: usize,
    /// The last step filled the caller's buffer: the decoder may hold more
    /// output, to be taken before blocking on the transport.
    maybe_more: bool,
}

impl ZstdReader {
    pub fn new(inner: Box<dyn Read + Send>) -> io::Result<ZstdReader> {
        let mut dec = Decoder::new()?;
        dec.set_parameter(DParameter::WindowLogMax(WINDOW_LOG))?;
        Ok(ZstdReader {
            inner,
            dec,
            input: vec![0; BUF],
            start: 0,
            end: 0,
            maybe_more: false,
        })
    }

    /// One decoding step over the input at hand: bytes written to `out`.
    fn step(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let st = self
            .dec
            .run_on_buffers(&self.input[self.start..self.end], out)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("zstd: {e}")))?;
        self.start += st.bytes_read;
        self.maybe_more = st.bytes_written == out.len();
        Ok(st.bytes_written)
    }
}

impl Read for ZstdReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        loop {
            if self.start < self.end || self.maybe_more {
                let n = self.step(out)?;
                if n > 0 {
                    return Ok(n);
                }
                if self.start < self.end {
                    continue;
                }
            }
            // Everything received is decoded: wait for more. The end of
            // the transport is the end of the data (the frame reader
            // tells a clean end from a cut one).
            let n = self.inner.read(&mut self.input)?;
            if n == 0 {
                return Ok(0);
            }
            self.start = 0;
            self.end = n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A transport that keeps what was written, shared with the test.
    #[derive(Clone, Default)]
    struct Pipe(Arc<Mutex<Vec<u8>>>);

    impl Write for Pipe {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn decode_all(wire: Vec<u8>) -> io::Result<Vec<u8>> {
        let mut r = ZstdReader::new(Box::new(io::Cursor::new(wire)))?;
        let mut out = Vec::new();
        r.read_to_end(&mut out)?;
        Ok(out)
    }

    #[test]
    fn flushed_writes_decode_in_order_and_shrink() {
        let pipe = Pipe::default();
        let mut w = ZstdWriter::new(Box::new(pipe.clone()), DEFAULT_LEVEL).unwrap();
        let mut sent = Vec::new();
        for i in 0..200u32 {
            let msg = format!("stat dir/sub/file-{i:05}.txt\n").repeat(1 + (i % 7) as usize);
            w.write_all(msg.as_bytes()).unwrap();
            w.flush().unwrap();
            sent.extend_from_slice(msg.as_bytes());
        }
        let wire = pipe.0.lock().unwrap().clone();
        assert!(
            wire.len() * 4 < sent.len(),
            "{} of {}",
            wire.len(),
            sent.len()
        );
        assert_eq!(decode_all(wire).unwrap(), sent);
    }

    #[test]
    fn each_flush_is_decodable_before_the_next_write() {
        let pipe = Pipe::default();
        let mut w = ZstdWriter::new(Box::new(pipe.clone()), DEFAULT_LEVEL).unwrap();
        let mut sent = Vec::new();
        for i in 0..20u8 {
            let msg = vec![i; 100_000 + i as usize];
            w.write_all(&msg).unwrap();
            w.flush().unwrap();
            sent.extend_from_slice(&msg);
            let wire = pipe.0.lock().unwrap().clone();
            assert_eq!(decode_all(wire).unwrap(), sent, "after write {i}");
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let e = decode_all(b"definitely not zstd at all".to_vec()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn a_window_above_the_limit_is_refused() {
        let mut enc = Encoder::new(19).unwrap();
        enc.set_parameter(CParameter::WindowLog(WINDOW_LOG + 2))
            .unwrap();
        enc.set_parameter(CParameter::EnableLongDistanceMatching(true))
            .unwrap();
        let data: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect();
        let mut out = vec![0; 2 << 20];
        let mut ob = OutBuffer::around(&mut out[..]);
        let mut ib = zstd::stream::raw::InBuffer::around(&data[..]);
        while ib.pos() < data.len() {
            enc.run(&mut ib, &mut ob).unwrap();
        }
        while enc.finish(&mut ob, true).unwrap() != 0 {}
        let n = ob.pos();
        out.truncate(n);
        assert!(decode_all(out).is_err());
    }
}
