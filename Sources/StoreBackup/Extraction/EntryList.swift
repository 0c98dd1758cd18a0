/// Some of an archive's entries, as positions into the reader's one list: 4 bytes an entry
/// instead of a copy of each ``ArchiveEntry`` (the files, the files by size). The list is
/// shared, not copied.
struct EntryList: RandomAccessCollection, Sendable {
    /// The reader's entries, all of them.
    let all: [ArchiveEntry]
    /// The ones in this list, as positions in ``all``, in this list's order.
    let positions: [UInt32]

    /// The entries of `all` that `include` accepts, in their order.
    init(_ all: [ArchiveEntry], where include: (ArchiveEntry) -> Bool = { _ in true }) {
        self.all = all
        var positions: [UInt32] = []
        for (position, entry) in all.enumerated() where include(entry) { positions.append(UInt32(position)) }
        self.positions = positions
    }

    private init(all: [ArchiveEntry], positions: [UInt32]) {
        self.all = all
        self.positions = positions
    }

    var startIndex: Int { 0 }
    var endIndex: Int { positions.count }
    subscript(index: Int) -> ArchiveEntry { all[Int(positions[index])] }

    /// The entries of this list that `include` accepts, in this list's order.
    func keeping(_ include: (ArchiveEntry) -> Bool) -> EntryList {
        EntryList(all: all, positions: positions.filter { include(all[Int($0)]) })
    }

    /// This list in the order `precedes` gives.
    func ordered(by precedes: (ArchiveEntry, ArchiveEntry) -> Bool) -> EntryList {
        EntryList(all: all, positions: positions.sorted { precedes(all[Int($0)], all[Int($1)]) })
    }
}
