//! O_DIRECT for `direct = true` pools: which descriptor an operation uses, and the aligned
//! buffers direct I/O needs.
//!
//! A direct pool has two descriptors on one file: the O_DIRECT one for reads and writes
//! whose offset and length are multiples of [`DIRECT_ALIGN_BYTES`], and the ordinary one
//! for everything else (smaller or unaligned operations, flushes, zeroing, discards). The
//! kernel keeps the two coherent: a direct read first writes back cached pages in its
//! range, a direct write drops them, and `fdatasync` on either descriptor covers the file.
//! The engine never has two overlapping writes in flight, so no range is written through
//! both at once.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::os::fd::RawFd;

use bytes::Bytes;
use tiervisor_engine::{DevKind, DeviceOp};

/// Offset, length and memory alignment of direct I/O: 4 KiB suits every file system on
/// 512-byte and 4 KiB sector devices (STATX_DIOALIGN would say exactly, on Linux 6.1+).
pub const DIRECT_ALIGN_BYTES: usize = 4096;

/// A pool's descriptors.
#[derive(Clone, Copy, Debug)]
pub struct PoolFds {
    pub buffered: RawFd,
    /// Opened with O_DIRECT (`direct = true` pools where the file system allows it).
    pub direct: Option<RawFd>,
}

impl PoolFds {
    pub fn buffered(fd: RawFd) -> PoolFds {
        PoolFds {
            buffered: fd,
            direct: None,
        }
    }

    /// The O_DIRECT descriptor, when `op` is a read or write it can carry.
    pub fn direct_for(&self, op: &DeviceOp) -> Option<RawFd> {
        let a = DIRECT_ALIGN_BYTES as u64;
        let fits = matches!(op.kind, DevKind::Read | DevKind::Write)
            && op.len_bytes > 0
            && op.offset_bytes.is_multiple_of(a)
            && op.len_bytes.is_multiple_of(a)
            && (op.kind == DevKind::Read || op.payload.is_some());
        self.direct.filter(|_| fits)
    }
}

/// A zeroed heap buffer aligned to [`DIRECT_ALIGN_BYTES`].
pub struct AlignedBuf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the buffer owns its allocation; nothing else refers to it.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access is read-only (`AsRef`).
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    fn layout(len: usize) -> Layout {
        Layout::from_size_align(len.max(1), DIRECT_ALIGN_BYTES).expect("valid layout")
    }

    pub fn zeroed(len: usize) -> AlignedBuf {
        let layout = Self::layout(len);
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        AlignedBuf { ptr, len }
    }

    /// An aligned copy of `data`.
    pub fn copy_of(data: &[u8]) -> AlignedBuf {
        let mut b = AlignedBuf::zeroed(data.len());
        b.as_mut_slice().copy_from_slice(data);
        b
    }

    pub fn as_ptr(&self) -> *const u8 {
        self.ptr
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` holds `len` initialised (zeroed) bytes we own exclusively.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// The bytes, without copying them.
    pub fn into_bytes(self) -> Bytes {
        Bytes::from_owner(self)
    }
}

impl AsRef<[u8]> for AlignedBuf {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `ptr` holds `len` initialised bytes.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this layout.
        unsafe { dealloc(self.ptr, Self::layout(self.len)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tiervisor_engine::{IoClass, OpId, PoolId, Tag};

    fn op(kind: DevKind, offset_bytes: u64, len_bytes: u64) -> DeviceOp {
        DeviceOp {
            id: OpId(0),
            pool: PoolId(0),
            kind,
            offset_bytes,
            len_bytes,
            fua: false,
            payload: (kind == DevKind::Write).then(|| Bytes::from(vec![1u8; len_bytes as usize])),
            class: IoClass::Foreground,
            volume: None,
            context: tiervisor_engine::IoContext::Engine,
            tag: Tag::Host,
        }
    }

    #[test]
    fn only_aligned_reads_and_writes_go_direct() {
        let fds = PoolFds {
            buffered: 3,
            direct: Some(4),
        };
        assert_eq!(fds.direct_for(&op(DevKind::Read, 8192, 4096)), Some(4));
        assert_eq!(fds.direct_for(&op(DevKind::Write, 0, 65536)), Some(4));
        assert_eq!(fds.direct_for(&op(DevKind::Write, 512, 4096)), None);
        assert_eq!(fds.direct_for(&op(DevKind::Read, 4096, 512)), None);
        assert_eq!(fds.direct_for(&op(DevKind::Flush, 0, 0)), None);
        assert_eq!(
            PoolFds::buffered(3).direct_for(&op(DevKind::Read, 0, 4096)),
            None
        );
    }

    #[test]
    fn aligned_buffers_are_aligned_and_keep_their_bytes() {
        let b = AlignedBuf::copy_of(&[7u8; 5000]);
        assert_eq!(b.as_ptr() as usize % DIRECT_ALIGN_BYTES, 0);
        let bytes = b.into_bytes();
        assert_eq!(bytes.len(), 5000);
        assert!(bytes.iter().all(|&x| x == 7));
    }
}
