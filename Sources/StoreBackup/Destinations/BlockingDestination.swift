import Foundation

/// A destination written as blocking calls (libcurl's easy interface), each taking the
/// operation's cancellation flag. The extension below is the one adapter to
/// ``BackupDestination``'s async operations: each runs on a thread of its own (never Swift's
/// cooperative pool, which must not block), and cancelling the task sets the flag.
protocol BlockingDestination: BackupDestination {
    /// Names the threads an operation runs on, e.g. `storebackup-s3` (`storebackup-s3-upload`).
    var threadName: String { get }
    func listBackups(cancel: CancellationFlag) throws -> [BackupListing]
    func upload(file: String, as name: String, progress: ProgressHandler?, cancel: CancellationFlag) throws
    func download(_ name: String, to file: String, progress: ProgressHandler?, cancel: CancellationFlag) throws
    func delete(_ name: String, cancel: CancellationFlag) throws
    func preflight(cancel: CancellationFlag) throws
    func staleUploads(olderThan age: Double, cancel: CancellationFlag) throws -> [StaleUpload]
    func removeStaleUpload(_ upload: StaleUpload, cancel: CancellationFlag) throws
}

extension BlockingDestination {
    func listBackups() async throws -> [BackupListing] {
        try await runBlocking(name: threadName + "-list") { try listBackups(cancel: $0) }
    }

    func upload(file: String, as name: String, progress: ProgressHandler?) async throws {
        try await runBlocking(name: threadName + "-upload") { try upload(file: file, as: name, progress: progress, cancel: $0) }
    }

    func download(_ name: String, to file: String, progress: ProgressHandler?) async throws {
        try await runBlocking(name: threadName + "-download") { try download(name, to: file, progress: progress, cancel: $0) }
    }

    func delete(_ name: String) async throws {
        try await runBlocking(name: threadName + "-delete") { try delete(name, cancel: $0) }
    }

    func preflight() async throws {
        try await runBlocking(name: threadName + "-preflight") { try preflight(cancel: $0) }
    }

    func staleUploads(olderThan age: Double) async throws -> [StaleUpload] {
        try await runBlocking(name: threadName + "-stale") { try staleUploads(olderThan: age, cancel: $0) }
    }

    func removeStaleUpload(_ upload: StaleUpload) async throws {
        try await runBlocking(name: threadName + "-clean") { try removeStaleUpload(upload, cancel: $0) }
    }

    /// Destinations that never leave partial uploads behind have none to list or remove.
    func staleUploads(olderThan age: Double, cancel: CancellationFlag) throws -> [StaleUpload] { [] }
    func removeStaleUpload(_ upload: StaleUpload, cancel: CancellationFlag) throws {}
}
