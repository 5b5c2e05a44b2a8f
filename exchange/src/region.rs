//! `Region`: one shared-memory mapping backed by a `memfd`, created by one
//! process and opened by others from its file descriptor. It has no name in
//! any file system: it disappears when the last process that maps it (or
//! holds its descriptor) is gone, crash or not.

use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64};

use memmap2::{MmapMut, MmapOptions};

/// Why a region could not be created, opened or accessed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegionError {
    /// A region of zero bytes.
    #[error("a shared-memory region needs at least one byte")]
    Empty,
    /// The memfd could not be created or sized.
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

/// A shared, writable mapping of a memfd.
#[derive(Debug)]
pub struct Region {
    map: MmapMut,
    file: File,
}

impl Region {
    /// Creates a region of `len` bytes (zeroed), named `name` for
    /// diagnostics (`/proc/<pid>/fd` shows it as `memfd:<name>`).
    pub fn create(name: &str, len: usize) -> Result<Region, RegionError> {
        if len == 0 {
            return Err(RegionError::Empty);
        }
        let fd =
            rustix::fs::memfd_create(name, rustix::fs::MemfdFlags::CLOEXEC).map_err(|err| {
                RegionError::Create {
                    name: name.to_owned(),
                    message: err.to_string(),
                }
            })?;
        let file = File::from(fd);
        file.set_len(len as u64)
            .map_err(|err| RegionError::Create {
                name: name.to_owned(),
                message: format!("cannot size it to {len} bytes: {err}"),
            })?;
        Region::map(file, len)
    }

    /// Opens a region from its file descriptor (inherited, or received over
    /// a socket), mapping all of it.
    pub fn open(fd: OwnedFd) -> Result<Region, RegionError> {
        let file = File::from(fd);
        let len = file
            .metadata()
            .map_err(|err| RegionError::Open {
                message: err.to_string(),
            })?
            .len();
        let len = usize::try_from(len).map_err(|_| RegionError::Open {
            message: format!("a region of {len} bytes does not fit in memory"),
        })?;
        if len == 0 {
            return Err(RegionError::Empty);
        }
        Region::map(file, len)
    }

    fn map(file: File, len: usize) -> Result<Region, RegionError> {
        // SAFETY: the mapping is of a memfd that only rlpool processes hold
        // (it has no name to open it by); they change its bytes only through
        // the atomics and seqlock-guarded copies of this crate, never by
        // resizing it, so the mapping stays valid and every access to it
        // goes through raw pointers or atomics, never through `&[u8]` that
        // another process could change underneath.
        let map = unsafe { MmapOptions::new().len(len).map_mut(&file) }.map_err(|err| {
            RegionError::Open {
                message: format!("cannot map {len} bytes: {err}"),
            }
        })?;
        Ok(Region { map, file })
    }

    /// The region's size in bytes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Never true: a region has at least one byte.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
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

    /// The first byte of the mapping.
    pub fn as_ptr(&self) -> *mut u8 {
        self.map.as_ptr() as *mut u8
    }

    fn check(&self, offset: usize, size: usize) -> Result<(), RegionError> {
        let end = offset.checked_add(size).ok_or(RegionError::OutOfBounds {
            offset,
            size,
            len: self.len(),
        })?;
        if end > self.len() {
            return Err(RegionError::OutOfBounds {
                offset,
                size,
                len: self.len(),
            });
        }
        if offset % size != 0 {
            return Err(RegionError::Misaligned {
                offset,
                align: size,
            });
        }
        Ok(())
    }

    /// The `u64` atomic at `offset` (8-aligned, inside the region).
    pub fn atomic_u64(&self, offset: usize) -> Result<&AtomicU64, RegionError> {
        self.check(offset, 8)?;
        // SAFETY: `check` proved the 8 bytes at `offset` are inside the
        // mapping and 8-aligned (the mapping itself is page-aligned);
        // `AtomicU64` has the size and alignment of `u64` and any bit pattern
        // is valid; the mapping lives as long as `&self`; every process
        // accesses these bytes only atomically.
        Ok(unsafe { &*(self.as_ptr().add(offset) as *const AtomicU64) })
    }

    /// The `u32` atomic at `offset` (4-aligned, inside the region): a futex
    /// word.
    pub fn atomic_u32(&self, offset: usize) -> Result<&AtomicU32, RegionError> {
        self.check(offset, 4)?;
        // SAFETY: as in `atomic_u64`, for 4 bytes and 4-alignment.
        Ok(unsafe { &*(self.as_ptr().add(offset) as *const AtomicU32) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn a_second_mapping_of_the_descriptor_sees_the_same_memory() {
        let region = Region::create("rlpool-test", 4096).unwrap();
        assert_eq!(region.len(), 4096);
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
