import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Descriptors of folders ``ConfinedTree`` has already walked to, by relative path.
///
/// The files of one folder come one after another in an archive; walking from the root for
/// each of them cost a `mkdirat`, an `openat` and a `close` per folder on the way, more
/// system calls than writing a small file itself. A descriptor is lent out while a caller
/// uses it, so it is never closed under a caller: the least recently used idle one makes
/// room for a new folder, and a folder that ``forget(under:)`` drops (the tree removed it)
/// is closed once its last borrower gives it back.
final class OpenFolders: Sendable {
    /// Folders kept open at most, well below the process's descriptor limit.
    static let limit = 64

    private struct Folder {
        var descriptor: Int32
        var borrowers: Int
        var lastUse: Int
    }

    private struct State {
        var byPath: [String: Folder] = [:]
        /// Forgotten folders still lent out: descriptor -> borrowers.
        var forgotten: [Int32: Int] = [:]
        var clock = 0
    }

    private let state = Locked(State())

    deinit {
        state.withLock { state in
            for folder in state.byPath.values { close(folder.descriptor) }
            for descriptor in state.forgotten.keys { close(descriptor) }
        }
    }

    /// The descriptor kept for `path`, lent until ``giveBack(_:path:)``; nil if none is kept.
    func borrow(_ path: String) -> Int32? {
        state.withLock { state in
            guard var folder = state.byPath[path] else { return nil }
            state.clock += 1
            folder.borrowers += 1
            folder.lastUse = state.clock
            state.byPath[path] = folder
            return folder.descriptor
        }
    }

    /// Keeps `descriptor` (just opened for `path`) and lends it to the caller; false when
    /// there is no room (every kept folder is lent out) or another thread kept `path` first:
    /// then the caller keeps and closes its descriptor itself.
    func keep(_ descriptor: Int32, path: String) -> Bool {
        state.withLock { state in
            guard state.byPath[path] == nil else { return false }
            if state.byPath.count >= Self.limit {
                guard let idle = state.byPath.filter({ $0.value.borrowers == 0 }).min(by: { $0.value.lastUse < $1.value.lastUse })
                else { return false }
                close(idle.value.descriptor)
                state.byPath[idle.key] = nil
            }
            state.clock += 1
            state.byPath[path] = Folder(descriptor: descriptor, borrowers: 1, lastUse: state.clock)
            return true
        }
    }

    /// Returns what ``borrow(_:)`` or ``keep(_:path:)`` lent.
    func giveBack(_ descriptor: Int32, path: String) {
        state.withLock { state in
            if var folder = state.byPath[path], folder.descriptor == descriptor {
                folder.borrowers -= 1
                state.byPath[path] = folder
            } else if let borrowers = state.forgotten[descriptor] {
                if borrowers == 1 {
                    state.forgotten[descriptor] = nil
                    close(descriptor)
                } else {
                    state.forgotten[descriptor] = borrowers - 1
                }
            }
        }
    }

    /// Drops every folder at or below `path` (the tree removed it): a folder made again under
    /// the same name is walked to afresh.
    func forget(under path: String) {
        state.withLock { state in
            for (key, folder) in state.byPath where key == path || key.hasPrefix(path + "/") {
                state.byPath[key] = nil
                if folder.borrowers == 0 {
                    close(folder.descriptor)
                } else {
                    state.forgotten[folder.descriptor] = folder.borrowers
                }
            }
        }
    }
}
