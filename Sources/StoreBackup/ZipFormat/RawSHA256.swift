/// A SHA-256 as its 32 bytes, for the manifest's rows: a hex `String` of it costs a heap
/// block of about 110 bytes per file, this costs none.
struct RawSHA256: Sendable, Hashable {
    /// The bytes in order, eight to a word, the first byte highest.
    private let words: (UInt64, UInt64, UInt64, UInt64)

    /// nil unless `hex` is exactly 64 lowercase hex digits (the form storebackup writes),
    /// so that ``hex`` gives back the very text it came from.
    init?(hex: String) {
        self.init(hexBytes: hex.utf8)
    }

    /// ``init(hex:)`` from the text's UTF-8 bytes (the manifest's decoder has no `String`).
    init?(hexBytes: some Sequence<UInt8>) {
        var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        var count = 0
        for byte in hexBytes {
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            default: return nil
            }
            guard count < 64 else { return nil }
            let shifted = UInt64(digit) << UInt64(60 - (count % 16) * 4)
            switch count / 16 {
            case 0: words.0 |= shifted
            case 1: words.1 |= shifted
            case 2: words.2 |= shifted
            default: words.3 |= shifted
            }
            count += 1
        }
        guard count == 64 else { return nil }
        self.words = words
    }

    /// From a digest's 32 bytes (a block's hash as the writer computes it); nil for any other count.
    init?(bytes: some Sequence<UInt8>) {
        var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        var count = 0
        for byte in bytes {
            guard count < 32 else { return nil }
            let shifted = UInt64(byte) << UInt64(56 - (count % 8) * 8)
            switch count / 8 {
            case 0: words.0 |= shifted
            case 1: words.1 |= shifted
            case 2: words.2 |= shifted
            default: words.3 |= shifted
            }
            count += 1
        }
        guard count == 32 else { return nil }
        self.words = words
    }

    static func == (a: RawSHA256, b: RawSHA256) -> Bool {
        a.words.0 == b.words.0 && a.words.1 == b.words.1 && a.words.2 == b.words.2 && a.words.3 == b.words.3
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(words.0)
        hasher.combine(words.1)
        hasher.combine(words.2)
        hasher.combine(words.3)
    }

    /// The 64 lowercase hex digits.
    var hex: String {
        String(unsafeUninitializedCapacity: 64) { text in
            Self.write(words.0, into: text, at: 0)
            Self.write(words.1, into: text, at: 16)
            Self.write(words.2, into: text, at: 32)
            Self.write(words.3, into: text, at: 48)
            return 64
        }
    }

    private static func write(_ word: UInt64, into text: UnsafeMutableBufferPointer<UInt8>, at start: Int) {
        for nibble in 0..<16 {
            let digit = UInt8((word >> UInt64(60 - nibble * 4)) & 0xF)
            text[start + nibble] = digit < 10 ? UInt8(ascii: "0") + digit : UInt8(ascii: "a") + digit - 10
        }
    }
}
