import Foundation

extension BackupDestination {
    /// Makes every backup that incremental `name` needs at this destination (its chain down
    /// to the full) stay locked at least as long as `name` is (S3 Object Lock): otherwise
    /// the base could be deleted once its own date passed, leaving a locked incremental that
    /// cannot be restored. Called after publishing or copying an incremental. Does nothing
    /// for a full, or when `name` has no retention (every destination but S3, an unlocked
    /// bucket). Returns the backups whose lock was extended, oldest first.
    ///
    /// - Throws: ``StoreBackupError/destination(destination:reason:)`` naming the base whose
    ///   lock could not be extended.
    @discardableResult
    public func extendChainRetention(of name: String) async throws -> [String] {
        guard BackupName.isIncremental(name), let retention = try await retention(of: name) else { return [] }
        var extended: [String] = []
        for base in BackupChains(try await listBackups()).ancestors(of: name) {
            do {
                if try await extendRetention(of: base, to: retention) { extended.append(base) }
            } catch StoreBackupError.cancelled {
                throw StoreBackupError.cancelled
            } catch {
                throw StoreBackupError.destination(
                    destination: displayName,
                    reason:
                        "\"\(name)\" is locked until \(UTCTimestamp.iso8601(retention.until)), but the lock of its base \"\(base)\" could not be extended to match: \(StoreBackupError.wrapping(error).summary)"
                )
            }
        }
        return extended
    }
}
