import Foundation

/// Where `ls` and `extract` read a backup's archive: a file on this machine (a local
/// folder's backup, or a downloaded copy), or a remote backup read in ranges.
enum BrowsedArchive: Sendable {
    case file(String)
    case remote(RemoteArchive)

    /// Opens the archive with every check of ``ArchiveReader``; blocking (call it on the
    /// thread that reads the archive, whose cancellation flag is `cancel`).
    func reader(backupName: String, passwords: PasswordProvider?, cancel: CancellationFlag) throws -> ArchiveReader {
        switch self {
        case .file(let path): try ArchiveReader(path: path, backupName: backupName, passwords: passwords)
        case .remote(let remote): try remote.reader(backupName: backupName, passwords: passwords, cancel: cancel)
        }
    }

    /// Before extract reads `entries` of `reader`: for a remote archive, fetches the small
    /// ones together and checks each one's local header; throws ``DownloadInstead`` when
    /// downloading the whole backup would cost less (most of it is asked for).
    func prepareToRead(_ entries: [ArchiveEntry], of reader: ArchiveReader) throws {
        guard case .remote = self else { return }
        guard try reader.prepareToRead(entries) else { throw DownloadInstead() }
    }
}

/// Thrown inside ``RemoteArchive/withRangedReads(of:in:_:)`` when ranged reads would cost
/// more than a download: the caller downloads the backup.
struct DownloadInstead: Error {}

/// A remote backup read through its destination's ``BackupRangeReader``: the
/// ``RangedArchive`` it is read through once opened, for the failure behind a failed read.
final class RemoteArchive: Sendable {
    let ranges: BackupRangeReader
    private let opened = Locked<RangedArchive?>(nil)

    init(ranges: BackupRangeReader) { self.ranges = ranges }

    func reader(backupName: String, passwords: PasswordProvider?, cancel: CancellationFlag) throws -> ArchiveReader {
        let ranges = self.ranges
        let archive = RangedArchive(size: ranges.size, maxFetchBytes: BackupRangeReader.maxReadBytes) { range in
            try ranges.read(range, cancel: cancel)
        }
        opened.withLock { $0 = archive }
        return try ArchiveReader(ranged: archive, backupName: backupName, passwords: passwords)
    }

    /// Why the last read of the remote archive failed, if one did: libzip reports only
    /// that a read failed, which would read as a damaged archive.
    var lastFailure: StoreBackupError? { opened.current?.lastFailure }
}

extension RemoteArchive {
    /// Runs `body` on `backup` read in ranges, when `destination` serves them; nil when it
    /// does not, or when its server turns out to ignore them (it sends the whole backup),
    /// so the caller downloads the backup instead.
    static func withRangedReads<T: Sendable>(
        of backup: BackupListing, in destination: any BackupDestination, _ body: (BrowsedArchive) async throws -> T
    ) async throws -> T? {
        // A size the listing did not give (or gave wrong) cannot bound ranges: download.
        guard backup.size > 0, let ranges = destination.rangeReader(of: backup.name, size: backup.size) else { return nil }
        let remote = RemoteArchive(ranges: ranges)
        do {
            return try await body(.remote(remote))
        } catch is DownloadInstead {
            return nil
        } catch {
            guard let failure = remote.lastFailure else { throw error }
            if case .transfer(let transfer) = failure, transfer.serviceCode == BackupRangeReader.rangesNotHonoured { return nil }
            throw failure
        }
    }
}

extension BackupBrowser {
    /// ``RemoteArchive/withRangedReads(of:in:_:)`` with this browser's destination.
    func withRangedReads<T: Sendable>(of backup: BackupListing, _ body: (BrowsedArchive) async throws -> T) async throws -> T? {
        try await RemoteArchive.withRangedReads(of: backup, in: destination, body)
    }
}
