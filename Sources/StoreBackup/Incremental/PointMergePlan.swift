import Foundation

/// Where each regular file of the newest of consecutive incrementals takes its content
/// from, followed part by part (oldest first) as a chain restore applies them: the base, or
/// the newest part that stored it whole, then the page deltas of the parts after that.
/// Only the current part's manifest is needed at each step.
struct PointMergePlan {
    /// Where a file's bytes start from.
    enum Origin: Equatable {
        /// The base of the oldest part holds them.
        case base
        /// Stored whole in the part of this index, as its manifest lists it there.
        case whole(part: Int, row: Manifest.File)
    }

    /// A part's page delta of a database.
    struct Delta: Equatable {
        let part: Int
        /// The database's size in that part.
        let size: Int64
    }

    struct Content: Equatable {
        var origin: Origin
        /// The page deltas (parts ascending) that patch it since its origin.
        var deltas: [Delta]
    }

    /// By path, the regular files of the last part added.
    private(set) var contents: [String: Content] = [:]

    /// Follows part `index` (the next one, after ``add(_:part:name:)`` of each before it), named
    /// `name` in messages, whose links were checked.
    mutating func add(_ manifest: Manifest, part index: Int, name: String) throws {
        var next: [String: Content] = [:]
        next.reserveCapacity(contents.count)
        for file in manifest.files where ChainLinkRule.isRegular(file.type) {
            // In the oldest part, anything not stored is the base's.
            let before = index == 0 ? Content(origin: .base, deltas: []) : contents[file.path]
            switch file.source {
            case nil:
                next[file.path] = Content(origin: .whole(part: index, row: file), deltas: [])
            case "base"?, "pages"?:
                guard var content = before else {
                    throw StoreBackupError.brokenChain(name: name, reason: "\(file.path) is taken from its base, which does not hold it")
                }
                if file.source == "pages" { content.deltas.append(Delta(part: index, size: file.size)) }
                next[file.path] = content
            case let source?:
                throw StoreBackupError.corruptArchive(name: name, reason: "\(file.path) has the unknown source \"\(source)\"")
            }
        }
        contents = next
    }
}
