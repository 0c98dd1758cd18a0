import Foundation

/// File names as the bytes Linux gives them, written as Swift strings without losing a byte.
///
/// A Linux name is any bytes but `/` and NUL: not necessarily UTF-8, possibly holding
/// control characters, and two spellings of `café` (NFC and NFD) are two files. A Swift
/// `String` cannot hold bytes that are not UTF-8, and it compares by canonical equivalence
/// (NFC and NFD spellings are `==` and hash alike), so every path storebackup handles is
/// kept in this escaped form, where equal strings always mean equal bytes:
///
/// - each `/`-separated component that is valid UTF-8, already in NFC and free of control
///   characters (C0, DEL, C1) is written as it is, except `%`, written `%25`;
/// - any other component is written byte by byte: printable ASCII except `%` as it is,
///   every other byte as `%XX` (two upper-case hex digits).
///
/// Two different byte strings never give canonically equivalent escaped forms: literal
/// components are NFC (and distinct NFC strings are never equivalent), escaped ones are
/// pure ASCII, and `/` never combines with its neighbours. The escaped form is what the
/// manifest (format 2), `ls` and messages show, and what `extract` and `ls` accept.
enum EscapedName {
    /// The escaped form of a path's (or name's) bytes.
    static func escape<Bytes: Collection>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
        // The common case, a plain ASCII name, costs one pass and no copy of the rules below.
        if bytes.allSatisfy({ $0 >= 0x20 && $0 < 0x7f && $0 != percent }) {
            return String(decoding: bytes, as: UTF8.self)
        }
        var result = ""
        var component: [UInt8] = []
        for byte in bytes {
            if byte == slash {
                result += escapeComponent(component) + "/"
                component.removeAll(keepingCapacity: true)
            } else {
                component.append(byte)
            }
        }
        return result + escapeComponent(component)
    }

    /// The escaped form of a path given as a Swift string (its UTF-8 bytes).
    static func escape(plain: String) -> String { escape(Array(plain.utf8)) }

    /// The bytes an escaped path stands for: `%XX` decoded, everything else as its UTF-8.
    /// A `%` not followed by two hex digits stands for itself (so a name typed by hand
    /// with a lone `%` still works).
    static func bytes(_ escaped: String) -> [UInt8] {
        let utf8 = Array(escaped.utf8)
        guard utf8.contains(percent) else { return utf8 }
        var result: [UInt8] = []
        result.reserveCapacity(utf8.count)
        var index = 0
        while index < utf8.count {
            if utf8[index] == percent, index + 2 < utf8.count,
                let high = hexValue(utf8[index + 1]), let low = hexValue(utf8[index + 2])
            {
                result.append(high << 4 | low)
                index += 3
            } else {
                result.append(utf8[index])
                index += 1
            }
        }
        return result
    }

    /// A path typed by a user (or read from `ls --json`) in its canonical escaped form:
    /// escapes decoded, then escaped again, so `café` typed in NFC finds the NFC file and
    /// `caf%C3%A9` finds it too.
    static func canonical(_ typed: String) -> String { escape(bytes(typed)) }

    /// Calls `body` with the NUL-terminated bytes of an escaped path, for a system call.
    static func withSystemPath<R>(_ escaped: String, _ body: (UnsafePointer<CChar>) throws -> R) rethrows -> R {
        var raw = bytes(escaped).map { CChar(bitPattern: $0) }
        raw.append(0)
        return try raw.withUnsafeBufferPointer { try body($0.baseAddress!) }
    }

    /// The escaped form of an absolute path given as a plain string (a stores directory,
    /// a scratch folder), to join with escaped relative paths.
    static func escapedRoot(_ plain: String) -> String { escape(plain: plain) }

    private static let percent = UInt8(ascii: "%")
    private static let slash = UInt8(ascii: "/")

    private static func escapeComponent(_ component: [UInt8]) -> String {
        if let text = String(validating: component, as: UTF8.self),
            !text.unicodeScalars.contains(where: isControl),
            isNFC(text)
        {
            guard component.contains(percent) else { return text }
            var result = ""
            for scalar in text.unicodeScalars {
                if scalar == "%" { result += "%25" } else { result.unicodeScalars.append(scalar) }
            }
            return result
        }
        var result = ""
        result.reserveCapacity(component.count * 3)
        for byte in component {
            if byte >= 0x20 && byte < 0x7f && byte != percent {
                result.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                result += "%" + hexDigits[Int(byte >> 4)] + hexDigits[Int(byte & 0xf)]
            }
        }
        return result
    }

    private static let hexDigits = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "A", "B", "C", "D", "E", "F"]

    /// C0 controls, DEL and the C1 controls: terminals act on them.
    static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7f...0x9f).contains(scalar.value)
    }

    /// True when `text` is in Unicode normalisation form C, compared scalar by scalar
    /// (`==` on strings would call any two spellings equal).
    private static func isNFC(_ text: String) -> Bool {
        if text.utf8.allSatisfy({ $0 < 0x80 }) { return true }
        return text.precomposedStringWithCanonicalMapping.unicodeScalars.elementsEqual(text.unicodeScalars)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
        default: return nil
        }
    }
}
