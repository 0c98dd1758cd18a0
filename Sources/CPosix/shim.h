#ifndef STOREBACKUP_CPOSIX_SHIM_H
#define STOREBACKUP_CPOSIX_SHIM_H
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdio.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>

/// rename() that fails with EEXIST instead of replacing the target (Linux renameat2).
/// Returns 0, or -1 with errno set; ENOSYS/EINVAL when the filesystem lacks the flag.
static inline int sb_rename_noreplace(const char *source, const char *target) {
#ifdef SYS_renameat2
    return (int)syscall(SYS_renameat2, AT_FDCWD, source, AT_FDCWD, target, 1u /* RENAME_NOREPLACE */);
#else
    errno = ENOSYS;
    return -1;
#endif
}

/// syncfs(2): flushes the whole filesystem holding `fd` and reports writeback errors
/// (Linux >= 5.8). Returns 0, or -1 with errno set (ENOSYS where the call is missing).
static inline int sb_syncfs(int fd) {
#ifdef SYS_syncfs
    return (int)syscall(SYS_syncfs, fd);
#else
    errno = ENOSYS;
    return -1;
#endif
}

/// Reserves `size` bytes of disk for a file about to be filled out of order (Linux
/// fallocate, which allocates without writing), so a free-space check sees them taken.
/// Returns 0, or -1 with errno set (EOPNOTSUPP where the filesystem cannot; ENOSYS elsewhere).
static inline int sb_reserve(int fd, long long size) {
#ifdef __linux__
    return fallocate(fd, 0, 0, (off_t)size);
#else
    (void)fd; (void)size;
    errno = ENOSYS;
    return -1;
#endif
}

/// Starts writeback of a file's dirty pages in [offset, offset + count) without waiting
/// (Linux sync_file_range with SYNC_FILE_RANGE_WRITE), so a later fsync has little left to
/// do. Elsewhere a no-op. Returns 0, or -1 with errno set.
static inline int sb_start_writeback(int fd, long long offset, long long count) {
#ifdef __linux__
    return sync_file_range(fd, (off_t)offset, (off_t)count, SYNC_FILE_RANGE_WRITE);
#else
    (void)fd; (void)offset; (void)count;
    return 0;
#endif
}

/// Makes `target` share `source`'s blocks (FICLONE: btrfs, XFS, bcachefs): 0, or -1 with
/// errno (EOPNOTSUPP, EXDEV, EINVAL where the file system cannot).
static inline int sb_clone_file(int target, int source) {
#ifdef __linux__
    return ioctl(target, _IOW(0x94, 9, int), source);
#else
    (void)target; (void)source;
    errno = EOPNOTSUPP;
    return -1;
#endif
}

/// copy_file_range(2) of `count` bytes at `offset` in both files: the bytes copied, or -1
/// with errno (ENOSYS, EXDEV, EINVAL where the kernel or file system cannot).
static inline long long sb_copy_range(int source, int target, long long offset, long long count) {
#ifdef SYS_copy_file_range
    long long in = offset, out = offset;
    return (long long)syscall(SYS_copy_file_range, source, &in, target, &out, (size_t)count, 0u);
#else
    (void)source; (void)target; (void)offset; (void)count;
    errno = ENOSYS;
    return -1;
#endif
}

/// Waits until [offset, offset + count) of a file is on disk, starting writeback of what is
/// still dirty there (sync_file_range WAIT_BEFORE | WRITE | WAIT_AFTER): bounds how much
/// writeback is in flight. Elsewhere a no-op. Returns 0, or -1 with errno set.
static inline int sb_wait_writeback(int fd, long long offset, long long count) {
#ifdef __linux__
    return sync_file_range(fd, (off_t)offset, (off_t)count,
                           SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
#else
    (void)fd; (void)offset; (void)count;
    return 0;
#endif
}

/// Makes a posix_spawn close every descriptor from `from` up in the child (glibc >= 2.34),
/// so only the standard three reach it. Returns 0, or an error number (ENOSYS where missing).
/// `actions` is a `posix_spawn_file_actions_t *`, declared here without <spawn.h>: under
/// _GNU_SOURCE that header brings in a `fd_set` that clashes with Dispatch's in apps that
/// import both (the example server did).
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
extern int posix_spawn_file_actions_addclosefrom_np(void *actions, int from);
#endif
static inline int sb_spawn_close_from(void *actions, int from) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    return posix_spawn_file_actions_addclosefrom_np(actions, from);
#else
    (void)actions; (void)from;
    return ENOSYS;
#endif
}

/// mallopt(M_ARENA_MAX, count): at most `count` malloc arenas for the whole process
/// (glibc). Returns 1 on success, 0 on failure.
static inline int sb_limit_malloc_arenas(int count) {
    return mallopt(M_ARENA_MAX, count);
}

/// mallopt(M_MMAP_THRESHOLD) and mallopt(M_TRIM_THRESHOLD) to `bytes` (glibc): allocations
/// of at least `bytes` get pages of their own, given back when freed, and the heap's free
/// top above `bytes` is given back too. Setting the mmap threshold also stops glibc from
/// raising it each time such a block is freed. Returns 1 when both were set.
static inline int sb_return_large_blocks(int bytes) {
    return mallopt(M_MMAP_THRESHOLD, bytes) && mallopt(M_TRIM_THRESHOLD, bytes);
}

#endif
