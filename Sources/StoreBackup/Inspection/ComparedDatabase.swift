/// What ``ChangedRowids`` reads of one copy of a database: its size, its bytes by offset,
/// and rows of its schema table. A backup's database read in place (``BackupDatabase``) is
/// one; a database copied whole into a scratch file (``ScratchDatabaseCopy``) is another.
protocol ComparedDatabase {
    /// The database's size in bytes.
    var size: Int64 { get }
    /// The database's bytes at `offset` (`offset + count` at most ``size``).
    func bytes(at offset: Int64, count: Int) throws -> [UInt8]
    /// The rows of one read-only query of the database.
    func schemaRows(_ sql: String) throws -> [[SQLValue]]
}

extension BackupDatabase: ComparedDatabase {
    func schemaRows(_ sql: String) throws -> [[SQLValue]] {
        try query(sql).first?.rows ?? []
    }
}
