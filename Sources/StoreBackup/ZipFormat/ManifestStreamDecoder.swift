import Crypto
import Foundation

/// Decodes a manifest's JSON text as it is read, a buffer at a time, never holding the text.
///
/// `JSONDecoder` needs the whole text and builds a value for every part of it before the
/// rows exist, several times the memory of the rows it yields: the largest cost per entry
/// of restore and verify. Here each row of `files` is parsed into a ``Manifest/File`` as
/// it streams past; everything else (a few fields, the databases, the lists of links and
/// left-out files: small) is gathered as raw JSON text and decoded by `JSONDecoder`, so the
/// header keeps `Codable`'s exact rules (dates, optionals, unknown keys).
///
/// The rows are checked as strictly as `JSONDecoder` checks them: a required field missing,
/// a value of the wrong type, a number that does not fit, text that is not UTF-8 or not
/// JSON, and (stricter) a key given twice or an integer written with a fraction or an
/// exponent are errors. A row's keys, numbers and SHA-256 are read from the bytes, without
/// making their text.
struct ManifestStreamDecoder {
    /// Why the text was refused.
    enum Failure: Error {
        /// Not JSON, or not a manifest this version reads.
        case unreadable
        /// More rows than `maxRows`, found before they were all kept.
        case tooManyRows
        /// Longer than the limit it was read with.
        case tooLarge
        /// A manifest of a newer format than this version reads.
        case newer(format: Int)
    }

    /// The manifest and the hex SHA-256 of its bytes. `entries` are the archive's: a row whose
    /// path is the next entry's shares that entry's string instead of holding a copy.
    static func decode(
        maxBytes: Int, maxRows: Int, entries: [ArchiveEntry], read: (UnsafeMutableRawBufferPointer) throws -> Int
    ) throws -> (manifest: Manifest, sha256: String) {
        var (files, headerBytes, hasher, rowsFailed) = try withoutActuallyEscaping(read) { read in
            var decoder = ManifestStreamDecoder(maxBytes: maxBytes, maxRows: maxRows, entries: entries, read: read)
            // Reserved up front: an array doubling as it grows holds both copies for a moment.
            decoder.files.reserveCapacity(min(entries.count + 1, maxRows))
            try decoder.document()
            // Only the results leave: the decoder (and `read` with it) ends here.
            defer { decoder.files = [] }
            return (decoder.files, decoder.header, decoder.hasher, decoder.rowsFailed)
        }
        let sha256 = FileDigest.hex(hasher.finalize())
        headerBytes.append(contentsOf: Array(#""files":[]}"#.utf8))
        let header = Data(headerBytes)
        headerBytes = []
        // The rows decoded so far count with the header's own (databases, page maps) against the bound.
        guard files.count + ArchiveReader.occurrences(of: Array("\"path\"".utf8), in: header) <= maxRows else {
            throw Failure.tooManyRows
        }
        // The format first, alone: a newer manifest may not decode as this version's.
        if let format = try? Manifest.decodeFormat(header), format > Manifest.newestReadableFormat {
            throw Failure.newer(format: format)
        }
        guard !rowsFailed else { throw Failure.unreadable }
        let jsonDecoder = JSONDecoder()
        jsonDecoder.dateDecodingStrategy = .utcTimestamp
        var manifest: Manifest
        do { manifest = try jsonDecoder.decode(Manifest.self, from: header) } catch { throw Failure.unreadable }
        manifest.files = files
        files = []
        if manifest.format < 2 { manifest.escapeFormat1Paths() }
        return (manifest, sha256)
    }

    private let maxBytes: Int
    private let maxRows: Int
    private let read: (UnsafeMutableRawBufferPointer) throws -> Int
    /// The archive's entries, and the next one a row's path is compared with: storebackup
    /// writes the rows in the entries' order (the databases first), so most rows match in turn.
    private let entries: [ArchiveEntry]
    private var nextEntry = 0
    private var buffer = [UInt8](repeating: 0, count: 64 << 10)
    /// The bytes of the string or number read last (``readString()``, ``readNumber()``): one
    /// array for them all, where each string had one of its own (a third of a restore's start
    /// went to the rows' allocations and text).
    private var scratch: [UInt8] = []
    private var position = 0
    private var end = 0
    private var bytesRead = 0
    private var hasher = SHA256()
    /// The top-level fields other than `files`, as `"key":value,` raw JSON text.
    private var header: [UInt8] = [UInt8(ascii: "{")]
    /// Whether bytes consumed now are copied into ``header``.
    private var capturing = false
    private var files: [Manifest.File] = []
    /// A row did not fit this version's `File` (perhaps a newer format, known only once the
    /// `format` field, after `files`, is read): the rest are parsed but not kept.
    private var rowsFailed = false

    private init(
        maxBytes: Int, maxRows: Int, entries: [ArchiveEntry], read: @escaping (UnsafeMutableRawBufferPointer) throws -> Int
    ) {
        self.maxBytes = maxBytes
        self.maxRows = maxRows
        self.entries = entries
        self.read = read
        scratch.reserveCapacity(256)
    }

    // MARK: Bytes

    /// The next byte without consuming it; nil at the end of the text.
    private mutating func peek() throws -> UInt8? {
        if position == end {
            let got = try buffer.withUnsafeMutableBytes { try read($0) }
            guard got > 0 else { return nil }
            bytesRead += got
            guard bytesRead <= maxBytes else { throw Failure.tooLarge }
            buffer.withUnsafeBytes { hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: $0[0..<got])) }
            position = 0
            end = got
        }
        return buffer[position]
    }

    private mutating func next() throws -> UInt8 {
        guard let byte = try peek() else { throw Failure.unreadable }
        position += 1
        if capturing { header.append(byte) }
        return byte
    }

    private mutating func skipWhitespace() throws {
        while let byte = try peek(), byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 {
            position += 1
            if capturing { header.append(byte) }
        }
    }

    /// The next byte after whitespace, which must be `expected`.
    private mutating func expect(_ expected: UInt8) throws {
        try skipWhitespace()
        guard try next() == expected else { throw Failure.unreadable }
    }

    /// After whitespace: consumes `byte` and returns true if it comes next.
    private mutating func take(_ byte: UInt8) throws -> Bool {
        try skipWhitespace()
        guard try peek() == byte else { return false }
        _ = try next()
        return true
    }

    // MARK: Structure

    private mutating func document() throws {
        try expect(UInt8(ascii: "{"))
        var keys = Set<String>()
        if try !take(UInt8(ascii: "}")) {
            repeat {
                try skipWhitespace()
                let key = try string()
                guard keys.insert(key).inserted else { throw Failure.unreadable }
                try expect(UInt8(ascii: ":"))
                if key == "files" {
                    try rows()
                } else {
                    header.append(contentsOf: Array(Self.quoted(key).utf8))
                    header.append(UInt8(ascii: ":"))
                    capturing = true
                    try skipValue()
                    capturing = false
                    header.append(UInt8(ascii: ","))
                }
            } while try take(UInt8(ascii: ","))
            try expect(UInt8(ascii: "}"))
        }
        try skipWhitespace()
        guard try peek() == nil else { throw Failure.unreadable }
        guard keys.contains("files") else { throw Failure.unreadable }
    }

    /// A key as JSON text again (it was read unescaped).
    private static func quoted(_ key: String) -> String {
        var text = "\""
        for scalar in key.unicodeScalars {
            switch scalar {
            case "\"": text += "\\\""
            case "\\": text += "\\\\"
            case _ where scalar.value < 0x20: text += String(format: "\\u%04x", scalar.value)
            default: text.unicodeScalars.append(scalar)
            }
        }
        return text + "\""
    }

    private mutating func rows() throws {
        try skipWhitespace()
        guard try peek() == UInt8(ascii: "[") else {
            // Not this version's list of rows: a newer format, or damage (told apart by `format`).
            try skipValue()
            rowsFailed = true
            return
        }
        _ = try next()
        if try take(UInt8(ascii: "]")) { return }
        repeat {
            // Bounded before it is kept: memory follows the rows the archive may hold.
            guard files.count < maxRows else { throw Failure.tooManyRows }
            if rowsFailed {
                try skipValue()
            } else if let file = try row() {
                files.append(file)
            } else {
                rowsFailed = true
                files = []
            }
        } while try take(UInt8(ascii: ","))
        try expect(UInt8(ascii: "]"))
    }

    /// The fields of a row this version reads.
    private enum RowKey: Int, CaseIterable {
        case path, type, size, sha256, mode, mtime, linkTarget, deflateBlockSize, deflateBlocks, source, deflateBlockHashes

        /// Each key's name as bytes, in the cases' order.
        static let names: [[UInt8]] = [
            "path", "type", "size", "sha256", "mode", "mtime", "linkTarget", "deflateBlockSize", "deflateBlocks", "source",
            "deflateBlockHashes",
        ].map { Array($0.utf8) }

        /// The key whose name is `bytes` (unescaped), if any.
        static func named(_ bytes: [UInt8]) -> RowKey? {
            names.firstIndex(of: bytes).flatMap(RowKey.init(rawValue:))
        }
    }

    /// The types storebackup writes, as bytes and as the text a row keeps (no text made per row).
    private static let typeNames: [(bytes: [UInt8], text: String)] =
        ["file", "directory", "symlink", "database", "fifo"].map { (Array($0.utf8), $0) }

    /// One row of `files`; nil when it is JSON but not a `File` (consumed either way).
    private mutating func row() throws -> Manifest.File? {
        try skipWhitespace()
        guard try peek() == UInt8(ascii: "{") else {
            try skipValue()
            return nil
        }
        _ = try next()
        var path: String?, type: String?, size: Int64?, mode: UInt32?, mtime: Int64?
        var sha256: String?, digest: RawSHA256?, linkTarget: String?, deflateBlockSize: Int?, deflateBlocks: [Int]?
        var source: String?, deflateBlockHashes: [RawSHA256]?
        // The known keys seen, one bit each; any other key by its text (rare).
        var seen: UInt16 = 0
        var otherKeys = Set<String>()
        var fits = true
        if try !take(UInt8(ascii: "}")) {
            repeat {
                try skipWhitespace()
                try readString()
                let key = RowKey.named(scratch)
                if let key {
                    guard seen & (1 << key.rawValue) == 0 else { throw Failure.unreadable }
                    seen |= 1 << key.rawValue
                } else {
                    guard otherKeys.insert(try Self.text(scratch)).inserted else { throw Failure.unreadable }
                }
                try expect(UInt8(ascii: ":"))
                try skipWhitespace()
                switch key {
                case .path?: path = try required(&fits) { try $0.pathValue() }
                case .type?: type = try required(&fits) { try $0.typeValue() }
                case .sha256?: (digest, sha256) = try optional(&fits) { try $0.sha256Value() } ?? (nil, nil)
                case .linkTarget?: linkTarget = try optional(&fits) { try $0.stringValue() }
                case .source?: source = try optional(&fits) { try $0.stringValue() }
                case .size?: size = try required(&fits) { try $0.integer(Int64.self) }
                case .mtime?: mtime = try required(&fits) { try $0.integer(Int64.self) }
                case .mode?: mode = try required(&fits) { try $0.integer(UInt32.self) }
                case .deflateBlockSize?: deflateBlockSize = try optional(&fits) { try $0.integer(Int.self) }
                case .deflateBlocks?: deflateBlocks = try optional(&fits) { try $0.integers() }
                case .deflateBlockHashes?: deflateBlockHashes = try optional(&fits) { try $0.blockHashes() }
                case nil: try skipValue()
                }
            } while try take(UInt8(ascii: ","))
            try expect(UInt8(ascii: "}"))
        }
        guard fits, let path, let type, let size, let mode, let mtime else { return nil }
        if let digest {
            return Manifest.File(
                path: path, type: type, size: size, digest: digest, mode: mode, mtime: mtime, linkTarget: linkTarget,
                deflateBlockSize: deflateBlockSize, deflateBlocks: deflateBlocks, source: source,
                deflateBlockHashes: deflateBlockHashes)
        }
        return Manifest.File(
            path: path, type: type, size: size, sha256: sha256, mode: mode, mtime: mtime, linkTarget: linkTarget,
            deflateBlockSize: deflateBlockSize, deflateBlocks: deflateBlocks, source: source, deflateBlockHashes: deflateBlockHashes)
    }

    /// A value `parse` reads (nil from it: the wrong type or null, `fits` is cleared).
    private mutating func required<T>(_ fits: inout Bool, _ parse: (inout ManifestStreamDecoder) throws -> T?) throws -> T? {
        guard let value = try parse(&self) else {
            fits = false
            return nil
        }
        return value
    }

    /// null, or a value `parse` reads (nil from it: the wrong type, `fits` is cleared).
    private mutating func optional<T>(_ fits: inout Bool, _ parse: (inout ManifestStreamDecoder) throws -> T?) throws -> T? {
        if try peek() == UInt8(ascii: "n") {
            try literal("null")
            return nil
        }
        guard let value = try parse(&self) else {
            fits = false
            return nil
        }
        return value
    }

    /// An array of integers; nil (consumed) for any other value.
    private mutating func integers() throws -> [Int]? {
        guard try peek() == UInt8(ascii: "[") else {
            try skipValue()
            return nil
        }
        _ = try next()
        var values: [Int] = []
        var fits = true
        if try !take(UInt8(ascii: "]")) {
            repeat {
                try skipWhitespace()
                if let value = try integer(Int.self) { values.append(value) } else { fits = false }
            } while try take(UInt8(ascii: ","))
            try expect(UInt8(ascii: "]"))
        }
        return fits ? values : nil
    }

    /// (Format 4.) An array of block hashes, each 64 lower-case hex digits; nil (consumed)
    /// for any other value or an element in another form.
    private mutating func blockHashes() throws -> [RawSHA256]? {
        guard try peek() == UInt8(ascii: "[") else {
            try skipValue()
            return nil
        }
        _ = try next()
        var values: [RawSHA256] = []
        var fits = true
        if try !take(UInt8(ascii: "]")) {
            repeat {
                try skipWhitespace()
                guard try peek() == UInt8(ascii: "\"") else {
                    try skipValue()
                    fits = false
                    continue
                }
                try readString()
                if let hash = RawSHA256(hexBytes: scratch) { values.append(hash) } else { fits = false }
            } while try take(UInt8(ascii: ","))
            try expect(UInt8(ascii: "]"))
        }
        return fits ? values : nil
    }

    // MARK: Values

    /// A string; nil (consumed) for any other value.
    private mutating func stringValue() throws -> String? {
        guard try peek() == UInt8(ascii: "\"") else {
            try skipValue()
            return nil
        }
        return try string()
    }

    /// A row's path: the next entry's own string when the bytes are the same, else a string
    /// of its own; nil (consumed) for any other value.
    private mutating func pathValue() throws -> String? {
        guard try peek() == UInt8(ascii: "\"") else {
            try skipValue()
            return nil
        }
        try readString()
        if nextEntry < entries.count, Self.bytes(of: entries[nextEntry].path, equal: scratch) {
            nextEntry += 1
            return entries[nextEntry - 1].path
        }
        return try Self.text(scratch)
    }

    /// A row's type: the shared text of a type storebackup writes, else a string of its own;
    /// nil (consumed) for any other value.
    private mutating func typeValue() throws -> String? {
        guard try peek() == UInt8(ascii: "\"") else {
            try skipValue()
            return nil
        }
        try readString()
        if let known = Self.typeNames.first(where: { $0.bytes == scratch }) { return known.text }
        return try Self.text(scratch)
    }

    /// A row's SHA-256: its bytes when it is in the form storebackup writes (``RawSHA256``),
    /// else its text as it came; nil (consumed) for any other value.
    private mutating func sha256Value() throws -> (RawSHA256?, String?)? {
        guard try peek() == UInt8(ascii: "\"") else {
            try skipValue()
            return nil
        }
        try readString()
        if let digest = RawSHA256(hexBytes: scratch) { return (digest, nil) }
        return (nil, try Self.text(scratch))
    }

    /// Whether `text`'s UTF-8 bytes are `bytes`.
    private static func bytes(of text: String, equal bytes: [UInt8]) -> Bool {
        let utf8 = text.utf8
        guard utf8.count == bytes.count else { return false }
        return utf8.withContiguousStorageIfAvailable { stored in
            bytes.withUnsafeBufferPointer { read in
                stored.isEmpty || memcmp(stored.baseAddress!, read.baseAddress!, stored.count) == 0
            }
        } ?? utf8.elementsEqual(bytes)
    }

    private static func text(_ bytes: [UInt8]) throws -> String {
        guard let text = String(validating: bytes, as: UTF8.self) else { throw Failure.unreadable }
        return text
    }

    /// A JSON string (the opening quote next), unescaped; its bytes must be UTF-8.
    private mutating func string() throws -> String {
        try readString()
        return try Self.text(scratch)
    }

    /// Reads a JSON string (the opening quote next), unescaped, into ``scratch``.
    private mutating func readString() throws {
        guard try next() == UInt8(ascii: "\"") else { throw Failure.unreadable }
        scratch.removeAll(keepingCapacity: true)
        while true {
            // A run of plain bytes is copied at once (not while the header copies each byte).
            if !capturing && position < end {
                let (from, to) = (position, end)
                let stop = buffer.withUnsafeBufferPointer { bytes in
                    var index = from
                    while index < to, bytes[index] != UInt8(ascii: "\""), bytes[index] != UInt8(ascii: "\\"), bytes[index] >= 0x20 {
                        index += 1
                    }
                    return index
                }
                if stop > from {
                    scratch.append(contentsOf: buffer[from..<stop])
                    position = stop
                    continue
                }
            }
            let byte = try next()
            switch byte {
            case UInt8(ascii: "\""):
                return
            case UInt8(ascii: "\\"):
                try escape()
            case 0..<0x20:
                throw Failure.unreadable
            default:
                scratch.append(byte)
            }
        }
    }

    /// The character after a backslash, appended to ``scratch`` as UTF-8.
    private mutating func escape() throws {
        let byte = try next()
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): scratch.append(byte)
        case UInt8(ascii: "b"): scratch.append(0x08)
        case UInt8(ascii: "f"): scratch.append(0x0C)
        case UInt8(ascii: "n"): scratch.append(0x0A)
        case UInt8(ascii: "r"): scratch.append(0x0D)
        case UInt8(ascii: "t"): scratch.append(0x09)
        case UInt8(ascii: "u"):
            var value = try hex4()
            if (0xD800..<0xDC00).contains(value) {
                // A high surrogate: its low half must follow.
                guard try next() == UInt8(ascii: "\\"), try next() == UInt8(ascii: "u") else { throw Failure.unreadable }
                let low = try hex4()
                guard (0xDC00..<0xE000).contains(low) else { throw Failure.unreadable }
                value = 0x10000 + ((value - 0xD800) << 10) + (low - 0xDC00)
            } else if (0xDC00..<0xE000).contains(value) {
                throw Failure.unreadable
            }
            guard let scalar = Unicode.Scalar(value) else { throw Failure.unreadable }
            scratch.append(contentsOf: String(Character(scalar)).utf8)
        default:
            throw Failure.unreadable
        }
    }

    private mutating func hex4() throws -> UInt32 {
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = try next()
            let digit: UInt32
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
            default: throw Failure.unreadable
            }
            value = value << 4 | digit
        }
        return value
    }

    /// A JSON number that is an integer fitting `T`; nil (consumed) for any other value.
    private mutating func integer<T: FixedWidthInteger>(_: T.Type) throws -> T? {
        guard let first = try peek(), first == UInt8(ascii: "-") || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(first) else {
            try skipValue()
            return nil
        }
        try readNumber()
        return Self.integer(scratch, as: T.self)
    }

    /// The integer a JSON number's characters write, if they write one that fits `T`, read as
    /// `T(text)` reads it (so "-0" is 0 of an unsigned type; a fraction or exponent is nil).
    private static func integer<T: FixedWidthInteger>(_ text: [UInt8], as _: T.Type) -> T? {
        var digits = text[...]
        let negative = digits.first == UInt8(ascii: "-")
        if negative { digits = digits.dropFirst() }
        guard !digits.isEmpty else { return nil }
        var value: T = 0
        for byte in digits {
            guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return nil }
            let digit = T(byte - UInt8(ascii: "0"))
            let (shifted, overflowed) = value.multipliedReportingOverflow(by: 10)
            let (next, overflowedAgain) =
                negative ? shifted.subtractingReportingOverflow(digit) : shifted.addingReportingOverflow(digit)
            guard !overflowed, !overflowedAgain else { return nil }
            value = next
        }
        return value
    }

    /// Reads the characters of a JSON number into ``scratch``, checked against JSON's grammar.
    private mutating func readNumber() throws {
        scratch.removeAll(keepingCapacity: true)
        while let byte = try peek(),
            (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "+")
                || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "e") || byte == UInt8(ascii: "E")
        {
            scratch.append(try next())
        }
        guard Self.isJSONNumber(scratch) else { throw Failure.unreadable }
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
    private static func isJSONNumber(_ text: [UInt8]) -> Bool {
        var bytes = text[...]
        func digits() -> Int {
            let count = bytes.prefix { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }.count
            bytes = bytes.dropFirst(count)
            return count
        }
        if bytes.first == UInt8(ascii: "-") { bytes = bytes.dropFirst() }
        if bytes.first == UInt8(ascii: "0") { bytes = bytes.dropFirst() } else if digits() == 0 { return false }
        if bytes.first == UInt8(ascii: ".") {
            bytes = bytes.dropFirst()
            if digits() == 0 { return false }
        }
        if bytes.first == UInt8(ascii: "e") || bytes.first == UInt8(ascii: "E") {
            bytes = bytes.dropFirst()
            if bytes.first == UInt8(ascii: "+") || bytes.first == UInt8(ascii: "-") { bytes = bytes.dropFirst() }
            if digits() == 0 { return false }
        }
        return bytes.isEmpty
    }

    private mutating func literal(_ word: StaticString) throws {
        for expected in UnsafeBufferPointer(start: word.utf8Start, count: word.utf8CodeUnitCount) {
            guard try next() == expected else { throw Failure.unreadable }
        }
    }

    /// Consumes any JSON value (checked as JSON), keeping nothing but what ``capturing`` copies.
    private mutating func skipValue(depth: Int = 0) throws {
        // Deeper nesting than any manifest has: refused rather than recursed into.
        guard depth < 64 else { throw Failure.unreadable }
        try skipWhitespace()
        guard let byte = try peek() else { throw Failure.unreadable }
        switch byte {
        case UInt8(ascii: "{"):
            _ = try next()
            if try take(UInt8(ascii: "}")) { return }
            repeat {
                try skipWhitespace()
                _ = try string()
                try expect(UInt8(ascii: ":"))
                try skipValue(depth: depth + 1)
            } while try take(UInt8(ascii: ","))
            try expect(UInt8(ascii: "}"))
        case UInt8(ascii: "["):
            _ = try next()
            if try take(UInt8(ascii: "]")) { return }
            repeat { try skipValue(depth: depth + 1) } while try take(UInt8(ascii: ","))
            try expect(UInt8(ascii: "]"))
        case UInt8(ascii: "\""): _ = try string()
        case UInt8(ascii: "t"): try literal("true")
        case UInt8(ascii: "f"): try literal("false")
        case UInt8(ascii: "n"): try literal("null")
        default: try readNumber()
        }
    }
}
