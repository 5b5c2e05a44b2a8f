//! `Region`: one shared-memory mapping backed by a sealed `memfd`, created
//! by one process and opened by others from its file descriptor. It has no
//! name in any file system: it disappears when the last process that maps
//! it (or holds its descriptor) is gone, crash or not.
//!
//! The mapping is a [`memmap2::MmapRaw`]: a raw pointer and a length, never
//! a `&[u8]`. Other threads and processes change its bytes through atomics
//! at any moment, so no reference to plain bytes of it may exist; every
//! access goes through [`Region::atomic_u64`] / [`Region::atomic_u32`]
//! (references to atomics, whose interior mutability allows that) or the
//! relaxed-atomic copies of [`seqlock`](crate::seqlock), at bounds-checked
//! offsets. This module and `seqlock` are the only ones of the crate allowed
//! `unsafe` code.
//!
//! The memfd is sealed against shrinking and growing once it is sized
//! (`F_SEAL_SHRINK | F_SEAL_GROW`), and [`Region::open`] refuses a
//! descriptor without those seals: no process can cut the file under a
//! mapping (which would turn accesses into `SIGBUS`) or make the length
//! read at open differ from the mapping's.

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicU64};

use memmap2::{MmapOptions, MmapRaw};
use rustix::fs::{FileType, MemfdFlags, SealFlags};

use crate::seqlock;

/// The seals a region's memfd must carry: its size is fixed for good.
const SIZE_SEALS: SealFlags = SealFlags::SHRINK.union(SealFlags::GROW);

/// Why a region could not be created, opened or accessed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegionError {
    /// A region of zero bytes.
    #[error("a shared-memory region needs at least one byte")]
    Empty,
    /// The memfd could not be created, sized or sealed.
    #[error("cannot create the shared-memory region {name:?}: {message}")]
    Create {
        /// The region's name.
        name: String,
        /// The OS error.
        message: String,
    },
    /// The region could not be opened or mapped.
    #[error("cannot open the shared-memory region: {message}")]
    Open {
        /// The OS error.
        message: String,
    },
    /// The descriptor given to [`Region::open`] is not a memfd: a pipe, a
    /// socket, a directory, or a file that takes no seals.
    #[error("descriptor {fd} is {kind}, not a sealed memfd")]
    NotMemfd {
        /// The descriptor's number in the opening process.
        fd: RawFd,
        /// What it is instead.
        kind: String,
    },
    /// The descriptor given to [`Region::open`] is a memfd whose size is
    /// not sealed: another holder could shrink it under the mapping.
    #[error("descriptor {fd} is a memfd without the seals {missing}: its size is not fixed")]
    Unsealed {
        /// The descriptor's number in the opening process.
        fd: RawFd,
        /// The seals it lacks (`shrink`, `grow`).
        missing: String,
    },
    /// An access past the end of the region.
    #[error("{size} bytes at offset {offset} are outside the region of {len} bytes")]
    OutOfBounds {
        /// The offset.
        offset: usize,
        /// The size accessed.
        size: usize,
        /// The region's size.
        len: usize,
    },
    /// An atomic access at an offset not aligned to its size.
    #[error("offset {offset} is not aligned to {align} bytes")]
    Misaligned {
        /// The offset.
        offset: usize,
        /// The alignment needed.
        align: usize,
    },
}

/// A shared, writable mapping of a sealed memfd.
#[derive(Debug)]
pub struct Region {
    map: MmapRaw,
    file: File,
}

/// What a descriptor is, for an error, from its file type.
fn kind_of(file_type: FileType) -> &'static str {
    match file_type {
        FileType::RegularFile => "a regular file",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symbolic link",
        FileType::Fifo => "a pipe",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        _ => "a descriptor of an unknown kind",
    }
}

/// The names of the size seals in `seals`, for an error.
fn seal_names(seals: SealFlags) -> String {
    [(SealFlags::SHRINK, "shrink"), (SealFlags::GROW, "grow")]
        .into_iter()
        .filter(|&(seal, _)| seals.contains(seal))
        .map(|(_, name)| name)
        .collect::<Vec<_>>()
        .join(", ")
}

impl Region {
    /// Creates a region of `len` bytes (zeroed), named `name` for
    /// diagnostics (`/proc/<pid>/fd` shows it as `memfd:<name>`), sealed
    /// against shrinking and growing.
    pub fn create(name: &str, len: usize) -> Result<Region, RegionError> {
        if len == 0 {
            return Err(RegionError::Empty);
        }
        let create_error = |message: String| RegionError::Create {
            name: name.to_owned(),
            message,
        };
        let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
            .map_err(|err| create_error(err.to_string()))?;
        let file = File::from(fd);
        file.set_len(len as u64)
            .map_err(|err| create_error(format!("cannot size it to {len} bytes: {err}")))?;
        rustix::fs::fcntl_add_seals(&file, SIZE_SEALS)
            .map_err(|err| create_error(format!("cannot seal its size: {err}")))?;
        Region::map(file, len)
    }

    /// Opens a region from its file descriptor (inherited, or received over
    /// a socket), mapping all of it. The descriptor must be a memfd sealed
    /// against shrinking and growing, as [`Region::create`] makes them:
    /// anything else is [`RegionError::NotMemfd`] or
    /// [`RegionError::Unsealed`].
    pub fn open(fd: OwnedFd) -> Result<Region, RegionError> {
        let file = File::from(fd);
        let raw = file.as_raw_fd();
        let stat = rustix::fs::fstat(&file).map_err(|err| RegionError::Open {
            message: format!("cannot inspect descriptor {raw}: {err}"),
        })?;
        let file_type = FileType::from_raw_mode(stat.st_mode);
        if file_type != FileType::RegularFile {
            return Err(RegionError::NotMemfd {
                fd: raw,
                kind: kind_of(file_type).to_owned(),
            });
        }
        let seals = rustix::fs::fcntl_get_seals(&file).map_err(|err| RegionError::NotMemfd {
            fd: raw,
            kind: format!("a regular file that takes no seals ({err})"),
        })?;
        if !seals.contains(SIZE_SEALS) {
            return Err(RegionError::Unsealed {
                fd: raw,
                missing: seal_names(SIZE_SEALS.difference(seals)),
            });
        }
        // Sealed: the size read now is the size for good.
        let len = stat.st_size;
        let len = usize::try_from(len).map_err(|_| RegionError::Open {
            message: format!("a region of {len} bytes does not fit in memory"),
        })?;
        if len == 0 {
            return Err(RegionError::Empty);
        }
        Region::map(file, len)
    }

    fn map(file: File, len: usize) -> Result<Region, RegionError> {
        let map = MmapOptions::new()
            .len(len)
            .map_raw(&file)
            .map_err(|err| RegionError::Open {
                message: format!("cannot map {len} bytes: {err}"),
            })?;
        Ok(Region { map, file })
    }

    /// The region's size in bytes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Never true: a region has at least one byte.
    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }

    /// The file descriptor, to pass to another process.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// A new descriptor of the region (to hand to a child process).
    pub fn try_clone_fd(&self) -> Result<OwnedFd, RegionError> {
        self.file
            .try_clone()
            .map(OwnedFd::from)
            .map_err(|err| RegionError::Open {
                message: format!("cannot duplicate the descriptor: {err}"),
            })
    }

    /// The first byte of the mapping, as a raw pointer (never make a
    /// reference to plain bytes of it: other processes change them).
    pub fn as_ptr(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }

    /// `size` bytes at `offset` lie inside the region.
    #[inline]
    fn check_range(&self, offset: usize, size: usize) -> Result<(), RegionError> {
        match offset.checked_add(size) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(RegionError::OutOfBounds {
                offset,
                size,
                len: self.len(),
            }),
        }
    }

    fn check(&self, offset: usize, size: usize) -> Result<(), RegionError> {
        self.check_range(offset, size)?;
        if offset % size != 0 {
            return Err(RegionError::Misaligned {
                offset,
                align: size,
            });
        }
        Ok(())
    }

    /// The `u64` atomic at `offset` (8-aligned, inside the region).
    pub(crate) fn atomic_u64(&self, offset: usize) -> Result<&AtomicU64, RegionError> {
        self.check(offset, 8)?;
        // SAFETY: `check` proved the 8 bytes at `offset` are inside the
        // mapping and 8-aligned (the mapping itself is page-aligned);
        // `AtomicU64` has the size and alignment of `u64` and any bit pattern
        // is valid; the mapping lives as long as `&self` (its size is sealed,
        // so no process can cut it short); every process accesses these
        // bytes only atomically, and a reference to an atomic (an
        // `UnsafeCell`) allows that.
        Ok(unsafe { AtomicU64::from_ptr(self.as_ptr().add(offset).cast()) })
    }

    /// The `u32` atomic at `offset` (4-aligned, inside the region): a futex
    /// word.
    pub(crate) fn atomic_u32(&self, offset: usize) -> Result<&AtomicU32, RegionError> {
        self.check(offset, 4)?;
        // SAFETY: as in `atomic_u64`, for 4 bytes and 4-alignment.
        Ok(unsafe { AtomicU32::from_ptr(self.as_ptr().add(offset).cast()) })
    }

    /// Copies `dst.len()` bytes of the region at `offset` into `dst` with
    /// relaxed atomic loads (`seqlock::read_bytes`): call it between a
    /// seqlock's `read_begin` and `read_validate`, or under an ordering that
    /// publishes the bytes (the command word's). One bounds check per call.
    ///
    /// Within the crate, the bytes of a range are always copied with these
    /// two methods over the same field ranges (the seqlock's rule on access
    /// sizes), never through the atomics above.
    #[inline]
    pub(crate) fn load(&self, offset: usize, dst: &mut [u8]) -> Result<(), RegionError> {
        self.check_range(offset, dst.len())?;
        // SAFETY: the bytes `offset..offset + dst.len()` are inside the
        // mapping (checked above), which lives as long as `&self` (its size
        // is sealed) and is writable (a shared, writable mapping). Every
        // process accesses slot bytes only through `seqlock::read_bytes` /
        // `seqlock::write_bytes` (this method and `store`) and header
        // atomics, over the same ranges (the field ranges of a layout that
        // the header's fingerprint makes identical in every process), so the
        // access sizes agree as the seqlock module requires. `dst` is
        // process-private memory, never part of the mapping.
        unsafe { seqlock::read_bytes(self.as_ptr().add(offset), dst) };
        Ok(())
    }

    /// Copies `src` into the region at `offset` with relaxed atomic stores
    /// (`seqlock::write_bytes`): call it between a seqlock's `begin_write`
    /// and `end_write`, or before an ordering that publishes the bytes (the
    /// command word's). One bounds check per call; see [`Region::load`].
    #[inline]
    pub(crate) fn store(&self, offset: usize, src: &[u8]) -> Result<(), RegionError> {
        self.check_range(offset, src.len())?;
        // SAFETY: as in `load`: inside the writable mapping, accessed only
        // atomically with the same ranges everywhere. `src` does not overlap
        // the mapping: no `&[u8]` over it can exist without `unsafe` code
        // that this crate does not have (it hands out raw pointers and
        // atomics only).
        unsafe { seqlock::write_bytes(self.as_ptr().add(offset), src) };
        Ok(())
    }

    /// [`Region::load`] as whole `u64`s (`seqlock::read_words`), for a range
    /// at an 8-byte-aligned `offset` whose bytes up to the next 8-byte
    /// boundary are copied only this way and with [`Region::store_words`]
    /// (a layout's fixed-size fields and their padding).
    #[inline]
    pub(crate) fn load_words(&self, offset: usize, dst: &mut [u8]) -> Result<(), RegionError> {
        self.check_words(offset, dst.len())?;
        // SAFETY: as in `load`, over the range rounded up to whole words
        // (checked above); the padding is copied only by the word copies.
        unsafe { seqlock::read_words(self.as_ptr().add(offset), dst) };
        Ok(())
    }

    /// [`Region::store`] as whole `u64`s (`seqlock::write_words`): the
    /// bytes past `src` up to the next 8-byte boundary become zeros. For the
    /// ranges of [`Region::load_words`].
    #[inline]
    pub(crate) fn store_words(&self, offset: usize, src: &[u8]) -> Result<(), RegionError> {
        self.check_words(offset, src.len())?;
        // SAFETY: as in `store`, over the range rounded up to whole words
        // (checked above); the padding is copied only by the word copies.
        unsafe { seqlock::write_words(self.as_ptr().add(offset), src) };
        Ok(())
    }

    /// `len` bytes at `offset`, rounded up to whole words, lie inside the
    /// region, and `offset` is 8-byte aligned.
    #[inline]
    fn check_words(&self, offset: usize, len: usize) -> Result<(), RegionError> {
        if offset % 8 != 0 {
            return Err(RegionError::Misaligned { offset, align: 8 });
        }
        self.check_range(offset, len.div_ceil(8) * 8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;
    use std::sync::atomic::Ordering;

    #[test]
    fn a_second_mapping_of_the_descriptor_sees_the_same_memory() {
        let region = Region::create("rlpool-test", 4096).unwrap();
        assert_eq!(region.len(), 4096);
        assert!(!region.is_empty());
        region.atomic_u64(64).unwrap().store(42, Ordering::Release);
        let other = Region::open(region.try_clone_fd().unwrap()).unwrap();
        assert_eq!(other.len(), 4096);
        assert_eq!(other.atomic_u64(64).unwrap().load(Ordering::Acquire), 42);
        other.atomic_u32(8).unwrap().store(7, Ordering::Release);
        assert_eq!(region.atomic_u32(8).unwrap().load(Ordering::Acquire), 7);
    }

    #[test]
    fn out_of_bounds_and_misaligned_offsets_are_errors() {
        let region = Region::create("rlpool-test", 128).unwrap();
        assert_eq!(
            region.atomic_u64(128).unwrap_err().to_string(),
            "8 bytes at offset 128 are outside the region of 128 bytes"
        );
        assert!(region.atomic_u64(usize::MAX).is_err());
        assert_eq!(
            region.atomic_u64(4).unwrap_err().to_string(),
            "offset 4 is not aligned to 8 bytes"
        );
        assert!(matches!(Region::create("x", 0), Err(RegionError::Empty)));
    }

    #[test]
    fn byte_copies_round_trip_between_mappings_and_stay_inside() {
        let region = Region::create("rlpool-test", 128).unwrap();
        let other = Region::open(region.try_clone_fd().unwrap()).unwrap();
        let src: Vec<u8> = (1..=21).collect();
        region.store(3, &src).unwrap();
        let mut dst = [0u8; 21];
        other.load(3, &mut dst).unwrap();
        assert_eq!(dst.as_slice(), src.as_slice());
        // The last byte, and nothing past it.
        region.store(127, &[9]).unwrap();
        assert_eq!(
            region.store(120, &[0; 9]),
            Err(RegionError::OutOfBounds {
                offset: 120,
                size: 9,
                len: 128
            })
        );
        assert!(other.load(usize::MAX, &mut [0; 2]).is_err());
        // An empty copy anywhere inside (or at the end) is fine.
        assert_eq!(other.load(128, &mut []), Ok(()));
    }

    /// Word copies round trip every length at an aligned offset, write the
    /// last word's padding as zeros, and refuse a misaligned offset or a
    /// range whose last word leaves the region.
    #[test]
    fn word_copies_round_trip_and_pad_the_last_word() {
        let region = Region::create("rlpool-test", 128).unwrap();
        let other = Region::open(region.try_clone_fd().unwrap()).unwrap();
        for len in 0..=24usize {
            region.store(64, &[0xff; 32]).unwrap();
            let src: Vec<u8> = (1..=len as u8).collect();
            region.store_words(64, &src).unwrap();
            let mut dst = vec![0u8; len];
            other.load_words(64, &mut dst).unwrap();
            assert_eq!(dst, src, "len {len}");
            let mut all = [0u8; 32];
            other.load(64, &mut all).unwrap();
            let padded = len.div_ceil(8) * 8;
            assert!(
                all[len..padded].iter().all(|&b| b == 0),
                "len {len}: {all:?}"
            );
            assert!(
                all[padded..].iter().all(|&b| b == 0xff),
                "len {len}: {all:?}"
            );
        }
        assert_eq!(
            region.store_words(4, &[1]),
            Err(RegionError::Misaligned {
                offset: 4,
                align: 8
            })
        );
        assert!(other.load_words(12, &mut [0; 4]).is_err());
        // 4 bytes at 120 fit, but their word too; 9 bytes need two words.
        assert_eq!(region.store_words(120, &[1; 4]), Ok(()));
        assert_eq!(
            region.store_words(120, &[1; 9]),
            Err(RegionError::OutOfBounds {
                offset: 120,
                size: 16,
                len: 128
            })
        );
    }

    #[test]
    fn a_created_region_is_sealed_against_resizing() {
        let region = Region::create("rlpool-test", 4096).unwrap();
        let seals = rustix::fs::fcntl_get_seals(region.fd()).unwrap();
        assert!(seals.contains(SIZE_SEALS), "{seals:?}");
        let file = File::from(region.try_clone_fd().unwrap());
        assert!(file.set_len(1024).is_err(), "shrinking must fail");
        assert!(file.set_len(8192).is_err(), "growing must fail");
        assert_eq!(region.len(), 4096);
    }

    fn raw(fd: &OwnedFd) -> RawFd {
        fd.as_raw_fd()
    }

    #[test]
    fn a_pipe_or_a_socket_is_not_a_region() {
        let (reader, _writer) = rustix::pipe::pipe().unwrap();
        let fd = raw(&reader);
        let err = Region::open(reader).unwrap_err();
        assert_eq!(
            err,
            RegionError::NotMemfd {
                fd,
                kind: "a pipe".into()
            }
        );
        assert_eq!(
            err.to_string(),
            format!("descriptor {fd} is a pipe, not a sealed memfd")
        );
        let (socket, _peer) = UnixStream::pair().unwrap();
        let socket = OwnedFd::from(socket);
        let fd = raw(&socket);
        assert_eq!(
            Region::open(socket).unwrap_err(),
            RegionError::NotMemfd {
                fd,
                kind: "a socket".into()
            }
        );
    }

    #[test]
    fn a_regular_file_or_a_directory_is_not_a_region() {
        // The test program itself: a file on the build's file system, which
        // takes no seals (unlike a memfd or a tmpfs file).
        let exe = OwnedFd::from(File::open(std::env::current_exe().unwrap()).unwrap());
        let fd = raw(&exe);
        match Region::open(exe).unwrap_err() {
            RegionError::NotMemfd { fd: named, kind } => {
                assert_eq!(named, fd);
                assert!(
                    kind.starts_with("a regular file that takes no seals"),
                    "{kind}"
                );
            }
            // A build directory on tmpfs: its files take seals, but carry
            // none of a region's.
            RegionError::Unsealed { fd: named, missing } => {
                assert_eq!((named, missing.as_str()), (fd, "shrink, grow"));
            }
            other => panic!("{other}"),
        }
        let dir = OwnedFd::from(File::open(env!("CARGO_MANIFEST_DIR")).unwrap());
        let fd = raw(&dir);
        assert_eq!(
            Region::open(dir).unwrap_err().to_string(),
            format!("descriptor {fd} is a directory, not a sealed memfd")
        );
    }

    #[test]
    fn a_memfd_without_the_size_seals_is_refused() {
        // Made without ALLOW_SEALING: it can never carry the seals.
        let plain = rustix::fs::memfd_create("rlpool-test", MemfdFlags::CLOEXEC).unwrap();
        File::from(plain.try_clone().unwrap())
            .set_len(4096)
            .unwrap();
        let fd = raw(&plain);
        let err = Region::open(plain).unwrap_err();
        assert_eq!(
            err,
            RegionError::Unsealed {
                fd,
                missing: "shrink, grow".into()
            }
        );
        assert_eq!(
            err.to_string(),
            format!(
                "descriptor {fd} is a memfd without the seals shrink, grow: its size is not fixed"
            )
        );
        // Sealable, sealed against growing only.
        let half = rustix::fs::memfd_create(
            "rlpool-test",
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        )
        .unwrap();
        File::from(half.try_clone().unwrap()).set_len(4096).unwrap();
        rustix::fs::fcntl_add_seals(&half, SealFlags::GROW).unwrap();
        let fd = raw(&half);
        assert_eq!(
            Region::open(half).unwrap_err(),
            RegionError::Unsealed {
                fd,
                missing: "shrink".into()
            }
        );
    }

    #[test]
    fn an_empty_sealed_memfd_is_refused() {
        let empty = rustix::fs::memfd_create(
            "rlpool-test",
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        )
        .unwrap();
        rustix::fs::fcntl_add_seals(&empty, SIZE_SEALS).unwrap();
        assert_eq!(Region::open(empty).unwrap_err(), RegionError::Empty);
    }

    #[test]
    fn nothing_appears_under_dev_shm() {
        let before: Vec<_> = std::fs::read_dir("/dev/shm")
            .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
            .unwrap_or_default();
        let region = Region::create("rlpool-test-shm", 4096).unwrap();
        let after: Vec<_> = std::fs::read_dir("/dev/shm")
            .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert_eq!(before, after);
        drop(region);
    }
}
