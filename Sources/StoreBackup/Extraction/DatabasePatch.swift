/// Changes a database while a chain step (``ChainStepApplication``) unpacks it, front to
/// back: a chain restore rebuilds a database in one pass from the backup that stored it
/// whole and the page deltas of the backups since (``PageDeltaMerge``), instead of
/// unpacking it, patching it night by night and reading it all again for its checks.
///
/// The ``EntryWriter`` still checks the unpacked bytes against the entry's CRC and size; the
/// patch owns the check of the final content (its SHA-256), and `PRAGMA integrity_check`
/// reads only what the patch reports final. Used by the one thread that unpacks the file.
protocol DatabasePatch: AnyObject, Sendable {
    /// The file as the patch leaves it: size, mode and modification time.
    var finalSize: Int64 { get }
    var finalPermissions: UInt32 { get }
    var finalModificationTime: Int64 { get }
    var finalSHA256: String { get }
    /// Whether ``finish(descriptor:path:)`` checks the SHA-256 (hashing the final bytes as
    /// they become final: from the patched blocks in memory, else read back). The
    /// ``EntryWriter`` turns it off for a database unpacked in blocks while `integrity_check`
    /// follows it, and reads the file back instead (``DeferredDigest``): the hash then runs
    /// beside the check instead of on the path the check waits for.
    var hashesContent: Bool { get set }

    /// Bytes `0..<written` of the unpacked entry are on disk (`descriptor` opened for reading
    /// and writing): patches what lies there and returns how many bytes from the start are final.
    func advance(descriptor: Int32, path: String, written: Int64) throws -> Int64

    /// Changes a block of the unpacked entry (bytes `offset..<offset + block.count`) just
    /// written at `offset`, blocks in order: the pages that end within it take their final
    /// content on disk (one write each) and in `block`, so a later
    /// ``advance(descriptor:path:written:)`` has nothing left there.
    func patch(block: UnsafeMutableRawBufferPointer, at offset: Int64, descriptor: Int32, path: String) throws

    /// The entry is on disk in full: writes the rest, gives the file its final size, and
    /// checks the final content's SHA-256 when ``hashesContent`` (throws on a mismatch).
    func finish(descriptor: Int32, path: String) throws
}
