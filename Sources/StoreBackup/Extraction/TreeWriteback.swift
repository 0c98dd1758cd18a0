import CPosix
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Makes an unpacked tree durable, as ``TreeSync`` does, and starts on it while the tree is
/// still being unpacked: each time another ``passBytes`` of the files after the databases
/// have been written, a thread of its own runs a `syncfs`, so that the disk writes what is
/// done while the cores unpack the rest, and the final `syncfs` has only the last files left.
///
/// A store of many small files leaves them all to that one final sync (each file's own
/// writeback start was dearer, docs/dev/performance.md), which then ran alone after the
/// unpacking. The databases are not counted: each is fsynced as soon as it is written.
/// The passes wait for ``begin()``, which the unpacking calls once no database check is
/// left to run: until then the check is the longest step, the final sync already runs
/// beside it, and a pass would only take the kernel's CPU time from it.
///
/// Every pass goes through one descriptor, opened before the first file is written, so
/// that a writeback error of any pass, the last included, is reported (`syncfs` reports
/// the errors since the descriptor was opened) and fails the restore.
// Unchecked: `unsynced`, `stopping` and `failure` are used only while `condition` is held.
final class TreeWriteback: @unchecked Sendable {
    /// Bytes written between two passes while the tree is unpacked.
    static let passBytes: Int64 = 32 << 20

    let root: String
    private let descriptor: Int32
    private let condition = NSCondition()
    private var unsynced: Int64 = 0
    private var stopping = false
    private var begun = false
    /// The first error of a pass; rethrown by ``finish()``.
    private var failure: (any Error)?
    private var passes: WorkerPool.Group?

    init(root: String) throws {
        self.root = root
        descriptor = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else { throw StoreBackupError.io(path: root, operation: "open", errno: errno) }
        passes = WorkerPool.start(name: "storebackup-writeback", width: 1) { [self] _ in runPasses() }
    }

    deinit {
        stop()
        close(descriptor)
    }

    /// Notes `bytes` more written into the tree.
    func wrote(_ bytes: Int64) {
        condition.lock()
        unsynced += bytes
        if unsynced >= Self.passBytes { condition.signal() }
        condition.unlock()
    }

    /// Lets the passes run (see the type's comment).
    func begin() {
        condition.lock()
        begun = true
        condition.signal()
        condition.unlock()
    }

    /// Stops the passes (waiting for one under way), then syncs the whole tree once more.
    /// Throws the first error of any pass.
    func finish() throws {
        stop()
        condition.lock()
        let failure = self.failure
        condition.unlock()
        if let failure { throw failure }
        try TreeSync.sync(root, descriptor: descriptor)
    }

    /// Ends the passes without the final sync (the unpacking failed); waits for one under way.
    func stop() {
        condition.lock()
        stopping = true
        condition.signal()
        let passes = self.passes
        self.passes = nil
        condition.unlock()
        passes?.join()
    }

    private func runPasses() {
        while true {
            condition.lock()
            while !stopping && (!begun || unsynced < Self.passBytes) { condition.wait() }
            if stopping {
                condition.unlock()
                return
            }
            unsynced = 0
            condition.unlock()
            if sb_syncfs(descriptor) == 0 { continue }
            let error = errno
            condition.lock()
            // Without syncfs the final sync fsyncs every file instead; no pass can help it.
            if error != ENOSYS && failure == nil {
                failure = StoreBackupError.io(path: root, operation: "syncfs", errno: error)
            }
            stopping = true
            condition.unlock()
            return
        }
    }
}
