import Foundation

/// Writes a manifest as JSON text row by row, in the layout `JSONEncoder` gives with
/// `.prettyPrinted` and `.sortedKeys`. `JSONEncoder` first builds a tree of every value of
/// the document, which costs far more memory per file row than the text itself, at the
/// end of `create`, when the archive's other per-entry state is still alive.
///
/// The text comes in parts (``next(into:atLeast:)``), so `create` can deflate and write it
/// while it is being made instead of holding the whole text; and its `files` rows can be
/// made one at a time as they are written (``init(_:rowCount:row:)``), so that `create`
/// holds no row per entry beside libzip's entries.
struct ManifestWriter {
    private enum Stage {
        /// The opening brace and the fields sorted before `files`.
        case head
        /// The `files` rows from this index on.
        case rows(Int)
        /// What follows the `files` array.
        case tail
        case done
    }

    private let manifest: Manifest
    private let rowCount: Int
    private let row: (Int) -> Manifest.File
    private var stage = Stage.head
    private var out: [UInt8] = []

    init(_ manifest: Manifest) {
        let files = manifest.files
        self.init(manifest, rowCount: files.count) { files[$0] }
    }

    /// Writes `manifest` with the `files` rows `row(0)` to `row(rowCount - 1)` instead of
    /// its own `files` (which it should leave empty).
    init(_ manifest: Manifest, rowCount: Int, row: @escaping (Int) -> Manifest.File) {
        self.manifest = manifest
        self.rowCount = rowCount
        self.row = row
    }

    /// True once the whole text has been handed out.
    var isFinished: Bool {
        if case .done = stage { return true }
        return false
    }

    static func encode(_ manifest: Manifest) -> Data {
        var writer = ManifestWriter(manifest)
        var text = Data()
        text.reserveCapacity(1024 + manifest.files.count * 320)
        var part: [UInt8] = []
        while writer.next(into: &part, atLeast: 64 << 10) { text.append(contentsOf: part) }
        return text
    }

    /// Replaces `part` with the next part of the text: at least `atLeast` bytes, or the
    /// rest of the text when less is left. Returns false, with `part` empty, at the end.
    mutating func next(into part: inout [UInt8], atLeast: Int) -> Bool {
        swap(&out, &part)
        out.removeAll(keepingCapacity: true)
        // A part ends within a row of `atLeast`: room for that, so that it does not grow by doubling.
        out.reserveCapacity(atLeast + 16 << 10)
        defer { swap(&out, &part) }
        while out.count < atLeast {
            switch stage {
            case .head:
                writeHead()
            case .rows(let first):
                var index = first
                while index < rowCount && out.count < atLeast {
                    // The layout of `array(_:indent:_:)` at indent 2.
                    literal("  ")
                    file(row(index))
                    index += 1
                    literal(index == rowCount ? "\n" : ",\n")
                }
                if index == rowCount {
                    literal("]")
                    stage = .tail
                } else {
                    stage = .rows(index)
                }
            case .tail:
                literal(",\n")
                object(tailFields, indent: 2)
                literal("}")
                stage = .done
            case .done:
                return !out.isEmpty
            }
        }
        return true
    }

    private mutating func writeHead() {
        literal("{\n")
        for (key, value) in headFields {
            append("  ")
            string(key)
            literal(" : ")
            value(&self)
            literal(",\n")
        }
        literal("  \"files\" : ")
        if rowCount == 0 {
            literal("[\n\n]")
            stage = .tail
        } else {
            literal("[\n")
            stage = .rows(0)
        }
    }

    /// The top-level fields sorted before `files` (`compressionLevel` is always there).
    private var headFields: [(String, (inout ManifestWriter) -> Void)] {
        let m = manifest
        var fields: [(String, (inout ManifestWriter) -> Void)] = []
        if let base = m.base { fields.append(("base", { $0.base(base) })) }
        if let chainLength = m.chainLength { fields.append(("chainLength", { $0.integer(Int64(chainLength)) })) }
        fields += [
            ("compressionLevel", { $0.integer(Int64(m.compressionLevel)) }),
            ("createdAt", { $0.string(Self.timestamp(m.createdAt)) }),
            ("databases", { w in w.array(m.databases, indent: 2) { w, d in w.database(d) } }),
        ]
        return fields
    }

    /// The top-level fields sorted after `files` (`format` is always there).
    private var tailFields: [(String, (inout ManifestWriter) -> Void)] {
        let m = manifest
        var fields: [(String, (inout ManifestWriter) -> Void)] = [("format", { $0.integer(Int64(m.format)) })]
        if let hashSalt = m.hashSalt { fields.append(("hashSalt", { $0.string(hashSalt) })) }
        fields.append(("hostName", { $0.string(m.hostName) }))
        if let kind = m.kind { fields.append(("kind", { $0.string(kind) })) }
        if let leftOut = m.leftOut { fields.append(("leftOut", { w in w.array(leftOut, indent: 2) { w, x in w.string(x) } })) }
        if let outside = m.outsideLinks {
            fields.append(("outsideLinks", { w in w.array(outside, indent: 2) { w, x in w.string(x) } }))
        }
        if let pageDeltas = m.pageDeltas {
            fields.append(("pageDeltas", { w in w.array(pageDeltas, indent: 2) { w, d in w.pageDelta(d) } }))
        }
        if let pageMaps = m.pageMaps {
            fields.append(("pageMaps", { w in w.array(pageMaps, indent: 2) { w, p in w.pageMap(p) } }))
        }
        if let proofSalt = m.proofSalt { fields.append(("proofSalt", { $0.string(proofSalt) })) }
        if let rootMode = m.rootMode { fields.append(("rootMode", { $0.integer(Int64(rootMode)) })) }
        if let rootMtime = m.rootMtime { fields.append(("rootMtime", { $0.integer(rootMtime) })) }
        fields += [
            ("sourcePath", { $0.string(m.sourcePath) }),
            ("tool", { $0.string(m.tool) }),
            ("toolVersion", { $0.string(m.toolVersion) }),
        ]
        return fields
    }

    /// One `files` row, written field by field without intermediate values: there is one
    /// per entry, so this is where the time goes.
    private mutating func file(_ f: Manifest.File) {
        literal("{\n")
        if let hashes = f.deflateBlockHashes {
            literal("      \"deflateBlockHashes\" : ")
            array(hashes, indent: 6) { w, h in w.string(h.hex) }
            literal(",\n")
        }
        if let blocks = f.deflateBlocks {
            literal("      \"deflateBlocks\" : ")
            array(blocks, indent: 6) { w, b in w.integer(Int64(b)) }
            literal(",\n")
        }
        if let size = f.deflateBlockSize {
            literal("      \"deflateBlockSize\" : ")
            integer(Int64(size))
            literal(",\n")
        }
        if let target = f.linkTarget {
            literal("      \"linkTarget\" : ")
            string(target)
            literal(",\n")
        }
        literal("      \"mode\" : ")
        integer(Int64(f.mode))
        literal(",\n      \"mtime\" : ")
        integer(f.mtime)
        literal(",\n      \"path\" : ")
        string(f.path)
        if let sha256 = f.sha256 {
            literal(",\n      \"sha256\" : ")
            string(sha256)
        }
        literal(",\n      \"size\" : ")
        integer(f.size)
        if let source = f.source {
            literal(",\n      \"source\" : ")
            string(source)
        }
        literal(",\n      \"type\" : ")
        string(f.type)
        literal("\n    }")
    }

    private mutating func database(_ d: Manifest.Database) {
        append("{\n")
        var fields: [(String, (inout ManifestWriter) -> Void)] = [
            ("journalMode", { $0.string(d.journalMode) }),
            ("pageCount", { $0.integer(Int64(d.pageCount)) }),
            ("pageSize", { $0.integer(Int64(d.pageSize)) }),
            ("path", { $0.string(d.path) }),
        ]
        if let proof = d.proof { fields.append(("proof", { $0.proof(proof) })) }
        fields.append(("snapshotMethod", { $0.string(d.snapshotMethod) }))
        object(fields, indent: 6)
        append("    }")
    }

    private mutating func proof(_ p: Manifest.DatabaseProof) {
        append("{\n")
        var fields: [(String, (inout ManifestWriter) -> Void)] = [
            ("check", { $0.string(p.check) }),
            ("key", { $0.string(p.key) }),
        ]
        if let keyId = p.keyId { fields.append(("keyId", { $0.string(keyId) })) }
        fields += [
            ("mac", { $0.string(p.mac) }),
            ("sha256", { $0.string(p.sha256) }),
            ("size", { $0.integer(p.size) }),
        ]
        object(fields, indent: 8)
        append("      }")
    }

    private mutating func base(_ b: Manifest.Base) {
        append("{\n")
        object(
            [
                ("createdAt", { $0.string(Self.timestamp(b.createdAt)) }),
                ("manifestSHA256", { $0.string(b.manifestSHA256) }),
                ("name", { $0.string(b.name) }),
            ], indent: 4)
        append("  }")
    }

    private mutating func pageDelta(_ d: Manifest.PageDelta) {
        append("{\n")
        var fields: [(String, (inout ManifestWriter) -> Void)] = []
        if let hashes = d.deflateBlockHashes {
            fields.append(("deflateBlockHashes", { w in w.array(hashes, indent: 8) { w, h in w.string(h.hex) } }))
        }
        if let blocks = d.deflateBlocks {
            fields.append(("deflateBlocks", { w in w.array(blocks, indent: 8) { w, b in w.integer(Int64(b)) } }))
        }
        if let size = d.deflateBlockSize { fields.append(("deflateBlockSize", { $0.integer(Int64(size)) })) }
        fields += [
            ("path", { $0.string(d.path) }),
            ("sha256", { $0.string(d.sha256) }),
            ("size", { $0.integer(d.size) }),
        ]
        object(fields, indent: 6)
        append("    }")
    }

    private mutating func pageMap(_ p: Manifest.PageMap) {
        append("{\n")
        object(
            [
                ("complete", { $0.append(p.complete ? "true" : "false") }),
                ("hash", { $0.string(p.hash) }),
                ("path", { $0.string(p.path) }),
            ], indent: 6)
        append("    }")
    }

    /// `"key" : value` lines at `indent` spaces, comma-separated; keys given in sorted order.
    private mutating func object(_ fields: [(String, (inout ManifestWriter) -> Void)], indent: Int) {
        for (number, (key, value)) in fields.enumerated() {
            append(String(repeating: " ", count: indent))
            string(key)
            append(" : ")
            value(&self)
            append(number == fields.count - 1 ? "\n" : ",\n")
        }
    }

    private mutating func array<T>(_ items: [T], indent: Int, _ element: (inout ManifestWriter, T) -> Void) {
        guard !items.isEmpty else { return append("[\n\n" + String(repeating: " ", count: indent - 2) + "]") }
        append("[\n")
        for (number, item) in items.enumerated() {
            append(String(repeating: " ", count: indent))
            element(&self, item)
            append(number == items.count - 1 ? "\n" : ",\n")
        }
        append(String(repeating: " ", count: indent - 2) + "]")
    }

    /// A JSON string: quote, backslash and control characters escaped, `/` left as it is.
    private mutating func string(_ value: String) {
        out.append(UInt8(ascii: "\""))
        var value = value
        value.withUTF8 { bytes in
            // Runs of bytes that need no escape are copied at once.
            var runStart = 0
            for (offset, byte) in bytes.enumerated() where byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") {
                out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<offset]))
                runStart = offset + 1
                switch byte {
                case UInt8(ascii: "\""): literal("\\\"")
                case UInt8(ascii: "\\"): literal("\\\\")
                case 0x0a: literal("\\n")
                case 0x0d: literal("\\r")
                case 0x09: literal("\\t")
                case 0x08: literal("\\b")
                case 0x0c: literal("\\f")
                default: append(String(format: "\\u%04x", byte))
                }
            }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart...]))
        }
        out.append(UInt8(ascii: "\""))
    }

    /// A decimal integer, as `JSONEncoder` writes it.
    private mutating func integer(_ value: Int64) {
        if value < 0 { out.append(UInt8(ascii: "-")) }
        var magnitude = value.magnitude
        var divisor: UInt64 = 1
        while divisor <= magnitude / 10 { divisor *= 10 }
        repeat {
            out.append(UInt8(ascii: "0") + UInt8(magnitude / divisor))
            magnitude %= divisor
            divisor /= 10
        } while divisor > 0
    }

    private mutating func literal(_ text: StaticString) {
        out.append(contentsOf: UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    private mutating func append(_ ascii: String) { out.append(contentsOf: ascii.utf8) }

    /// The form `JSONDecoder`'s `.iso8601` strategy reads: whole seconds, UTC.
    static func timestamp(_ date: Date) -> String {
        // Not ISO8601DateFormatter: it loads ICU's calendar data, megabytes of the program's pages.
        UTCTimestamp.iso8601(date)
    }
}
