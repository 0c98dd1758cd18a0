import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The one policy for every temporary file or folder storebackup makes.
///
/// A temporary is named `.storebackup-tmp-<pid>-<purpose>-<random><suffix>`: the prefix says
/// it is ours, the pid says who owns it. It lives in one of the places a sweep looks at:
/// beside the stores directory, in a local destination folder, in `TMPDIR`, or beside the
/// state file it replaces. Every command that touches one of those places first removes
/// the temporaries whose owner is dead (a kill -9, a power cut), SQLite companions of a
/// temporary database (`-wal`, `-shm`, `-journal`) included, because they share its name.
enum ScratchFiles {
    static let prefix = ".storebackup-tmp-"

    /// A fresh temporary path in `folder`, owned by this process; nothing is created.
    static func path(in folder: String, purpose: String, suffix: String = "") -> String {
        let random = UUID().uuidString.prefix(13).lowercased()
        return folder + "/" + prefix + "\(getpid())-\(purpose)-\(random)" + suffix
    }

    /// `TMPDIR` (or `/tmp`) without a trailing slash.
    static var temporaryDirectory: String {
        var path = NSTemporaryDirectory()
        while path.count > 1 && path.hasSuffix("/") { path.removeLast() }
        return path
    }

    /// The owning pid when `name` is a storebackup temporary: ours, or one left by an older
    /// version (verify's `storebackup-verify-<pid>-…` folder, restore's download).
    static func owner(of name: String) -> Int32? {
        for marker in [prefix, "storebackup-verify-"] where name.hasPrefix(marker) {
            return Int32(name.dropFirst(marker.count).prefix(while: \.isNumber))
        }
        // The download temporary of earlier versions: `.<store>.storebackup-download-<pid>.zip`.
        if name.hasPrefix("."), let range = name.range(of: ".storebackup-download-"), name.hasSuffix(".zip") {
            return Int32(name[range.upperBound...].prefix(while: \.isNumber))
        }
        return nil
    }

    /// True when no process has this pid any more.
    static func isDead(_ pid: Int32) -> Bool {
        pid > 0 && kill(pid, 0) != 0 && errno == ESRCH
    }

    /// Removes every temporary in `folder` whose owner is dead; returns the removed names.
    /// A folder that does not exist or cannot be read has nothing to sweep.
    @discardableResult
    static func sweep(_ folder: String) -> [String] {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: folder) else { return [] }
        var removed: [String] = []
        for name in names {
            guard let pid = owner(of: name), pid != getpid(), isDead(pid) else { continue }
            let path = folder + "/" + name
            if (try? FileSystem.removeTree(path)) != nil { removed.append(name) }
        }
        return removed
    }

    /// Sweeps the places a command on a store uses: the folder that holds it and `TMPDIR`.
    static func sweep(besideStoreIn parent: String) {
        sweep(parent)
        sweep(temporaryDirectory)
    }
}
