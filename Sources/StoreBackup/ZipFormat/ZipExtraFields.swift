/// A ZIP header's extra fields: (id, length, body) records, little-endian.
enum ZipExtraFields {
    /// The body of the first field `id` in `extra`, or nil (also when a record before it
    /// runs past the end).
    static func body(of id: UInt16, in extra: UnsafeRawBufferPointer) -> [UInt8]? {
        var position = 0
        while position + 4 <= extra.count {
            let fieldID = UInt16(extra[position]) | UInt16(extra[position + 1]) << 8
            let length = Int(extra[position + 2]) | Int(extra[position + 3]) << 8
            guard position + 4 + length <= extra.count else { return nil }
            if fieldID == id { return Array(extra[position + 4..<position + 4 + length]) }
            position += 4 + length
        }
        return nil
    }
}
