//! This process's memory map (`/proc/self/maps`): which kind of mapping backs an address range.
//! The direct path (provider/soft/direct) moves only private anonymous memory onto a memfd and
//! moves it back only while the range is still that memfd's.

use std::os::fd::{AsRawFd, FromRawFd};

/// What names an area in the map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    None,
    Heap,
    Other,
}

/// One line of the map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Area {
    start: usize,
    end: usize,
    perms: [u8; 4],
    offset: usize,
    inode: u64,
    path: Path,
}

fn parse(line: &str) -> Option<Area> {
    let mut f = line.splitn(6, ' ');
    let (range, perms, offset) = (f.next()?, f.next()?, f.next()?);
    let (_dev, inode) = (f.next()?, f.next()?);
    let path = match f.next().unwrap_or("").trim_start() {
        "" => Path::None,
        "[heap]" => Path::Heap,
        _ => Path::Other,
    };
    let (a, b) = range.split_once('-')?;
    Some(Area {
        start: usize::from_str_radix(a, 16).ok()?,
        end: usize::from_str_radix(b, 16).ok()?,
        perms: perms.as_bytes().try_into().ok()?,
        offset: usize::from_str_radix(offset, 16).ok()?,
        inode: inode.parse().ok()?,
        path,
    })
}

/// Whether every byte of `[start, end)` lies in areas (in address order) that `ok` accepts,
/// with no gap.
fn covered(
    areas: impl Iterator<Item = Area>,
    start: usize,
    end: usize,
    mut ok: impl FnMut(&Area) -> bool,
) -> bool {
    let mut at = start;
    for a in areas {
        if at >= end {
            break;
        }
        if a.end <= at {
            continue;
        }
        if a.start > at || !ok(&a) {
            return false;
        }
        at = a.end;
    }
    at >= end
}

/// Runs `check` over the areas of `/proc/self/maps`, read through a buffer on the stack: no
/// allocation, so a forked child's handler may use it (its allocator's locks may be held).
/// `None` if the file cannot be read or has a line longer than the buffer.
fn with_areas<R>(check: impl FnOnce(&mut dyn Iterator<Item = Area>) -> R) -> Option<R> {
    let mut buf = [0u8; 16384];
    // SAFETY: a valid NUL-terminated path; the descriptor is owned (and closed) by `file`.
    let fd = unsafe { libc::open(c"/proc/self/maps".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: fd was just opened and is owned here.
    let file = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    let mut lines = Lines { fd: file.as_raw_fd(), buf: &mut buf, start: 0, len: 0, failed: false };
    let r = check(&mut lines);
    (!lines.failed).then_some(r)
}

/// The areas of a maps file, a line at a time, refilling a fixed buffer.
struct Lines<'b> {
    fd: i32,
    buf: &'b mut [u8],
    start: usize,
    len: usize,
    failed: bool,
}

impl Iterator for Lines<'_> {
    type Item = Area;

    fn next(&mut self) -> Option<Area> {
        loop {
            let pending = &self.buf[self.start..self.start + self.len];
            if let Some(nl) = pending.iter().position(|&b| b == b'\n') {
                let (s, n) = (self.start, nl);
                self.start += nl + 1;
                self.len -= nl + 1;
                let line = std::str::from_utf8(&self.buf[s..s + n]).ok();
                let Some(a) = line.and_then(parse) else {
                    self.failed = true;
                    return None;
                };
                return Some(a);
            }
            // Move the partial line to the front and read more.
            self.buf.copy_within(self.start..self.start + self.len, 0);
            self.start = 0;
            let room = &mut self.buf[self.len..];
            if room.is_empty() {
                self.failed = true; // a line longer than the buffer
                return None;
            }
            // SAFETY: room is a writable slice of room.len() bytes.
            let n = unsafe { libc::read(self.fd, room.as_mut_ptr().cast(), room.len()) };
            if n < 0 {
                self.failed = true;
                return None;
            }
            if n == 0 {
                return None; // the end (a last line without newline is not in this file)
            }
            self.len += n as usize;
        }
    }
}

/// Private anonymous memory, readable and writable (the heap, `malloc`, `mmap(MAP_ANONYMOUS |
/// MAP_PRIVATE)`): not a file, not shared, not hugetlb, not the main thread's stack.
fn is_private_anon(a: &Area) -> bool {
    &a.perms == b"rw-p" && a.inode == 0 && matches!(a.path, Path::None | Path::Heap)
}

/// Whether `[start, end)` is private anonymous read-write memory.
pub fn private_anon(start: usize, end: usize) -> bool {
    with_areas(|areas| covered(areas, start, end, is_private_anon)).unwrap_or(false)
}

/// Whether every byte of `[start, end)` is mapped readable (and writable, if `write`): what the
/// kernel's pinning of a registration demands. `None` if the map cannot be read.
pub fn permits(start: usize, end: usize, write: bool) -> Option<bool> {
    with_areas(|areas| covered(areas, start, end, |a| permits_area(a, write)))
}

/// `permits`, and whether all of `[start, end)` is private anonymous memory (as
/// `private_anon`), from one read of the map.
pub fn permits_and_anon(start: usize, end: usize, write: bool) -> Option<(bool, bool)> {
    with_areas(|areas| permits_and_anon_in(areas, start, end, write))
}

fn permits_and_anon_in(
    areas: impl Iterator<Item = Area>,
    start: usize,
    end: usize,
    write: bool,
) -> (bool, bool) {
    let mut anon = true;
    let ok = covered(areas, start, end, |a| {
        anon &= is_private_anon(a);
        permits_area(a, write)
    });
    (ok, anon)
}

fn permits_area(a: &Area, write: bool) -> bool {
    a.perms[0] == b'r' && (!write || a.perms[1] == b'w')
}

/// If `[start, end)` is still a shared mapping of the file with inode `inode` from offset 0
/// on: its protection (`PROT_*`), for the memory that replaces it.
/// Reads the map without allocating (see `with_areas`).
pub fn shared_file_prot(start: usize, end: usize, inode: u64) -> Option<i32> {
    with_areas(|areas| shared_prot_in(areas, start, end, inode)).flatten()
}

fn shared_prot_in(
    areas: impl Iterator<Item = Area>,
    start: usize,
    end: usize,
    inode: u64,
) -> Option<i32> {
    let mut prot = None;
    let ours = covered(areas, start, end, |a| {
        let p = &a.perms;
        let same = a.inode == inode
            && p.get(3) == Some(&b's')
            && a.offset.checked_add(start) == Some(a.start);
        let bit = |i: usize, c: u8, v: i32| if p.get(i) == Some(&c) { v } else { 0 };
        let r = bit(0, b'r', libc::PROT_READ) | bit(1, b'w', libc::PROT_WRITE);
        prot.get_or_insert(r);
        same && prot == Some(r)
    });
    ours.then_some(prot?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAP: &str = "\
55d0c0000000-55d0c0021000 rw-p 00000000 00:00 0                          [heap]
7f0000000000-7f0000004000 rw-p 00000000 00:00 0 
7f0000004000-7f0000008000 rw-s 00000000 00:01 4242                       /memfd:rdmashim-mr (deleted)
7f0000008000-7f000000a000 rw-s 00004000 00:01 4242                       /memfd:rdmashim-mr (deleted)
7f000000a000-7f000000c000 r--p 00000000 08:01 99                         /usr/lib/libc.so.6
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
";

    fn areas() -> impl Iterator<Item = Area> {
        MAP.lines().filter_map(parse)
    }

    #[test]
    fn lines_parse() {
        let a = parse(MAP.lines().nth(2).unwrap()).unwrap();
        assert_eq!(
            (a.start, a.end, a.perms, a.inode),
            (0x7f00_0000_4000, 0x7f00_0000_8000, *b"rw-s", 4242)
        );
        assert_eq!(a.path, Path::Other);
        assert_eq!(parse("garbage"), None);
    }

    #[test]
    fn private_anonymous_ranges() {
        let anon = |s, e| covered(areas(), s, e, is_private_anon);
        assert!(anon(0x55d0_c000_1000, 0x55d0_c002_0000)); // heap
        assert!(anon(0x7f00_0000_0000, 0x7f00_0000_4000));
        assert!(!anon(0x7f00_0000_3000, 0x7f00_0000_5000)); // runs into the memfd
        assert!(!anon(0x7ffd_0000_0000, 0x7ffd_0000_1000)); // the stack
        assert!(!anon(0x55d0_c002_0000, 0x55d0_c002_2000)); // past the heap: a gap
    }

    #[test]
    fn the_memfd_mapping_is_recognised_by_inode_and_offset() {
        let ours = |s, e, ino| shared_prot_in(areas(), s, e, ino).is_some();
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        assert_eq!(shared_prot_in(areas(), 0x7f00_0000_4000, 0x7f00_0000_a000, 4242), Some(rw));
        assert!(!ours(0x7f00_0000_4000, 0x7f00_0000_a000, 4243));
        assert!(!ours(0x7f00_0000_5000, 0x7f00_0000_a000, 4242)); // offsets do not line up
        assert!(!ours(0x7f00_0000_4000, 0x7f00_0000_c000, 4242)); // runs into libc
    }

    #[test]
    fn read_only_and_unmapped_ranges_do_not_permit_writes() {
        let ok = |s, e, w| covered(areas(), s, e, |a| permits_area(a, w));
        assert!(ok(0x7f00_0000_0000, 0x7f00_0000_c000, false)); // anon, memfd, libc: readable
        assert!(!ok(0x7f00_0000_0000, 0x7f00_0000_c000, true)); // libc's pages are read-only
        assert!(ok(0x7f00_0000_0000, 0x7f00_0000_a000, true));
        assert!(!ok(0x7f00_0000_b000, 0x7f00_0000_d000, false)); // past libc: a gap
    }

    #[test]
    fn permits_and_anon_reads_both_in_one_pass() {
        let both = |s, e, w| permits_and_anon_in(areas(), s, e, w);
        assert_eq!(both(0x7f00_0000_0000, 0x7f00_0000_4000, true), (true, true));
        assert_eq!(both(0x7f00_0000_3000, 0x7f00_0000_5000, true), (true, false)); // into the memfd
        assert!(!both(0x7f00_0000_0000, 0x7f00_0000_c000, true).0); // libc read-only
        assert_eq!(both(0x7f00_0000_a000, 0x7f00_0000_c000, false), (true, false)); // a file
        assert!(!both(0x7f00_0000_b000, 0x7f00_0000_d000, false).0); // a gap
    }

    #[test]
    fn this_process_heap_is_private_anonymous() {
        let v = vec![0u8; 1 << 20];
        let page = 4096;
        let s = (v.as_ptr() as usize).next_multiple_of(page);
        assert!(private_anon(s, s + page));
    }
}
