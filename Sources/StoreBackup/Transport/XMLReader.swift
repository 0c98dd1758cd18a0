import Foundation

/// Reads the XML that S3 and WebDAV servers answer with into an ``XMLElement`` tree: UTF-8
/// elements, text, the five predefined entities and character references, CDATA, comments
/// and processing instructions. Attributes are read past but not kept. A document type
/// declaration is refused, as are unknown entities, mismatched tags and invalid UTF-8: no
/// server storebackup talks to sends them, and a parser that expands entities is an attack
/// surface (it is also why this is not Foundation's XMLParser, which brings libxml2 and the
/// system's ICU into every run).
struct XMLReader {
    /// Elements nested deeper than this are refused (listings are four or five deep).
    static let maxDepth = 64

    private let bytes: [UInt8]
    private var position = 0

    init(_ data: Data) { bytes = [UInt8](data) }

    struct Malformed: Error {
        let reason: String
    }

    /// The document's root element.
    mutating func read() throws -> XMLElement {
        // The open elements, outermost first, with their names as written.
        var stack: [XMLElement] = []
        var openNames: [String] = []
        var root: XMLElement?
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { position = 3 }  // A UTF-8 byte order mark.
        while position < bytes.count {
            if bytes[position] != UInt8(ascii: "<") {
                let text = try readText()
                if !stack.isEmpty {
                    stack[stack.count - 1].text += text
                } else if !text.allSatisfy(\.isWhitespace) {
                    throw Malformed(reason: "text outside the root element")
                }
            } else if skip("<!--") {
                try skipPast("-->")
            } else if skip("<![CDATA[") {
                let start = position
                try skipPast("]]>")
                guard !stack.isEmpty else { throw Malformed(reason: "CDATA outside the root element") }
                stack[stack.count - 1].text += try string(bytes[start..<(position - 3)])
            } else if skip("<?") {
                try skipPast("?>")
            } else if skip("<!") {
                throw Malformed(reason: "a document type declaration")
            } else if skip("</") {
                let name = try readName()
                skipWhitespace()
                guard skip(">") else { throw Malformed(reason: "an unterminated end tag") }
                guard openNames.popLast() == name, let element = stack.popLast() else {
                    throw Malformed(reason: "an end tag </\(name)> that closes no open element")
                }
                if stack.isEmpty { root = element } else { stack[stack.count - 1].children.append(element) }
            } else {
                position += 1
                guard root == nil else { throw Malformed(reason: "a second root element") }
                let name = try readName()
                let selfClosing = try skipAttributes()
                let element = XMLElement(name: Self.localName(name))
                if selfClosing {
                    if stack.isEmpty { root = element } else { stack[stack.count - 1].children.append(element) }
                } else {
                    guard stack.count < Self.maxDepth else { throw Malformed(reason: "elements nested too deep") }
                    stack.append(element)
                    openNames.append(name)
                }
            }
        }
        guard stack.isEmpty, let root else { throw Malformed(reason: stack.isEmpty ? "no element" : "an unclosed element") }
        return root
    }

    /// "D:href" → "href": namespaces are not told apart (the listings use one each).
    private static func localName(_ name: String) -> String {
        name.split(separator: ":").last.map(String.init) ?? name
    }

    private mutating func skip(_ literal: StaticString) -> Bool {
        let count = literal.utf8CodeUnitCount
        guard position + count <= bytes.count else { return false }
        for offset in 0..<count where bytes[position + offset] != literal.utf8Start[offset] { return false }
        position += count
        return true
    }

    private mutating func skipPast(_ literal: StaticString) throws {
        while position < bytes.count {
            if skip(literal) { return }
            position += 1
        }
        throw Malformed(reason: "an unterminated \(literal)")
    }

    private mutating func skipWhitespace() {
        while position < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[position]) { position += 1 }
    }

    private mutating func readName() throws -> String {
        let start = position
        while position < bytes.count, !" \t\r\n/>=".utf8.contains(bytes[position]) { position += 1 }
        guard position > start else { throw Malformed(reason: "a tag without a name") }
        return try string(bytes[start..<position])
    }

    /// Reads past a start tag's attributes to its `>`; true when it ends with `/>`.
    private mutating func skipAttributes() throws -> Bool {
        while true {
            skipWhitespace()
            guard position < bytes.count else { throw Malformed(reason: "an unterminated start tag") }
            if skip("/>") { return true }
            if skip(">") { return false }
            _ = try readName()
            skipWhitespace()
            guard skip("=") else { throw Malformed(reason: "an attribute without a value") }
            skipWhitespace()
            guard position < bytes.count, bytes[position] == UInt8(ascii: "\"") || bytes[position] == UInt8(ascii: "'") else {
                throw Malformed(reason: "an attribute value without quotes")
            }
            let quote = bytes[position]
            position += 1
            while position < bytes.count, bytes[position] != quote {
                guard bytes[position] != UInt8(ascii: "<") else { throw Malformed(reason: "a < in an attribute value") }
                position += 1
            }
            guard position < bytes.count else { throw Malformed(reason: "an unterminated attribute value") }
            position += 1
        }
    }

    /// Text up to the next `<`, with its references replaced.
    private mutating func readText() throws -> String {
        var text = ""
        var start = position
        while position < bytes.count, bytes[position] != UInt8(ascii: "<") {
            guard bytes[position] == UInt8(ascii: "&") else {
                position += 1
                continue
            }
            text += try string(bytes[start..<position])
            position += 1
            let nameStart = position
            while position < bytes.count, bytes[position] != UInt8(ascii: ";") {
                guard position - nameStart < 12 else { throw Malformed(reason: "an unterminated reference") }
                position += 1
            }
            guard position < bytes.count else { throw Malformed(reason: "an unterminated reference") }
            text += try Self.replacement(of: try string(bytes[nameStart..<position]))
            position += 1
            start = position
        }
        text += try string(bytes[start..<position])
        return text
    }

    private static func replacement(of reference: String) throws -> String {
        switch reference {
        case "lt": return "<"
        case "gt": return ">"
        case "amp": return "&"
        case "quot": return "\""
        case "apos": return "'"
        default:
            let hex = reference.hasPrefix("#x") || reference.hasPrefix("#X")
            let digits = reference.dropFirst(hex ? 2 : 1)
            guard reference.hasPrefix("#"), !digits.isEmpty, let value = UInt32(digits, radix: hex ? 16 : 10),
                let scalar = Unicode.Scalar(value), value != 0
            else { throw Malformed(reason: "an unknown reference &\(reference);") }
            return String(Character(scalar))
        }
    }

    private func string(_ slice: ArraySlice<UInt8>) throws -> String {
        guard let text = String(validating: slice, as: UTF8.self) else { throw Malformed(reason: "text that is not UTF-8") }
        return text
    }
}
