import CPosix
import Foundation

/// How the command line sets glibc's allocator up; an app that embeds the library keeps its
/// allocator as it is.
enum MallocTuning {
    static func apply() {
        let environment = ProcessInfo.processInfo.environment
        // glibc gives threads that allocate at the same time arenas of their own, up to eight
        // per core, and memory freed in an arena stays resident there. storebackup's threads
        // allocate little while they work (their buffers come from fixed pools), so one arena
        // per core bounds what freed memory keeps resident at no cost in contention worth
        // measuring.
        if environment["MALLOC_ARENA_MAX"] == nil {
            _ = sb_limit_malloc_arenas(Int32(max(1, ProcessInfo.processInfo.activeProcessorCount)))
        }
        // glibc raises its mmap threshold to the size of each large block freed (up to 32 MiB),
        // so after the first backup the next one's megabyte buffers come from the heap, where
        // what they leave free stays resident: a service making a point a minute grew run
        // after run. Fixed at 128 KiB, large blocks come and go with their own pages.
        if environment["GLIBC_TUNABLES"] == nil && environment["MALLOC_MMAP_THRESHOLD_"] == nil {
            _ = sb_return_large_blocks(Self.largeBlock)
        }
    }

    /// glibc's own starting threshold.
    static let largeBlock: Int32 = 128 << 10
}
