import Foundation

/// Writes a manifest as JSON text row by row, in the layout `JSONEncoder` gives with
/// `.prettyPrinted` and `.sortedKeys`. `JSONEncoder` first builds a tree of every value of
/// the document, which costs far more memory per file row than the text itself, at the
/// end of `create`, when the archive's other per-entry state is still alive.
struct ManifestWriter {
    private var text = Data()
    /// Bytes gathered before they go into `text` in one append: Data's append of a byte or
    /// a short run costs far more than an array's.
    private var pending: [UInt8] = []

    static func encode(_ manifest: Manifest) -> Data {
        var writer = ManifestWriter()
        writer.text.reserveCapacity(1024 + manifest.files.count * 320)
        writer.pending.reserveCapacity(64 << 10)
        writer.write(manifest)
        writer.flush()
        return writer.text
    }

    private mutating func flush() {
        text.append(contentsOf: pending)
        pending.removeAll(keepingCapacity: true)
    }

    private mutating func write(_ m: Manifest) {
        append("{\n")
        var fields: [(String, (inout ManifestWriter) -> Void)] = []
        if let base = m.base { fields.append(("base", { $0.base(base) })) }
        if let chainLength = m.chainLength { fields.append(("chainLength", { $0.append(String(chainLength)) })) }
        fields += [
            ("compressionLevel", { $0.append(String(m.compressionLevel)) }),
            ("createdAt", { $0.string(Self.timestamp(m.createdAt)) }),
            ("databases", { w in w.array(m.databases, indent: 2) { w, d in w.database(d) } }),
            ("files", { w in w.array(m.files, indent: 2) { w, f in w.file(f) } }),
            ("format", { $0.append(String(m.format)) }),
        ]
        if let hashSalt = m.hashSalt { fields.append(("hashSalt", { $0.string(hashSalt) })) }
        fields.append(("hostName", { $0.string(m.hostName) }))
        if let kind = m.kind { fields.append(("kind", { $0.string(kind) })) }
        if let leftOut = m.leftOut { fields.append(("leftOut", { w in w.array(leftOut, indent: 2) { w, x in w.string(x) } })) }
        if let outside = m.outsideLinks {
            fields.append(("outsideLinks", { w in w.array(outside, indent: 2) { w, x in w.string(x) } }))
        }
        if let pageMaps = m.pageMaps {
            fields.append(("pageMaps", { w in w.array(pageMaps, indent: 2) { w, p in w.pageMap(p) } }))
        }
        if let rootMode = m.rootMode { fields.append(("rootMode", { $0.append(String(rootMode)) })) }
        if let rootMtime = m.rootMtime { fields.append(("rootMtime", { $0.append(String(rootMtime)) })) }
        fields += [
            ("sourcePath", { $0.string(m.sourcePath) }),
            ("tool", { $0.string(m.tool) }),
            ("toolVersion", { $0.string(m.toolVersion) }),
        ]
        object(fields, indent: 2)
        append("}")
    }

    private mutating func file(_ f: Manifest.File) {
        var fields: [(String, (inout ManifestWriter) -> Void)] = []
        if let blocks = f.deflateBlocks {
            fields.append(("deflateBlocks", { w in w.array(blocks, indent: 6) { w, b in w.append(String(b)) } }))
        }
        if let size = f.deflateBlockSize { fields.append(("deflateBlockSize", { $0.append(String(size)) })) }
        if let target = f.linkTarget { fields.append(("linkTarget", { $0.string(target) })) }
        fields += [
            ("mode", { $0.append(String(f.mode)) }),
            ("mtime", { $0.append(String(f.mtime)) }),
            ("path", { $0.string(f.path) }),
        ]
        if let sha256 = f.sha256 { fields.append(("sha256", { $0.string(sha256) })) }
        fields.append(("size", { $0.append(String(f.size)) }))
        if let source = f.source { fields.append(("source", { $0.string(source) })) }
        fields.append(("type", { $0.string(f.type) }))
        append("{\n")
        object(fields, indent: 6)
        append("    }")
    }

    private mutating func database(_ d: Manifest.Database) {
        append("{\n")
        object(
            [
                ("journalMode", { $0.string(d.journalMode) }),
                ("pageCount", { $0.append(String(d.pageCount)) }),
                ("pageSize", { $0.append(String(d.pageSize)) }),
                ("path", { $0.string(d.path) }),
                ("snapshotMethod", { $0.string(d.snapshotMethod) }),
            ], indent: 6)
        append("    }")
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
        pending.append(UInt8(ascii: "\""))
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "\""): append("\\\"")
            case UInt8(ascii: "\\"): append("\\\\")
            case 0x0a: append("\\n")
            case 0x0d: append("\\r")
            case 0x09: append("\\t")
            case 0x08: append("\\b")
            case 0x0c: append("\\f")
            case ..<0x20: append(String(format: "\\u%04x", byte))
            default: pending.append(byte)
            }
        }
        pending.append(UInt8(ascii: "\""))
        if pending.count >= 60 << 10 { flush() }
    }

    private mutating func append(_ ascii: String) { pending.append(contentsOf: ascii.utf8) }

    /// The form `JSONDecoder`'s `.iso8601` strategy reads: whole seconds, UTC.
    static func timestamp(_ date: Date) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.string(from: date)
    }
}
