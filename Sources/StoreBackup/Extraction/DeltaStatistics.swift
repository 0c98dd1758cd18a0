/// What a delta restore took from the live store and what it read from the backup.
struct DeltaStatistics: Sendable, Equatable {
    /// Plain bytes copied from the live store (files and database blocks whose SHA-256 matched).
    var bytesReused: Int64 = 0
    /// Compressed bytes read from the backup (whole entries, or the blocks that differed).
    var bytesRead: Int64 = 0
    var filesReused = 0
    var filesRead = 0
    var blocksReused = 0
    var blocksRead = 0

    static func + (a: DeltaStatistics, b: DeltaStatistics) -> DeltaStatistics {
        DeltaStatistics(
            bytesReused: a.bytesReused + b.bytesReused, bytesRead: a.bytesRead + b.bytesRead,
            filesReused: a.filesReused + b.filesReused, filesRead: a.filesRead + b.filesRead,
            blocksReused: a.blocksReused + b.blocksReused, blocksRead: a.blocksRead + b.blocksRead)
    }
}
