import Foundation

/// What is known of the kept `_Replaced` store, in a small JSON file beside it, replaced
/// atomically and durably (``DurableFile``) once the kept folder has its name.
struct ReplacedStoreRecord: Codable, Sendable, Equatable {
    /// The backup whose restore replaced the store.
    var backupName: String
    var replacedAt: Date
    var bytes: Int64
    var keptUntil: Date

    static func load(from path: String) -> ReplacedStoreRecord? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .utcTimestamp
        return try? decoder.decode(ReplacedStoreRecord.self, from: data)
    }

    func save(to path: String) throws {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .utcTimestamp
        encoder.outputFormatting = [.sortedKeys]
        try DurableFile.write(try encoder.encode(self), to: path)
    }
}

extension StoreLayout {
    /// The kept `_Replaced` store with its record, or nil when none is kept.
    package func replacedStore() -> ReplacedStore? {
        guard FileSystem.isDirectory(replaced) else { return nil }
        guard let record = ReplacedStoreRecord.load(from: replacedRecord) else {
            return ReplacedStore(path: replaced, bytes: FileSystem.treeSize(replaced), replacedBy: nil, replacedAt: nil, keptUntil: nil)
        }
        return ReplacedStore(
            path: replaced, bytes: record.bytes, replacedBy: record.backupName, replacedAt: record.replacedAt, keptUntil: record.keptUntil)
    }
}
