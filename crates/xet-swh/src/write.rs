//! Writing: objects streamed in, then the index, the hash function, the header and the
//! magic, in swh-shard's order.

use std::io::{self, Read, Seek, SeekFrom, Write};

use crate::chd::{ChdPh, MAX_KEYS, SeedPolicy};
use crate::error::WriteError;
use crate::read::Header;
use crate::{
    DELETED_OFFSET, HEADER_OFFSET, INDEX_ENTRY_LEN, KEY_LEN, MAGIC, OBJECTS_POSITION, VERSION,
};

/// Index entries are written through a buffer of this many bytes.
const INDEX_BUFFER: usize = 64 << 10;

/// Writes a read shard to `W` (a file, or anything that can seek back to the start).
///
/// The shard starts at `W`'s position when the writer is made. [`ShardWriter::new`] writes
/// the first 512 bytes as zeros, [`ShardWriter::add`] (or [`ShardWriter::add_from_reader`])
/// appends each object, and [`ShardWriter::finish`] builds the hash function, appends the
/// index and the hash section, then writes the header and, last, the magic, so a file left
/// unfinished has no magic and is refused by every reader. Nothing is synced: the caller
/// writes to a temporary file, syncs it and renames it into place.
///
/// `W` sees one or two `write_all` calls per object: give it a buffered writer
/// (`BufWriter<File>`). The writer keeps 40 bytes per object until `finish`; building the
/// hash function then takes about 30 more.
#[derive(Debug)]
pub struct ShardWriter<W: Write + Seek> {
    out: W,
    /// `W`'s position where the shard starts.
    start: u64,
    /// Bytes written so far, from `start`.
    pos: u64,
    keys: Vec<[u8; KEY_LEN]>,
    offsets: Vec<u64>,
    seeds: SeedPolicy,
    poisoned: bool,
}

impl<W: Write + Seek> ShardWriter<W> {
    /// A writer with swh-shard's seeds ([`SeedPolicy::Swh`]).
    pub fn new(out: W) -> Result<Self, WriteError> {
        Self::with_seeds(out, SeedPolicy::Swh)
    }

    /// A writer whose hash function takes its seeds from `seeds`.
    pub fn with_seeds(mut out: W, seeds: SeedPolicy) -> Result<Self, WriteError> {
        let io = |source| WriteError::Io { offset: 0, source };
        let start = out.stream_position().map_err(io)?;
        out.write_all(&[0u8; OBJECTS_POSITION as usize])
            .map_err(io)?;
        Ok(ShardWriter {
            out,
            start,
            pos: OBJECTS_POSITION,
            keys: Vec::new(),
            offsets: Vec::new(),
            seeds,
            poisoned: false,
        })
    }

    /// Objects added so far.
    pub fn len(&self) -> u64 {
        self.keys.len() as u64
    }

    /// Whether no object was added yet.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    fn check_key(&self, key: &[u8; KEY_LEN]) -> Result<(), WriteError> {
        if self.poisoned {
            return Err(WriteError::Poisoned);
        }
        if self.len() >= MAX_KEYS {
            return Err(WriteError::TooManyObjects { count: self.len() });
        }
        if key.iter().all(|&b| b == 0) {
            return Err(WriteError::ZeroKey { index: self.len() });
        }
        Ok(())
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), WriteError> {
        if let Err(source) = self.out.write_all(bytes) {
            self.poisoned = true;
            return Err(WriteError::Io {
                offset: self.pos,
                source,
            });
        }
        self.pos += bytes.len() as u64;
        Ok(())
    }

    /// Append the object `value` under `key`. Keys must be distinct (a repeated key is
    /// reported by [`ShardWriter::finish`], which sees them all) and not all zero.
    pub fn add(&mut self, key: &[u8; KEY_LEN], value: &[u8]) -> Result<(), WriteError> {
        self.check_key(key)?;
        let offset = self.pos;
        self.write(&(value.len() as u64).to_be_bytes())?;
        self.write(value)?;
        self.keys.push(*key);
        self.offsets.push(offset);
        Ok(())
    }

    /// Append an object of `size` bytes read from `value` (exactly `size` bytes are read;
    /// fewer is an error). For values too large to hold in memory.
    pub fn add_from_reader(
        &mut self,
        key: &[u8; KEY_LEN],
        size: u64,
        value: &mut impl Read,
    ) -> Result<(), WriteError> {
        self.check_key(key)?;
        let offset = self.pos;
        self.write(&size.to_be_bytes())?;
        let index = self.len();
        let mut buf = vec![0u8; (64 << 10).min(size as usize)];
        let mut done = 0u64;
        while done < size {
            let want = (size - done).min(buf.len() as u64) as usize;
            let got = match value.read(&mut buf[..want]) {
                Ok(0) => {
                    self.poisoned = true;
                    return Err(WriteError::ShortValue {
                        index,
                        key: *key,
                        size,
                        read: done,
                    });
                }
                Ok(k) => k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    self.poisoned = true;
                    return Err(WriteError::ValueRead {
                        index,
                        key: *key,
                        read: done,
                        size,
                        source,
                    });
                }
            };
            self.write(&buf[..got])?;
            done += got as u64;
        }
        self.keys.push(*key);
        self.offsets.push(offset);
        Ok(())
    }

    /// Build the hash function of the keys, write the index, the hash section, the header
    /// and the magic, and flush. Returns the writer, positioned at the end of the shard, and
    /// the header written.
    pub fn finish(mut self) -> Result<(W, Header), WriteError> {
        if self.poisoned {
            return Err(WriteError::Poisoned);
        }
        let hash = ChdPh::build(&self.keys, &self.seeds).map_err(WriteError::Build)?;
        let n = hash.n() as usize;
        // Key number per slot; u32::MAX for an empty slot (keys are fewer than 2^32).
        let mut by_slot = vec![u32::MAX; n];
        for (i, key) in self.keys.iter().enumerate() {
            let slot = hash.search32(key) as usize;
            if by_slot[slot] != u32::MAX {
                return Err(WriteError::Build(crate::BuildError::InvalidFunction {
                    detail: format!("keys #{} and #{i} share slot {slot}", by_slot[slot]),
                }));
            }
            by_slot[slot] = i as u32;
        }
        let dump = hash.dump().map_err(WriteError::Build)?;

        let index_position = self.pos;
        let mut buf = Vec::with_capacity(INDEX_BUFFER + INDEX_ENTRY_LEN as usize);
        for &i in &by_slot {
            if i == u32::MAX {
                buf.extend_from_slice(&[0u8; KEY_LEN]);
                buf.extend_from_slice(&DELETED_OFFSET.to_be_bytes());
            } else {
                buf.extend_from_slice(&self.keys[i as usize]);
                buf.extend_from_slice(&self.offsets[i as usize].to_be_bytes());
            }
            if buf.len() >= INDEX_BUFFER {
                self.write(&buf)?;
                buf.clear();
            }
        }
        self.write(&buf)?;
        drop(buf);
        let hash_position = self.pos;
        self.write(&dump)?;
        let end = self.pos;

        let header = Header {
            version: VERSION,
            objects_count: self.len(),
            objects_position: OBJECTS_POSITION,
            objects_size: index_position - OBJECTS_POSITION,
            index_position,
            index_size: hash_position - index_position,
            hash_position,
        };
        let mut magic = [0u8; HEADER_OFFSET as usize];
        magic[..MAGIC.len()].copy_from_slice(MAGIC);
        let start = self.start;
        let out = &mut self.out;
        let io = |offset| move |source| WriteError::Io { offset, source };
        out.seek(SeekFrom::Start(start + HEADER_OFFSET))
            .map_err(io(HEADER_OFFSET))?;
        out.write_all(&header.to_bytes())
            .map_err(io(HEADER_OFFSET))?;
        out.seek(SeekFrom::Start(start)).map_err(io(0))?;
        out.write_all(&magic).map_err(io(0))?;
        out.seek(SeekFrom::Start(start + end)).map_err(io(end))?;
        out.flush().map_err(io(end))?;
        Ok((self.out, header))
    }
}
