import Foundation

/// `Content-Range: bytes FIRST-LAST/TOTAL` (TOTAL may be `*`), read in one place for the
/// transport's resume checks and every backend's ranged downloads.
struct ContentRange: Equatable {
    var first: Int64
    var last: Int64
    var total: Int64?

    init?(_ text: String) {
        let value = text.trimmingCharacters(in: .whitespaces)
        guard value.lowercased().hasPrefix("bytes "), let dash = value.firstIndex(of: "-"),
            let slash = value.firstIndex(of: "/"), dash < slash,
            let first = Int64(value[value.index(value.startIndex, offsetBy: 6)..<dash].trimmingCharacters(in: .whitespaces)),
            let last = Int64(value[value.index(after: dash)..<slash]),
            first >= 0, last >= first
        else { return nil }
        // A server's header: a range that ends beyond the total it states is not one.
        let total = Int64(value[value.index(after: slash)...])
        if let total, total <= last { return nil }
        self.first = first
        self.last = last
        self.total = total
    }

    /// The object's whole size from an answer's `Content-Range`, in either form: a range
    /// (`bytes 0-9/SIZE`) or the `bytes */SIZE` a 416 carries. nil when it does not say.
    static func completeLength(of response: TransferResponse) -> Int64? {
        guard let range = response.header("content-range"), let slash = range.lastIndex(of: "/") else { return nil }
        guard let total = Int64(range[range.index(after: slash)...].trimmingCharacters(in: .whitespaces)),
            total >= 0
        else { return nil }
        return total
    }
}
