/// What ``BTreeWalk`` reads of a b-tree page (sqlite.org/fileformat2.html, "B-tree Pages"):
/// its type, and an interior page's child page numbers with a table b-tree's divider keys.
enum BTreePage {
    static let indexInterior: UInt8 = 2
    static let tableInterior: UInt8 = 5
    static let indexLeaf: UInt8 = 10
    static let tableLeaf: UInt8 = 13

    struct Cell {
        var child: Int
        /// A table b-tree's divider: the largest rowid under `child`.
        var key: Int64?
    }

    /// Page 1 begins with the 100-byte database header; its b-tree header follows.
    private static func headerStart(_ page: Int) -> Int { page == 1 ? 100 : 0 }

    /// The page's b-tree type, nil when it is not a b-tree page.
    static func type(_ bytes: [UInt8], page: Int) -> UInt8? {
        let start = headerStart(page)
        guard bytes.count > start else { return nil }
        let type = bytes[start]
        return [indexInterior, tableInterior, indexLeaf, tableLeaf].contains(type) ? type : nil
    }

    /// An interior page of `type`: its cells in order and its right-most child; nil when
    /// the page is not one (or its cells do not fit in it).
    static func interior(_ bytes: [UInt8], page: Int, type: UInt8, rowids: Bool) -> (cells: [Cell], rightmost: Int)? {
        let start = headerStart(page)
        guard bytes.count >= start + 12, bytes[start] == type else { return nil }
        let count = Int(uint16(bytes, start + 3))
        let pointers = start + 12
        guard pointers + 2 * count <= bytes.count else { return nil }
        var cells: [Cell] = []
        cells.reserveCapacity(count)
        var previous: Int64?
        for index in 0..<count {
            let offset = Int(uint16(bytes, pointers + 2 * index))
            guard offset >= pointers + 2 * count, offset + 4 <= bytes.count else { return nil }
            var cell = Cell(child: Int(uint32(bytes, offset)), key: nil)
            if rowids {
                // Dividers ascend; anything else is not a table b-tree's interior page.
                guard let key = varint(bytes, offset + 4), previous.map({ key > $0 }) ?? true else { return nil }
                cell.key = key
                previous = key
            }
            cells.append(cell)
        }
        return (cells, Int(uint32(bytes, start + 8)))
    }

    static func uint16(_ bytes: [UInt8], _ at: Int) -> UInt16 {
        UInt16(bytes[at]) << 8 | UInt16(bytes[at + 1])
    }

    static func uint32(_ bytes: [UInt8], _ at: Int) -> UInt32 {
        UInt32(bytes[at]) << 24 | UInt32(bytes[at + 1]) << 16 | UInt32(bytes[at + 2]) << 8 | UInt32(bytes[at + 3])
    }

    /// SQLite's varint: up to 8 bytes of 7 bits (high bit: more follow), a 9th of 8 bits.
    static func varint(_ bytes: [UInt8], _ at: Int) -> Int64? {
        var value: UInt64 = 0
        for index in 0..<9 {
            guard at + index < bytes.count else { return nil }
            let byte = bytes[at + index]
            if index == 8 { return Int64(bitPattern: value << 8 | UInt64(byte)) }
            value = value << 7 | UInt64(byte & 0x7f)
            if byte & 0x80 == 0 { return Int64(bitPattern: value) }
        }
        return nil
    }
}
