import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Reads byte ranges of one backup without downloading it, so `ls` and `extract` of a
/// remote backup fetch its central directory, its manifest and the entries asked for, and
/// nothing else. Made by ``BackupDestination/rangeReader(of:size:)``.
///
/// The calls block: libzip asks for bytes from the thread that reads the archive. Each
/// read asks for at most ``maxReadBytes`` and returns exactly the bytes asked for, or
/// throws; a server that ignores ranges for a large backup, or answers them with other
/// bytes, makes it throw a failure whose ``TransferFailure/serviceCode`` is
/// ``rangesNotHonoured`` (the caller then downloads the backup).
public struct BackupRangeReader: Sendable {
    /// The backup's size in bytes, as the destination listed it.
    public let size: Int64
    /// What each read of a whole backup read in parallel pieces (a restore while it
    /// downloads) asks for: small enough that a piece a reader waits for comes soon while
    /// others share the link, large enough that requests cost little. A service that pays
    /// a connection per read (SFTP) asks for more.
    let pieceBytes: Int64
    /// Fetches a range into memory (returned) or into a file at the range's offset (the
    /// result is empty), after the backend's checks of the answer.
    let readRange: @Sendable (Range<Int64>, RangedRead.Target, CancellationFlag) throws -> Data

    /// A reader whose backend writes into a `.file` target itself, as the answer arrives.
    init(
        size: Int64, pieceBytes: Int64 = 2 << 20,
        fetch: @escaping @Sendable (Range<Int64>, RangedRead.Target, CancellationFlag) throws -> Data
    ) {
        self.size = size
        self.pieceBytes = min(pieceBytes, RangedRead.maxRequestBytes)
        self.readRange = fetch
    }

    /// A reader whose backend only returns bytes: a `.file` target gets them written after.
    init(
        size: Int64, pieceBytes: Int64 = 2 << 20, read: @escaping @Sendable (Range<Int64>, CancellationFlag) throws -> Data
    ) {
        self.init(size: size, pieceBytes: pieceBytes) { range, target, cancel in
            let data = try read(range, cancel)
            guard case .file(let descriptor) = target else { return data }
            guard data.count == range.count else { throw Self.shortRead(data.count, of: range) }
            try data.withUnsafeBytes { try Self.write($0, at: range.lowerBound, descriptor: descriptor) }
            return Data()
        }
    }

    /// The most bytes one read may ask for.
    public static var maxReadBytes: Int64 { RangedRead.maxRequestBytes }
    /// The service code of a failure where the server does not serve ranges of this backup.
    public static var rangesNotHonoured: String { RangedRead.notHonoured }

    /// The bytes `range` of the backup.
    func read(_ range: Range<Int64>, cancel: CancellationFlag) throws -> Data {
        guard range.lowerBound >= 0, range.upperBound <= size, Int64(range.count) <= Self.maxReadBytes else {
            throw StoreBackupError.transferFailed(
                .other, label: "", "cannot read bytes \(range.lowerBound)..<\(range.upperBound) of a backup of \(size)")
        }
        if range.isEmpty { return Data() }
        let data = try readRange(range, .memory, cancel)
        // Every backend checks its answer; this holds whatever a backend of one's own does.
        guard data.count == range.count else { throw Self.shortRead(data.count, of: range) }
        return data
    }

    /// Writes the bytes `range` of the backup at the same offset in `descriptor` as they
    /// arrive, so a whole backup read in parallel ranges holds no answer in memory. Returns
    /// only once every byte of the range was received and checked; on a failure the range's
    /// bytes in the file are undefined (asking again rewrites them from the start).
    func read(_ range: Range<Int64>, into descriptor: Int32, cancel: CancellationFlag) throws {
        guard range.lowerBound >= 0, range.upperBound <= size, Int64(range.count) <= Self.maxReadBytes else {
            throw StoreBackupError.transferFailed(
                .other, label: "", "cannot read bytes \(range.lowerBound)..<\(range.upperBound) of a backup of \(size)")
        }
        if range.isEmpty { return }
        let data = try readRange(range, .file(descriptor: descriptor), cancel)
        // Bytes handed back instead of written are a backend's short answer.
        guard data.isEmpty else { throw Self.shortRead(data.count, of: range) }
    }

    private static func shortRead(_ count: Int, of range: Range<Int64>) -> StoreBackupError {
        StoreBackupError.transferFailed(
            .other, label: "", "a ranged read returned \(count) of \(range.count) bytes", serviceCode: rangesNotHonoured)
    }

    private static func write(_ bytes: UnsafeRawBufferPointer, at offset: Int64, descriptor: Int32) throws {
        var written = 0
        while written < bytes.count {
            let result = pwrite(descriptor, bytes.baseAddress! + written, bytes.count - written, off_t(offset) + off_t(written))
            if result < 0 {
                if errno == EINTR { continue }
                throw StoreBackupError.io(path: "", operation: "write downloaded bytes", errno: errno)
            }
            written += result
        }
    }
}

extension BackupDestination {
    /// No ranged reads by default: `ls` and `extract` download the whole backup.
    public func rangeReader(of name: String, size: Int64) -> BackupRangeReader? { nil }
}

extension WrappingDestination {
    /// Forwarded to ``base``.
    public func rangeReader(of name: String, size: Int64) -> BackupRangeReader? { base.rangeReader(of: name, size: size) }
}

extension RetryingDestination {
    /// The base's reader, with one retry budget for all its reads (they make one `ls` or
    /// `extract`): requests retry inside it as every request does, and a read that failed
    /// in a way that heals (a busy service past its request's tries) is tried again from
    /// the same budget.
    public func rangeReader(of name: String, size: Int64) -> BackupRangeReader? {
        guard let reader = base.rangeReader(of: name, size: size) else { return nil }
        let budget = RetryBudget(policy: policy)
        let logger = self.logger, displayName = self.displayName
        return BackupRangeReader(size: size, pieceBytes: reader.pieceBytes) { range, target, cancel in
            try WorkerPool.$operationBudget.withValue(budget) {
                var attempt = 1
                while true {
                    do {
                        return try reader.readRange(range, target, cancel)
                    } catch StoreBackupError.transfer(let failure) where failure.isRetryable {
                        let delay = try Self.nextTry(
                            after: failure, attempt: attempt, budget: budget, logger: logger, what: displayName + " (a ranged read)")
                        try RetryPolicy.wait(seconds: delay, cancel: cancel)
                        attempt += 1
                    }
                }
            }
        }
    }
}

extension LocalFolderDestination {
    /// `pread` of the backup file (`ls` and `extract` read a local backup in place anyway;
    /// this serves callers that read ranges of any destination alike).
    public func rangeReader(of name: String, size: Int64) -> BackupRangeReader? {
        guard let path = localPath(of: name) else { return nil }
        return BackupRangeReader(size: size) { range, _ in
            let descriptor = open(path, O_RDONLY | O_CLOEXEC)
            guard descriptor >= 0 else { throw StoreBackupError.io(path: path, operation: "open", errno: errno) }
            defer { close(descriptor) }
            var data = Data(count: range.count)
            let got = try data.withUnsafeMutableBytes {
                try PositionedRead.fill(descriptor, into: $0, at: Int64(range.lowerBound), path: path)
            }
            guard got == range.count else {
                throw StoreBackupError.corruptArchive(name: name, reason: "it ends early (it changed while read?)")
            }
            return data
        }
    }
}
