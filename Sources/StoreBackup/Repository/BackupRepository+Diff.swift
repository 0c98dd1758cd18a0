import Foundation

extension BackupRepository {
    /// What changed between backup `older` and `newer` (a later backup, or the live stores
    /// directory): files added, removed and changed, and for each database the rows inserted,
    /// deleted and changed per table and the schema objects added, removed or redefined.
    ///
    /// Files are compared by the SHA-256 each manifest records; a live file is hashed only
    /// when its size matches the backup's. Databases are compared row by row (see
    /// ``RowDiffer``): a backup's small one read in place (``openDatabase(_:path:)``: only
    /// the blocks the comparison reads), a larger one copied into `TMPDIR` first when it
    /// has room (two backups' copies are compared page by page, and only
    /// rows on pages that differ are read); a live one read-only as one committed state
    /// while its app may go on writing; two backups' databases with the same SHA-256 are
    /// not opened. The store is never locked or written.
    ///
    /// - Parameters:
    ///   - older: A backup's name, or `latest`.
    ///   - newer: A later backup, or the live stores directory.
    ///   - options: Which database, tables and rows; whether rows are kept.
    ///   - onRow: Called with each changed row as it is found (database path, table name,
    ///     row), on a worker thread, for a listing that does not collect.
    /// - Throws: ``StoreBackupError/diffRefused(reason:)`` for an unknown database or table,
    ///   the errors of ``contents(of:matching:)`` and ``openDatabase(_:path:)`` (a damaged block
    ///   as ``StoreBackupError/damagedBlock(name:database:block:reason:)``),
    ///   ``StoreBackupError/sqlite(path:operation:message:)`` when a database cannot be read
    ///   or a `filter` is not valid SQL, ``StoreBackupError/cancelled``.
    public func diff(
        _ older: String, _ newer: DiffSide, options: DiffOptions = DiffOptions(),
        onRow: (@Sendable (_ database: String, _ table: String, _ change: RowChange) -> Void)? = nil
    ) async throws -> StoreDiff {
        if !options.tables.isEmpty && options.database == nil {
            throw StoreBackupError.diffRefused(reason: "tables are named within one database: give the database too")
        }
        let olderContents = try await contents(of: older)
        let olderSide = DiffFiles.backup(olderContents)
        let newerName: String
        let newerSide: DiffFiles.Side
        switch newer {
        case .backup(let name):
            let contents = try await contents(of: name)
            newerName = contents.backupName
            newerSide = DiffFiles.backup(contents)
        case .live(let directory):
            newerName = FileSystem.absolutePath(directory)
            newerSide = try await runBlocking(name: "storebackup-diff") { _ in try DiffFiles.live(directory, comparedWith: olderSide) }
        }
        var paths = Set(olderSide.databases.keys).union(newerSide.databases.keys).sorted()
        if let database = options.database {
            guard paths.contains(database) else {
                throw StoreBackupError.diffRefused(
                    reason:
                        "no database \"\(database)\" in \"\(olderContents.backupName)\" or \(newerName) (databases: \(paths.joined(separator: ", ")))"
                )
            }
            paths = [database]
        }
        // Two backups' copies with the same SHA-256 are the same database: nothing to open.
        let toCompare = paths.filter { path in
            guard let before = olderSide.databases[path], let after = newerSide.databases[path] else { return false }
            return before == nil || after == nil || before != after
        }
        var databases: [DatabaseDiff] = []
        for path in paths {
            let inOlder = olderSide.databases[path] != nil, inNewer = newerSide.databases[path] != nil
            guard inOlder && inNewer else {
                databases.append(DatabaseDiff(path: path, presence: inOlder ? .removed : .added, tables: [], schemaChanges: []))
                continue
            }
            guard toCompare.contains(path) else {
                databases.append(DatabaseDiff(path: path, presence: .both, tables: [], schemaChanges: []))
                continue
            }
            // One database open at a time on each side, read in place, closed when compared.
            let compared = try await DiffDatabaseSources.withBackup(self, name: olderContents.backupName, path: path) { older in
                switch newer {
                case .backup:
                    return try await DiffDatabaseSources.withBackup(self, name: newerName, path: path, sharing: older) { newerDatabase in
                        try await compareDatabase(
                            path: path, older: older, newer: .backup(newerDatabase), options: options, onRow: onRow)
                    }
                case .live(let directory):
                    let live = FileSystem.absolutePath(directory) + "/" + path
                    return try await compareDatabase(path: path, older: older, newer: .live(live), options: options, onRow: onRow)
                }
            }
            databases.append(compared)
        }
        let isLive = if case .live = newer { true } else { false }
        return StoreDiff(
            older: olderContents.backupName, newer: newerName, newerIsLive: isLive,
            databases: databases, files: DiffFiles.changes(from: olderSide, to: newerSide))
    }

    /// One database's row diff, on a worker thread; both sides stay open until it returns.
    private func compareDatabase(
        path: String, older: BackupDatabase, newer: DiffDatabaseSources.Newer, options: DiffOptions,
        onRow: (@Sendable (String, String, RowChange) -> Void)?
    ) async throws -> DatabaseDiff {
        let newerBackup: BackupDatabase? = if case .backup(let database) = newer { database } else { nil }
        let chainPages = newerBackup.flatMap { $0.pagesChanged(since: older) }
        let copying = shouldCopy(older, newerBackup)
        do {
            return try await Self.runDiffWork { cancel in
                var scopes: [String: [ClosedRange<Int64>]] = [:]
                var olderURI = older.uri, newerURI = newer.uri
                var copies: ScratchCopies.Made?
                defer { copies?.remove() }
                if let newerBackup, let chainPages, !copying {
                    // Two points of one chain: only rows on pages that changed between them.
                    scopes = try ChangedRowids.scopes(older: older, newer: newerBackup, changed: chainPages) ?? [:]
                } else if copying {
                    // Two points of one chain: of the newer, only the pages changed since the older.
                    let made =
                        if let newerBackup, let chainPages {
                            try ScratchCopies.make(older: older, newer: newerBackup, changed: chainPages, cancel: cancel)
                        } else {
                            try ScratchCopies.make(older: older, newer: newerBackup, cancel: cancel)
                        }
                    copies = made
                    olderURI = made.older.uri
                    if let newerCopy = made.newer {
                        newerURI = newerCopy.uri
                        // Only rows on pages whose bytes differ.
                        if let changed = made.changedPages {
                            scopes = try ChangedRowids.scopes(older: made.older, newer: newerCopy, changed: changed) ?? [:]
                        }
                    }
                }
                // Two scratch copies can be read by a second connection on another thread.
                let differ = try RowDiffer(older: olderURI, newer: newerURI, cancel: cancel, sidesAreFixed: copies?.newer != nil)
                defer { differ.close() }
                let listen: ((String, RowChange) throws -> Void)? = onRow.map { onRow in { table, change in onRow(path, table, change) } }
                return try differ.compare(
                    path: path, tables: options.tables, filter: options.filter, includeUnchanged: options.includeUnchanged,
                    keepRows: options.keepRows, scopes: scopes, onRow: listen)
            }
        } catch {
            throw DiffDatabaseSources.failure(error, older: older, newer: newer)
        }
    }

    /// Whether to copy the backups' databases into `TMPDIR` before comparing them: when one
    /// is large enough that reading it in place would inflate blocks over and over, and
    /// `TMPDIR` has room (else it is read in place, more slowly, and the log says why).
    private func shouldCopy(_ older: BackupDatabase, _ newer: BackupDatabase?) -> Bool {
        guard max(older.size, newer?.size ?? 0) >= diffCopyMinimumBytes else { return false }
        let bytes = older.size + (newer?.size ?? 0)
        if let lack = ScratchCopies.lackOfSpace(for: bytes) {
            logger.warning(
                "diff reads \(older.databasePath) in place, which is much slower for a large database: \(lack); set TMPDIR to a folder with room for a copy"
            )
            return false
        }
        return true
    }

    /// Writes the SQL that brings the selected rows of a live database back to their state
    /// in a backup (see ``RowDiffer/undoSQL(tables:filter:write:)``), one statement per call
    /// of `write`; returns the backup's resolved name. Nothing is written to the store: the
    /// SQL is for the user to read and apply (`sqlite3 DATABASE < undo.sql`).
    ///
    /// - Parameters:
    ///   - name: The backup, or `latest`.
    ///   - storesDirectory: The live stores directory.
    ///   - database: The database's path in it (as `storebackup ls` shows it).
    ///   - tables: The tables to bring back; empty for all.
    ///   - filter: Only rows for which this SQL boolean expression holds on either side.
    ///   - write: Receives each statement in order, on a worker thread.
    /// - Throws: ``StoreBackupError/diffRefused(reason:)`` for a database the backup or the
    ///   live store lacks, an unknown table, or a table whose rows no key names.
    @discardableResult
    public func undoSQL(
        backup name: String, storesDirectory: String, database: String, tables: [String] = [], filter: String? = nil,
        write: @escaping @Sendable (String) -> Void
    ) async throws -> String {
        let contents = try await contents(of: name)
        guard contents.entries.contains(where: { $0.path == database && $0.type == "database" }) else {
            let databases = contents.entries.filter { $0.type == "database" }.map(\.path)
            throw StoreBackupError.diffRefused(
                reason:
                    "backup \"\(contents.backupName)\" holds no database \"\(database)\" (databases: \(databases.joined(separator: ", ")))")
        }
        let live = FileSystem.absolutePath(storesDirectory) + "/" + database
        guard SQLiteHeader.isDatabase(path: live) else {
            throw StoreBackupError.diffRefused(
                reason:
                    "\(live) is not a database in the live store; bring the whole file back with: storebackup extract \"\(contents.backupName)\" \"\(database)\" --into DIR"
            )
        }
        try await DiffDatabaseSources.withBackup(self, name: contents.backupName, path: database) { older in
            let copying = shouldCopy(older, nil)
            do {
                try await Self.runDiffWork { cancel in
                    let copy = copying ? try ScratchCopies.make(older: older, newer: nil, cancel: cancel) : nil
                    defer { copy?.remove() }
                    let differ = try RowDiffer(older: copy?.older.uri ?? older.uri, newer: DiffDatabaseSources.live(live), cancel: cancel)
                    defer { differ.close() }
                    try differ.undoSQL(tables: tables, filter: filter, write: write)
                }
            } catch {
                throw DiffDatabaseSources.failure(error, older: older, newer: .live(live))
            }
        }
        return contents.backupName
    }

    /// Runs SQLite work on a worker thread; a cancelled task interrupts its queries.
    private static func runDiffWork<T: Sendable>(_ work: @escaping @Sendable (CancellationFlag) throws -> T) async throws -> T {
        do {
            return try await runBlocking(name: "storebackup-diff") { cancel in
                do {
                    return try work(cancel)
                } catch {
                    if cancel.isCancelled { throw StoreBackupError.cancelled }
                    throw error
                }
            }
        } catch is CancellationError {
            throw StoreBackupError.cancelled
        }
    }
}
