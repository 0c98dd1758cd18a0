import CPosix
import Foundation

/// glibc gives threads that allocate at the same time arenas of their own, up to eight per
/// core, and memory freed in an arena stays resident there. storebackup's threads allocate
/// little while they work (their buffers come from fixed pools), so one arena per core
/// bounds what freed memory keeps resident at no cost in contention worth measuring. Only
/// the command line sets it: an app that embeds the library keeps its allocator as it is.
/// `MALLOC_ARENA_MAX` in the environment still wins.
enum MallocArenas {
    static func limitToOnePerCore() {
        guard ProcessInfo.processInfo.environment["MALLOC_ARENA_MAX"] == nil else { return }
        _ = sb_limit_malloc_arenas(Int32(max(1, ProcessInfo.processInfo.activeProcessorCount)))
    }
}
