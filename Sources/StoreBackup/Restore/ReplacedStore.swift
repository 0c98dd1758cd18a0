import Foundation

/// The store a committed restore replaced, kept beside the live one as `<store>_Replaced`
/// so ``StoreHelper/undoRestore(options:hooks:)`` can put it back (see
/// ``RestoreOptions/keepReplaced``). Only one is kept: the next committed restore drops it.
public struct ReplacedStore: Sendable, Equatable {
    /// The kept folder, `<store>_Replaced`.
    public var path: String
    /// Its size in bytes when it was kept; it holds this much disk space until it goes.
    public var bytes: Int64
    /// The backup whose restore replaced it; nil when its record is missing.
    public var replacedBy: String?
    /// When that restore committed; nil when its record is missing.
    public var replacedAt: Date?
    /// When the next command on the store removes it; nil when its record is missing (it
    /// is then never removed by itself).
    public var keptUntil: Date?

    /// A kept store as described; ``StoreHelper/replacedStore`` reads the real one.
    public init(path: String, bytes: Int64, replacedBy: String?, replacedAt: Date?, keptUntil: Date?) {
        self.path = path
        self.bytes = bytes
        self.replacedBy = replacedBy
        self.replacedAt = replacedAt
        self.keptUntil = keptUntil
    }
}
